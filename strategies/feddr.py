"""Server half of FedDR (Tran-Dinh et al. 2021, Algorithm 1) with g = indicator of D.

One round: the sampled nodes get x-bar (dense float32) and reply with x_hat_i; the server
validates each reply, keeps the last accepted x_hat_i of every node (``FedDRServer``), and
sets x-bar = proj_D(mean_i x_hat_i) over all nodes. D is read from the ``fedfw.*`` keys, so
``algorithm='feddr' fedfw.constraint='l1' fedfw.radius=10`` solves the same problem as FedFW.
A rejected x_hat_i is not accepted: the server keeps the node's previous one, and the node,
told by ``last-accepted``, drops its pending step (see ``client_app.feddr``).

With ``secure-aggregation`` the server keeps no x_hat_i: each node sends the change of its x_hat_i
in the round into a secure sum, and x-bar is proj_D of their mean from the running sum
(``strategies.held_sum``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.params import Params, params_to_record, record_to_params
from functions.protocol import DR_XHAT, EVALUATE_FIRST, XBAR
from oracles.douglas_rachford import FedDRServer, project_params
from run_config.common import RunSettings
from run_config.feddr import FedDRSettings, feddr_settings
from strategies.held_vectors import HeldVectorStrategy
from strategies.sampling import Sampler
from strategies.screening import exact_records
from strategies.secure_training import SecureTraining
from strategies.state_codec import LAYOUT
from strategies.torch_model import TorchGlobal
from tasks.datasets import TaskData


@dataclass
class FedDRState:
    """What FedDR continues from: x-bar and every node's last x_hat_i by roster position."""

    xbar: Params
    x_hats: dict[int, Params]


@dataclass
class FedDRSecureState:
    """With secure aggregation, what FedDR continues from: x-bar, where every node restarts at
    consensus (``strategies.held_sum``)."""

    xbar: Params


