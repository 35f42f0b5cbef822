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
from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from oracles.douglas_rachford import FedDRServer
from oracles.feddr_client import POINT_KEY
from oracles.feddr_settings import FedDRSettings, feddr_settings
from strategies.build import BuildContext, projected_start
from strategies.federated_metrics import aggregate_evaluation_sums
from strategies.node_book import NodeBook


class FedDRStrategy(Strategy):
    """FedDR on Flower's Message API: per-node sync, reply validation, partial participation."""

    def __init__(self, dr: FedDRSettings, layout: ParamLayout, x0: Params, seed: int) -> None:
        self.dr, self.layout, self.x0 = dr, layout, x0
        self.xbar = x0
        self.rng = np.random.default_rng(seed)
        self.server: FedDRServer | None = None
        self.book: NodeBook | None = None

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
        self.book = NodeBook(sorted(grid.get_node_ids()), "FedDR", self.layout, POINT_KEY)
        self.server = FedDRServer(self.x0, self.book.node_ids)

    # -- training ----------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Send x-bar to a seeded sample of int(p n) nodes, at least one (as Flower's FedAvg)."""
        if self.server is None:
            self._start(grid)
        node_ids = self.book.node_ids
        size = max(1, int(self.dr.participation * len(node_ids)))
        # sample positions: node ids are uint64 and would lose digits in a float array
        picked = self.rng.choice(len(node_ids), size=size, replace=False)
        chosen = sorted(node_ids[i] for i in picked)
        xbar_wire = params_to_record(self.layout, self.xbar)
        messages = [self.book.train_message(node, server_round, self.xbar, xbar_wire,
                                            self.server.x_hat_of) for node in chosen]
        log(INFO, "FedDR round %d: %d of %d nodes participate", server_round, len(chosen),
            len(node_ids))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Keep the valid x_hat_i, then x-bar = proj_D(mean of every node's last x_hat_i)."""
        received, rejected = self.book.screen(server_round, replies, self._checked_x_hat)
        domain = self.dr.domain
        self.xbar = self.server.aggregate(received, domain.constraint, domain.scope)
        self.book.accept(server_round, received)
        metrics = MetricRecord({"failures": rejected, "participants": len(received)})
        return params_to_record(self.layout, self.xbar), metrics

    def _checked_x_hat(self, node: int, reply: Message) -> Params:
        """Decode x_hat_i: the model's names and shapes, finite floats."""
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
        return self.book.evaluate_messages(server_round, self.xbar)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        good = [r.content for r in replies if not r.has_error()]
        return aggregate_evaluation_sums(good, "num-examples")


def build_feddr(ctx: BuildContext) -> FedDRStrategy:
    """FedDR from the ``feddr.*`` table, over D from the ``fedfw.*`` keys."""
    dr = feddr_settings(ctx.settings)
    layout, x0 = projected_start(ctx, dr.domain)
    return FedDRStrategy(dr, layout, x0, ctx.settings.seed)
