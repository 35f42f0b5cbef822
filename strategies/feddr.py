"""Server half of FedDR (Tran-Dinh et al. 2021, Algorithm 1) with g = indicator of D.

One round: the sampled nodes get x-bar (dense float32) and reply with x_hat_i; the server
validates each reply, keeps the last accepted x_hat_i of every node (``FedDRServer``), and
sets x-bar = proj_D(mean_i x_hat_i) over all nodes. D is read from the ``fedfw.*`` keys, so
``algorithm='feddr' fedfw.constraint='l1' fedfw.radius=10`` solves the same problem as FedFW.
A rejected x_hat_i is not accepted: the server keeps the node's previous one, and the node,
told by ``last-accepted``, drops its pending step (see ``oracles.feddr_client``).
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from oracles.douglas_rachford import FedDRServer
from oracles.feddr_client import SYNC_FROM_XBAR, SYNC_FROM_XHAT, SYNC_NONE
from oracles.feddr_settings import FedDRSettings, feddr_settings
from strategies.build import BuildContext
from strategies.federated_metrics import aggregate_evaluation_sums
from strategies.projected_fedavg import projected_start


class _Server(FedDRServer):
    """``FedDRServer`` that also tells a node's last accepted x_hat_i (its restart point)."""

    def x_hat_of(self, node: int) -> Params:
        return [a.copy() for a in self._x_hats[node]]


class FedDRStrategy(Strategy):
    """FedDR on Flower's Message API: per-node sync, reply validation, partial participation."""

    def __init__(self, dr: FedDRSettings, layout: ParamLayout, x0: Params, seed: int) -> None:
        self.dr, self.layout, self.x0 = dr, layout, x0
        self.xbar = x0
        self.rng = np.random.default_rng(seed)
        self.server: _Server | None = None
        self.node_ids: list[int] = []
        self.last_accepted: dict[int, int] = {}
        self.needs_sync: dict[int, bool] = {}

    def initial_arrays(self) -> ArrayRecord:
        """x-bar^0: the model's initial weights projected onto D (float32-exact)."""
        return params_to_record(self.layout, self.x0)

    def summary(self) -> None:
        dr, d = self.dr, self.dr.domain
        log(INFO, "\tFedDR: D = %s ball of radius %s (%s), alpha=%s, eta=%s, %d local steps "
            "(lr=%s, batch %s), p=%s", d.constraint.kind, d.constraint.radius, d.scope, dr.alpha,
            dr.eta, dr.local_steps, dr.lr, dr.batch_size or "full", dr.participation)

    def _start(self, grid: Grid) -> None:
        """Fix the client set; every x_hat_i starts at x^0 (``feddr_client_init``)."""
        self.node_ids = sorted(grid.get_node_ids())
        self.server = _Server(self.x0, self.node_ids)
        self.last_accepted = {n: 0 for n in self.node_ids}
        self.needs_sync = {n: True for n in self.node_ids}

    # -- training ----------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send x-bar to a seeded sample of round(p n) nodes (at least one)."""
        if self.server is None:
            self._start(grid)
        size = max(1, round(self.dr.participation * len(self.node_ids)))
        chosen = sorted(self.rng.choice(self.node_ids, size=size, replace=False).tolist())
        xbar_wire = params_to_record(self.layout, self.xbar)
        xbar_exact = [np.asarray(p, np.float32).astype(np.float64) for p in self.xbar]
        messages = []
        for node in chosen:
            content = RecordDict({"xbar": xbar_wire})
            sync = SYNC_NONE
            if self.needs_sync[node]:
                restart = self.server.x_hat_of(node)
                if all(np.array_equal(a, b) for a, b in zip(restart, xbar_exact)):
                    sync = SYNC_FROM_XBAR
                else:
                    sync = SYNC_FROM_XHAT
                    content["xhat"] = params_to_record(self.layout, restart)
            content["config"] = ConfigRecord({
                "server-round": server_round, "last-accepted": self.last_accepted[node],
                "sync": sync,
            })
            messages.append(Message(content, node, "train", group_id=str(server_round)))
        log(INFO, "FedDR round %d: %d of %d nodes participate", server_round, len(chosen),
            len(self.node_ids))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Keep the valid x_hat_i, then x-bar = proj_D(mean of every node's last x_hat_i)."""
        received: dict[int, Params] = {}
        rejected = 0
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():  # counted as a failure by the metered grid
                self.needs_sync[node] = True
                log(WARNING, "FedDR round %d: node %s failed: %s", server_round, node,
                    reply.error.reason)
                continue
            try:
                received[node] = self._checked_x_hat(node, reply)
            except DecodeError as err:
                rejected += 1
                log(WARNING, "FedDR round %d: dropped x_hat of node %s: %s", server_round, node,
                    err)
        domain = self.dr.domain
        self.xbar = self.server.aggregate(received, domain.constraint, domain.scope)
        for node in received:
            self.last_accepted[node] = server_round
            self.needs_sync[node] = False
        metrics = MetricRecord({"failures": rejected, "participants": len(received)})
        return params_to_record(self.layout, self.xbar), metrics

    def _checked_x_hat(self, node: int, reply: Message) -> Params:
        """Decode x_hat_i: a known node, the model's names and shapes, finite floats."""
        if node not in self.last_accepted:
            raise DecodeError("reply from a node outside the federation")
        record = reply.content.array_records.get("xhat")
        if record is None:
            raise DecodeError("reply has no 'xhat' record")
        return record_to_params(record, self.layout)

    # -- evaluation ----------------------------------------------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """F(x-bar) on every node's data (gives ``train_loss``), unless switched off."""
        if not self.dr.federated_eval:
            return []
        content = RecordDict({"xbar": params_to_record(self.layout, self.xbar),
                              "config": ConfigRecord({"server-round": server_round})})
        return [Message(content, node, "evaluate", group_id=str(server_round))
                for node in self.node_ids]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        good = [r.content for r in replies if not r.has_error()]
        return aggregate_evaluation_sums(good, "num-examples")


def build_feddr(ctx: BuildContext) -> FedDRStrategy:
    """FedDR from the ``feddr.*`` table, over D from the ``fedfw.*`` keys."""
    dr = feddr_settings(ctx.settings)
    layout, x0 = projected_start(ctx, dr.domain)
    return FedDRStrategy(dr, layout, x0, ctx.settings.seed)
