"""Server half of FedFW / FedFW+ / FedFW-sto: checks extreme points, mirrors every x_i, averages.

One round (Algorithm 1): each sampled node gets x-bar^t and returns s_i^t in compact form;
the server decodes and checks s_i against that node's D_i, mirrors
x_i <- (1 - eta_t) x_i + eta_t s_i for the accepted points only, and x-bar^{t+1} is the exact
mean of all mirrored x_i (section 4.2: non-participants keep x_i).
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
from functions.extreme_points import decode_model_point
from functions.params import ParamLayout, Params, params_to_record, record_to_arrays, record_to_params
from oracles.fedfw_client import POINT_KEY
from oracles.fedfw_settings import ConstraintSet, FedFWSettings, fedfw_settings
from oracles.frank_wolfe import fw_gap
from oracles.lmo import Constraint, make_constraint
from strategies.build import BuildContext, projected_start
from strategies.federated_metrics import aggregate_evaluation_sums
from strategies.fedfw_mirror import ConsensusMirror
from strategies.node_book import NodeBook
from tasks.errors import ConfigError


class FedFWStrategy(Strategy):
    """FedFW family on Flower's Message API, with partial participation and per-node D_i."""

    def __init__(self, fw: FedFWSettings, layout: ParamLayout, x0: Params, seed: int) -> None:
        """``x0``: x^1 of every client, already in D and float32-exact (``projected_start``)."""
        self.fw, self.layout, self.x0 = fw, layout, x0
        self.rng = np.random.default_rng(seed)
        self.mirror: ConsensusMirror | None = None
        self.book: NodeBook | None = None
        self.node_sets: dict[int, Constraint] = {}

    def initial_arrays(self) -> ArrayRecord:
        """x-bar^1: the model's initial weights projected onto D (float32-exact)."""
        return params_to_record(self.layout, self.x0)

    # -- set-up --------------------------------------------------------------------
    def summary(self) -> None:
        fw = self.fw
        log(INFO, "\t%s: D = %s ball of radius %s (%s), schedule %s (lambda0=%s), p=%s",
            fw.variant, fw.constraint.kind, fw.constraint.radius, fw.scope, fw.schedule.kind,
            fw.schedule.lambda0, fw.participation)

    def _start(self, grid: Grid) -> None:
        """Ask every node for its D_i and partition id (query.bounds); fix the client order."""
        node_ids = sorted(grid.get_node_ids())
        partitions: dict[int, int] = {}
        queries = [Message(RecordDict(), n, "query.bounds") for n in node_ids]
        for reply in grid.send_and_receive(queries):
            node = reply.metadata.src_node_id
            try:
                self.node_sets[node] = self._declared_set(reply)
                partitions[node] = int(reply.content["bounds"]["partition-id"])
            except (ConfigError, DecodeError, KeyError, TypeError, ValueError) as err:
                log(WARNING, "node %s: unusable bounds reply (%s); it uses the run's D", node, err)
        for node in node_ids:
            self.node_sets.setdefault(node, self.fw.constraint)
        # Flower's node ids are random per run; partition ids make sampling reproducible
        order = sorted(node_ids, key=lambda n: (partitions.get(n, len(node_ids)), n))
        self.book = NodeBook(order, "FedFW", self.layout, POINT_KEY)
        self.mirror = ConsensusMirror(self.x0, order)
        log(INFO, "FedFW: %d clients; node sets: %s", len(order), sorted(
            {f"{c.kind}({c.radius:g})" for c in self.node_sets.values()}))

    @staticmethod
    def _declared_set(reply: Message) -> Constraint:
        if reply.has_error():
            raise DecodeError(reply.error.reason)
        bounds = reply.content["bounds"]
        return make_constraint(str(bounds["constraint"]), float(bounds["radius"]))

    # -- training ----------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if self.mirror is None:
            self._start(grid)
        node_ids = self.book.node_ids
        chosen = [n for n in node_ids if self.rng.random() < self.fw.participation]
        xbar = self.mirror.x_bar
        xbar_wire = params_to_record(self.layout, xbar)
        messages = [self.book.train_message(node, server_round, xbar, xbar_wire, self.mirror.x_of,
                                            **{"num-clients": len(node_ids)})
                    for node in chosen]
        log(INFO, "FedFW round %d: %d of %d nodes participate", server_round, len(chosen),
            len(node_ids))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        points, rejected = self.book.screen(server_round, replies, self._checked_point)
        eta = self.fw.schedule.eta(server_round)
        self.mirror.apply(points, eta)
        self.book.accept(server_round, points)
        metrics = MetricRecord({
            "failures": rejected,  # points that failed the checks; error replies add to it
            "participants": len(points),
            "eta": eta,
            "lambda": self.fw.schedule.lam(server_round),
            "consensus_distance": self.mirror.consensus_distance(),
        })
        return params_to_record(self.layout, self.mirror.x_bar), metrics

    def _checked_point(self, node: int, reply: Message) -> Params:
        """Decode s_i and check it lies in the node's declared D_i (decoders validate)."""
        record = reply.content.array_records.get("point")
        if record is None:
            raise DecodeError("reply has no 'point' record")
        constraint = self.node_sets[node]
        point = decode_model_point(constraint, record_to_arrays(record), self.layout.shapes,
                                   self.fw.scope)
        balls = [np.concatenate([np.ravel(p) for p in point])] if self.fw.scope == "global" else point
        if not all(constraint.contains(ball) for ball in balls):
            raise DecodeError(f"point outside {constraint.kind} ball of radius {constraint.radius}")
        return point

    # -- evaluation ----------------------------------------------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if not self.fw.federated_eval:
            return []
        return self.book.evaluate_messages(server_round, self.mirror.x_bar,
                                           **{"fw-gap": self.fw.gap})

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        good = [r for r in replies if not r.has_error()]
        metrics = aggregate_evaluation_sums([r.content for r in good], "num-examples")
        if self.fw.gap:
            grads = []
            for reply in good:
                try:
                    grads.append(record_to_params(reply.content["grad"], self.layout))
                except (DecodeError, KeyError) as err:
                    log(WARNING, "node %s: unusable gradient (%s)", reply.metadata.src_node_id, err)
            if len(grads) == len(self.mirror.client_ids):
                metrics["fw_gap"] = fw_gap(grads, self.mirror.x_bar, self.fw.constraint,
                                           self.fw.scope, len(grads))
        return metrics


def build_fedfw(ctx: BuildContext) -> FedFWStrategy:
    """FedFW, FedFW+ or FedFW-sto (``algorithm``) from the ``fedfw.*`` table."""
    fw = fedfw_settings(ctx.settings)
    layout, x0 = projected_start(ctx, ConstraintSet(fw.constraint, fw.scope))
    return FedFWStrategy(fw, layout, x0, ctx.settings.seed)