class FedDRStrategy(HeldVectorStrategy):
    """FedDR on Flower's Message API: per-node sync, reply validation, partial participation.

    Every node's last x_hat_i is kept by roster position (``FedDRServer``), so a returning node
    finds its partition's x_hat_i where its slot is."""

    label = "FedDR"
    held_name = "x_hat_i"
    State = FedDRState

    def __init__(
        self,
        dr: FedDRSettings,
        model: TorchGlobal,
        x0: Params,
        seed: int,
        secure_bound: float | None = None,
        num_rounds: int = 0,
    ) -> None:
        """``secure_bound``: with secure aggregation, the largest change of an element of
        x_hat_i in a round (None: plain replies)."""
        super().__init__(num_rounds)
        self.dr, self.model, self.x0 = dr, model, x0
        self.xbar = x0
        self.sampler = Sampler(dr.participation, seed)
        self.server: FedDRServer | None = None
        self.secure_bound = secure_bound
        if secure_bound is not None:
            self.secure_training = SecureTraining(self.label, seed)
            self.State = FedDRSecureState

    def initial_arrays(self) -> ArrayRecord:
        """x-bar^0: the model's initial weights projected onto D (float32-exact)."""
        return params_to_record(self.layout, self.x0)

    def summary(self) -> None:
        dr, d = self.dr, self.dr.domain
        log(
            INFO,
            "\tFedDR: D = %s ball of radius %s (%s), alpha=%s, eta=%s, %d local steps "
            "(lr=%s, batch %s), p=%s",
            d.constraint.kind,
            d.constraint.radius,
            d.scope,
            dr.alpha,
            dr.eta,
            dr.local_steps,
            dr.lr,
            dr.batch_size or "full",
            dr.participation,
        )

    def on_roster(self, grid: Grid, server_round: int) -> None:
        """Every x_hat_i starts at x^0 (``feddr_client_init``)."""
        if self.secure_training is not None:
            self.held = self.hold(self.x0)
        else:
            self.server = FedDRServer(self.x0, range(self.book.positions))

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """The new node's x_hat_i starts at x-bar (its first message syncs it there), so x-bar
        stays until it steps; with secure aggregation every node restarts at x-bar."""
        if self.server is not None:
            self.server.add(self.book.position(node), self.xbar)
        super().on_join(node, grid, server_round)

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """x-bar is the projected mean over the other nodes' x_hat_i from now on."""
        if self.server is not None:
            self.server.remove(position)
            domain = self.dr.domain
            self.xbar = self.server.aggregate({}, domain.constraint, domain.scope)
        super().on_leave(node, position, server_round)

    # -- training ----------------------------------------------------------------
    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """x-bar to the sampled nodes; a node that may hold nothing restarts from its x_hat_i;
        ``evaluate-first`` when the last round's evaluation rides on these messages."""
        content = {XBAR: params_to_record(self.layout, self.xbar)}
        due = {} if self.evaluation_due is None else {EVALUATE_FIRST: True}

        def restart(node: int) -> tuple[str, dict]:
            return self.restart(node, self.xbar, lambda p: self.server.x_hat_of(p), DR_XHAT)

        messages = [
            self.book.train_message(node, server_round, content, restart, **due) for node in nodes
        ]
        log(
            INFO,
            "FedDR round %d: %d of %d nodes participate",
            server_round,
            len(nodes),
            len(self.book.node_ids),
        )
        return self.as_secure_sum(grid, server_round, messages, self.secure_bound)

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        """Keep the valid x_hat_i, then x-bar = proj_D(mean of every node's last x_hat_i)
        (with secure aggregation, from their running sum)."""
        domain = self.dr.domain
        if self.held is not None:
            participants = self.add_secure_round(server_round)
            if participants:
                self.xbar = project_params(domain.constraint, self.held.mean, domain.scope)
            return params_to_record(self.layout, self.xbar), {"participants": participants}
        received = self.screen(server_round, replies, self._checked_x_hat)
        self.xbar = self.server.aggregate(
            {self.book.position(n): x for n, x in received.items()}, domain.constraint, domain.scope
        )
        self.book.accept(server_round, received)
        return params_to_record(self.layout, self.xbar), {"participants": len(received)}

    def _checked_x_hat(self, reply: Message) -> Params:
        """Decode x_hat_i: the model's names and shapes, finite float32."""
        record = exact_records(reply.content, {DR_XHAT: ArrayRecord})[DR_XHAT]
        return record_to_params(record, self.layout, np.float32)

    # -- evaluation ----------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message brings x-bar of round t."""
        return self.dr.federated_eval and self.dr.eval_with_train

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """F(x-bar) on every node's data (gives ``train_loss``), unless switched off; nothing
        when it rides on the next round's training."""
        if not self.dr.federated_eval:
            return []
        if self.defers_evaluation(server_round):
            return []
        return self.book.evaluate_messages(
            server_round, {XBAR: params_to_record(self.layout, self.xbar)}
        )

    # -- state -----------------------------------------------------------------------
    def state_context(self) -> dict[str, Any]:
        return {**super().state_context(), LAYOUT: self.layout}

    def family_state(self) -> FedDRState | FedDRSecureState | None:
        if self.held is not None:
            return FedDRSecureState(self.xbar)
        return None if self.server is None else FedDRState(self.xbar, self.server.x_hats())

    def load_family_state(self, state: FedDRState | FedDRSecureState) -> None:
        self.xbar = state.xbar
        if isinstance(state, FedDRSecureState):
            self.held = self.hold(state.xbar)
        else:
            if sorted(state.x_hats) != self.book.active_positions:
                raise DecodeError(
                    f"x_hats at positions {sorted(state.x_hats)}, the run's nodes are at "
                    f"{self.book.active_positions}"
                )
            self.server = FedDRServer.restore(state.x_hats)


def build_feddr(settings: RunSettings, task: TaskData) -> FedDRStrategy:
    """FedDR from the ``feddr.*`` table, over D from the ``fedfw.*`` keys."""
    dr = feddr_settings(settings)
    model = TorchGlobal(settings, task)
    x0 = model.projected_start(dr.domain)
    bound = settings.secure_bound if settings.secure_aggregation else None
    return FedDRStrategy(dr, model, x0, settings.seed, bound, settings.num_rounds)
