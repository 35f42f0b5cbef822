"""Server half of FedFun (FSR) and its decentralised baselines: a relay, not an aggregator.

The nodes learn on a communication graph over partition ids (``oracles.graphs``). The server
agrees the domain box once (``strategies.bounds``), has every node fit h_i^0 = argmin R_i
(round 0), and from then on sends each node the models of its graph neighbours that changed
since it last received them (``strategies.relay``); it never averages them. Replies are decoded
only to check them (a malformed or foreign-architecture model is dropped and counted, never
relayed). With federated evaluation on, the evaluate message already carries the round's new
neighbour models, so the node measures its disagreement with them and the next train message
sends nothing twice. Metrics: the spread of the node models' accuracies (mean, min, max) and
``consensus_distance``, the mean squared function-space distance between neighbours.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.node_models import TREE, decode_node_model
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import (
    BOUNDS,
    CONFIG,
    CONSENSUS,
    EVALUATE,
    INITIAL,
    LOCAL_ACCURACY,
    LOSS,
    METRICS,
    MODEL_ARRAYS,
    MODELS,
    NEIGHBOUR_COUNT,
    NEIGHBOURS,
    NUM_PARTITIONS,
    OWN_PREFIX,
    PARTITION_ID,
    REPLY_PREFIX,
    SERVER_ROUND,
    SETUP,
    TEST_ACCURACY,
    TRAIN,
    TRAIN_ACCURACY,
    TRAIN_EXAMPLES,
)
from oracles.graphs import Graph, make_graph
from run_config.common import RunSettings
from run_config.fedfun import FSR, FedFunSettings, fedfun_settings, model_limits
from strategies.base import FederatedStrategy
from strategies.bounds import AgreedBounds, query_bounds
from strategies.evaluation import checked_count, checked_metrics, example_limit, spread_over_nodes
from strategies.node_book import NodeBook
from strategies.relay import RelayBook
from strategies.roster import Roster, rekeyed
from strategies.screening import exact_records, screen_replies
from tasks.datasets import TaskData
from tasks.errors import ConfigError
from tasks.federation import task_for

EVALUATION_KEYS = (TEST_ACCURACY, TRAIN_ACCURACY, LOCAL_ACCURACY, CONSENSUS, NEIGHBOUR_COUNT)


class FedFunStrategy(FederatedStrategy):
    """The relay on Flower's Message API (one strategy for FSR and the four baselines)."""

    label = "FedFun"

    def __init__(self, fedfun: FedFunSettings, task: TaskData, seed: int) -> None:
        self.fedfun, self.task, self.seed = fedfun, task, seed
        self.limits = model_limits(fedfun, task)
        self.roster: Roster | None = None
        self.book: NodeBook | None = None
        self.relay: RelayBook | None = None
        self.vertex_of: dict[int, int] = {}  # node id -> partition id (graph vertex)
        self.bounds: AgreedBounds | None = None
        self._setup_failures = 0

    # -- set-up ---------------------------------------------------------------------------------
    def graph_for(self, n: int) -> Graph:
        f = self.fedfun
        try:
            return make_graph(f.topology, n, self.seed, degree=f.degree,
                              probability=f.probability, edges=f.edges)
        except ValueError as err:
            raise ConfigError(f"fedfun.topology={f.topology!r} on {n} nodes: {err}") from None

    def check_federation(self, num_nodes: int) -> None:
        self.graph_for(num_nodes)

    def summary(self) -> None:
        f = self.fedfun
        model = (f"{f.learner} {f.hidden}" if f.learner == "mlp" else "KDDT")
        log(INFO, "\t%s: %s, lambda=%s, gamma=%s, delta=%s, b'=%d, %s step, %d initial and %d "
            "local steps", f.algorithm, model, f.lam, f.gamma or "auto", f.delta,
            f.penalty_samples, f.step, f.round_zero_steps(), f.local_steps)

    def description(self) -> dict[str, Any]:
        return {"kind": "node models", "learner": self.fedfun.learner,
                "topology": self.fedfun.topology}

    def _start(self, grid: Grid, server_round: int) -> None:
        """Roster, graph, domain box and round 0 (h_i^0 = argmin R_i), before round 1."""
        self.roster, failures = self.query_roster(grid, server_round)
        self.vertex_of = {n: int(self.roster.facts[n][PARTITION_ID])  # in partition order
                          for n in self.roster.node_ids}
        totals = {int(f[NUM_PARTITIONS]) for f in self.roster.facts.values()}
        if len(totals) != 1:
            raise RuntimeError(f"{self.label}: nodes disagree on num-partitions: {sorted(totals)}")
        graph = self.graph_for(totals.pop())
        self.relay = RelayBook(graph)
        self.book = NodeBook(list(self.vertex_of), self.label)
        log(INFO, "%s: graph %s; gamma=%.4g", self.label, graph.describe(),
            self.fedfun.gamma_for(graph.spectral_norm()))
        self.bounds, rejected = query_bounds(grid, self.label, server_round, self.book.node_ids,
                                             self.limits.n_features, example_limit(self.task))
        log(INFO, "%s: domain agreed from the nodes' bounds (%d training samples in all)",
            self.label, self.bounds.samples)
        replies = grid.send_and_receive([self._message(node, 0, TRAIN, initial=True)
                                         for node in self.book.node_ids])
        good, dropped = self._store_replies(0, replies)
        log(INFO, "%s round 0: %d of %d nodes fitted h^0 (local training only)", self.label,
            len(good), len(self.book.node_ids))
        self._setup_failures = failures + rejected + dropped

    def rebind(self, old: int, new: int) -> None:
        """The returning node serves the same vertex and holds nothing: its next message
        carries the domain, its own last model and all its neighbours' models."""
        self.vertex_of = rekeyed(self.vertex_of, old, new)
        self.book.rebind(old, new)
        self.relay.forget_deliveries(self.vertex_of[new])

    # -- messages -------------------------------------------------------------------------------
    def _message(self, node: int, server_round: int, kind: str, initial: bool = False) -> Message:
        """This node's message: its own model's version, its neighbours' models that it lacks,
        and on first contact or after a loss the domain and its own last accepted model."""
        vertex, relay = self.vertex_of[node], self.relay
        everything = self.book.needs_sync[node]
        listing, send = relay.outgoing(vertex, everything)
        models = relay.neighbour_models(send)
        config = {SERVER_ROUND: server_round, "own-version": relay.own_version(vertex),
                  "gamma": self.fedfun.gamma_for(relay.graph.spectral_norm()),
                  "degree": relay.graph.degree(vertex), INITIAL: initial}
        content = RecordDict({CONFIG: ConfigRecord(config), NEIGHBOURS: ConfigRecord(listing)})
        if everything:
            content[SETUP] = ConfigRecord({TRAIN_EXAMPLES: self.bounds.samples})
            content[BOUNDS] = arrays_to_record({"lower": self.bounds.lower,
                                                "upper": self.bounds.upper})
            if vertex in relay.latest:
                models[OWN_PREFIX] = relay.latest[vertex]
        content[MODELS], content[MODEL_ARRAYS] = relay.model_records(models)
        relay.mark_delivered(vertex, send, everything)
        self.book.needs_sync[node] = False
        return Message(content, node, kind, group_id=str(server_round))

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if self.roster is None:
            self._start(grid, server_round)
        else:
            self._setup_failures += self.returning_nodes(grid, server_round)
        log(INFO, "%s round %d: relaying neighbour models to %d nodes", self.label, server_round,
            len(self.book.node_ids))
        return [self._message(node, server_round, TRAIN) for node in self.book.node_ids]

    # -- replies --------------------------------------------------------------------------------
    def _checked_model(self, reply: Message) -> tuple[dict, dict, dict[str, float]]:
        records = exact_records(reply.content, {MODELS: ConfigRecord, MODEL_ARRAYS: ArrayRecord,
                                                METRICS: MetricRecord})
        config = dict(records[MODELS])
        arrays = record_to_arrays(records[MODEL_ARRAYS], self.limits.max_bytes)
        if any(not k.startswith(REPLY_PREFIX) for k in [*config, *arrays]):
            raise DecodeError(f"a model key is not under {REPLY_PREFIX!r}")
        model = decode_node_model(config, arrays, REPLY_PREFIX, self.limits)
        if model.kind == TREE and not (np.all(model.function.lower == 0)
                                       and np.all(model.function.upper == 1)):
            # every node maps the agreed box to the unit cube and fits its KDDT there
            raise DecodeError("a KDDT on another domain than the agreed one, the unit cube of "
                              "the agreed box (its neighbours could not evaluate it)")
        metrics = checked_metrics(records[METRICS], [LOSS, TRAIN_EXAMPLES])
        checked_count(metrics, TRAIN_EXAMPLES, example_limit(self.task), 1)
        return config, arrays, metrics

    def _store_replies(self, server_round: int, replies: Iterable[Message]
                       ) -> tuple[dict[int, dict[str, float]], int]:
        """Keep every good reply's model as its vertex's latest; nodes that did not answer
        usably may hold nothing we sent, so they get everything next time."""
        good, rejected = self.book.screen(server_round, replies, self._checked_model)
        for node, (config, arrays, _) in good.items():
            self.relay.store(self.vertex_of[node], config, arrays, REPLY_PREFIX, server_round)
        self.book.accept(server_round, good)
        for node in self.book.node_ids:
            if node not in good:
                self.book.needs_sync[node] = True
                self.relay.forget_deliveries(self.vertex_of[node])
        return {n: metrics for n, (_, _, metrics) in good.items()}, rejected

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        good, rejected = self._store_replies(server_round, replies)
        metrics = MetricRecord({"failures": rejected + self._setup_failures,
                                "participants": len(good),
                                "models_held": len(self.relay.latest)})
        self._setup_failures = 0
        if good:
            metrics["local_loss"] = float(np.mean([m[LOSS] for m in good.values()]))
        return None, metrics

    # -- evaluation -----------------------------------------------------------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if not self.fedfun.federated_eval:
            return []
        return [self._message(node, server_round, EVALUATE) for node in self.book.node_ids
                if self.vertex_of[node] in self.relay.latest]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        screened = screen_replies(self.label, server_round, replies, self._checked_evaluation,
                                  self.book.node_ids)
        for node in self.book.node_ids:
            if node not in screened.accepted:  # it may not hold what we sent
                self.book.needs_sync[node] = True
                self.relay.forget_deliveries(self.vertex_of[node])
        per_node = screened.in_order(self.book.node_ids)
        names = {TEST_ACCURACY: "test_accuracy", TRAIN_ACCURACY: "train_accuracy",
                 LOCAL_ACCURACY: "local_accuracy"}
        out = spread_over_nodes({n: {names[k]: m[k] for k in names} for n, m in per_node.items()})
        pairs = sum(m[NEIGHBOUR_COUNT] for m in per_node.values())
        if pairs:
            out["consensus_distance"] = sum(m[CONSENSUS] for m in per_node.values()) / pairs
        return MetricRecord({**out, "failures": screened.rejected})

    def _checked_evaluation(self, reply: Message) -> dict[str, float]:
        """A node's figures: accuracies in [0, 1], at most its degree of neighbours compared."""
        metrics = checked_metrics(exact_records(reply.content, {METRICS: MetricRecord})[METRICS],
                                  EVALUATION_KEYS)
        degree = self.relay.graph.degree(self.vertex_of[reply.metadata.src_node_id])
        for key in (TEST_ACCURACY, TRAIN_ACCURACY, LOCAL_ACCURACY):
            if metrics[key] > 1:
                raise DecodeError(f"{key}={metrics[key]} is above 1")
        if not metrics[NEIGHBOUR_COUNT].is_integer() or metrics[NEIGHBOUR_COUNT] > degree:
            raise DecodeError(f"{NEIGHBOUR_COUNT}={metrics[NEIGHBOUR_COUNT]} is not an integer "
                              f"of at most the node's degree {degree}")
        return metrics

    # -- state ----------------------------------------------------------------------------------
    def state_record(self) -> RecordDict:
        if self.roster is None:
            return RecordDict()
        state = self.relay.to_records()
        state["roster"] = self.roster.to_record()
        state["book"] = self.book.to_record()
        state["bounds"] = arrays_to_record({"lower": self.bounds.lower,
                                            "upper": self.bounds.upper})
        state["bounds-samples"] = ConfigRecord({"samples": self.bounds.samples,
                                                "n": self.relay.graph.n})
        return state

    def load_state_record(self, state: RecordDict) -> None:
        if "roster" not in state:
            return
        self.roster = Roster.from_record(state["roster"])
        self.vertex_of = {n: int(f[PARTITION_ID]) for n, f in self.roster.facts.items()}
        self.book = NodeBook.from_record(state["book"], self.label)
        bounds = record_to_arrays(state["bounds"])
        meta = state["bounds-samples"]
        self.bounds = AgreedBounds(bounds["lower"], bounds["upper"], int(meta["samples"]))
        self.relay = RelayBook(self.graph_for(int(meta["n"])))
        self.relay.load_records(state)


def build_fedfun(settings: RunSettings) -> FedFunStrategy:
    """The relay for ``algorithm`` in fedfun, psr, dfedavgm, dfedfish, dfeddf."""
    fedfun = fedfun_settings(settings)
    task = task_for(settings.data)
    if task.kind != "classification":
        raise ConfigError(f"{settings.algorithm} supports classification tasks; {settings.task!r} "
                          "is a regression task")
    if fedfun.parametric() and fedfun.learner != "mlp":
        raise ConfigError(f"fedfun.learner={fedfun.learner!r}: {settings.algorithm} averages "
                          "parameters and needs 'mlp' (trees need algorithm='fedfun')")
    if fedfun.algorithm == FSR and fedfun.learner == "tree" and fedfun.delta <= 0:
        raise ConfigError("fedfun.delta must be > 0 with fedfun.learner='tree' (the KDDT's "
                          "kernel needs a radius)")
    return FedFunStrategy(fedfun, task, settings.seed)
