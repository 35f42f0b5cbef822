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

With ``relay-encryption`` each node seals its model to its neighbours and itself
(``functions.sealed_relay``, under the sealing keys of the secure sums' setup stage), and the
server checks, stores and forwards ciphertext only: the nodes validate what they open. A node that
comes back with new keys (a restarted SuperNode, a resumed run) cannot open what was sealed to its
old ones: it fits its model afresh, as in round 0, and is sent only neighbour models sealed since.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.node_models import decode_node_model, reprefixed, require_unit_cube
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import (
    BOUNDS,
    CONFIG,
    CONSENSUS,
    EVALUATE,
    EVALUATE_FIRST,
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
    RELAY_KEYS,
    REPLY_PREFIX,
    SERVER_ROUND,
    SETUP,
    TEST_ACCURACY,
    TRAIN,
    TRAIN_ACCURACY,
    TRAIN_EXAMPLES,
)
from functions.sealed_relay import check_sealed
from oracles.graphs import Graph, make_graph
from run_config.common import RunSettings
from run_config.fedfun import FSR, FedFunSettings, fedfun_settings, model_limits
from strategies.base import FederatedStrategy
from strategies.bounds import AgreedBounds, query_bounds
from strategies.evaluation import checked_count, checked_metrics, example_limit, spread_over_nodes
from strategies.relay import LIMITS, RelayBook, RelayState, model_records
from strategies.screening import Screened, exact_records
from strategies.secure_sum import SecureAggregator
from strategies.state_codec import checks
from tasks.datasets import TaskData
from tasks.errors import ConfigError

EVALUATION_KEYS = (TEST_ACCURACY, TRAIN_ACCURACY, LOCAL_ACCURACY, CONSENSUS, NEIGHBOUR_COUNT)
FEATURES = "features"  # the state context's input width (the agreed box's length)


@dataclass
class FedFunState:
    """What the relay continues from: the graph's size, the agreed box and its samples, and the
    relay book."""

    vertices: int
    samples: int
    lower: np.ndarray = field(metadata=checks(shape=(FEATURES,)))
    upper: np.ndarray = field(metadata=checks(shape=(FEATURES,)))
    relay: RelayState


class FedFunStrategy(FederatedStrategy):
    """The relay on Flower's Message API (one strategy for FSR and the four baselines)."""

    label = "FedFun"
    State = FedFunState

    def __init__(
        self,
        fedfun: FedFunSettings,
        task: TaskData,
        seed: int,
        encrypted: bool = False,
        num_rounds: int = 0,
    ) -> None:
        """``encrypted``: the nodes seal their models to each other (``relay-encryption``)."""
        super().__init__(num_rounds)
        self.fedfun, self.task, self.seed = fedfun, task, seed
        self.limits = model_limits(fedfun, task)
        self.relay: RelayBook | None = None
        self.bounds: AgreedBounds | None = None
        self._evaluating: list[int] = []  # the nodes of the current evaluate exchange
        self.keys = SecureAggregator(self.label, seed) if encrypted else None  # sealing keys
        self.key_round: dict[int, int] = {}  # vertex -> the round its node's keys date from
        self._rekeyed: set[int] = set()  # vertices whose node has new keys from the next round
        self._recipients: dict[int, list[int]] = {}  # node -> the vertices it seals its model to

    # -- set-up ---------------------------------------------------------------------------------
    def graph_for(self, n: int) -> Graph:
        f = self.fedfun
        try:
            return make_graph(
                f.topology, n, self.seed, degree=f.degree, probability=f.probability, edges=f.edges
            )
        except ValueError as err:
            raise ConfigError(f"fedfun.topology={f.topology!r} on {n} nodes: {err}") from None

    def check_federation(self, num_nodes: int) -> None:
        self.graph_for(num_nodes)

    def summary(self) -> None:
        f = self.fedfun
        model = f"{f.learner} {f.hidden}" if f.learner == "mlp" else "KDDT"
        log(
            INFO,
            "\t%s: %s, lambda=%s, gamma=%s, delta=%s, b'=%d, %s step, %d initial and %d "
            "local steps",
            f.algorithm,
            model,
            f.lam,
            f.gamma or "auto",
            f.delta,
            f.penalty_samples,
            f.step,
            f.round_zero_steps(),
            f.local_steps,
        )

    def description(self) -> dict[str, Any]:
        return {
            "kind": "node models",
            "learner": self.fedfun.learner,
            "topology": self.fedfun.topology,
        }

    def vertex(self, node: int) -> int:
        """The node's graph vertex: its partition id."""
        return int(self.roster.facts[node][PARTITION_ID])

    def on_roster(self, grid: Grid, server_round: int) -> None:
        """Graph, domain box and round 0 (h_i^0 = argmin R_i), before round 1."""
        totals = {int(f[NUM_PARTITIONS]) for f in self.roster.facts.values()}
        if len(totals) != 1:
            raise RuntimeError(f"{self.label}: nodes disagree on num-partitions: {sorted(totals)}")
        graph = self.graph_for(totals.pop())
        self.relay = RelayBook(graph)
        log(
            INFO,
            "%s: graph %s; gamma=%.4g",
            self.label,
            graph.describe(),
            self.fedfun.gamma_for(graph.spectral_norm()),
        )
        self.bounds, rejected = query_bounds(
            grid,
            self.label,
            server_round,
            self.book.node_ids,
            self.limits.n_features,
            example_limit(self.task),
        )
        log(
            INFO,
            "%s: domain agreed from the nodes' bounds (%d training samples in all)",
            self.label,
            self.bounds.samples,
        )
        self._set_up_keys(grid, 0)
        replies = grid.send_and_receive(
            [self._message(node, 0, TRAIN, initial=True) for node in self.book.node_ids]
        )
        self.count_failures(rejected)
        good = self._store_replies(0, replies)
        log(
            INFO,
            "%s round 0: %d of %d nodes fitted h^0 (local training only)",
            self.label,
            len(good),
            len(self.book.node_ids),
        )

    def on_rebind(self, old: int, new: int, server_round: int) -> None:
        """The returning node serves the same vertex and holds nothing: its next message
        carries the domain, its own last model and all its neighbours' models (with relay
        encryption: those sealed to its new keys; it is set up again)."""
        self.relay.forget_deliveries(self.vertex(new))
        if self.keys is not None:
            self.keys.forget(old)
            self._rekeyed.add(self.vertex(new))

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """The new node's vertex has no model: its first message carries the domain and its
        neighbours' models, and it fits its own first (as in round 0) before it trains."""
        if self.keys is not None:
            self._rekeyed.add(self.vertex(node))

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """Its vertex's model is no longer relayed; its neighbours go on without it."""
        vertex = int(self.roster.facts[self.roster.node_ids[position]][PARTITION_ID])
        self.relay.drop(vertex)
        if self.keys is not None:
            self.keys.forget(node)

    # -- sealing keys ---------------------------------------------------------------------------
    def _set_up_keys(self, grid: Grid, server_round: int) -> None:
        """With relay encryption: the sealing keys of the nodes that have none (the secure
        sums' setup stage); a node's keys date from this round."""
        if self.keys is None:
            return
        self.count_failures(self.keys.set_up(grid, server_round, self.book.node_ids))
        for vertex in self._rekeyed:
            self.key_round[vertex] = server_round
        self._rekeyed.clear()

    def _own_version(self, vertex: int) -> int:
        """The round of ``vertex``'s last accepted model that its node can open; -1: none."""
        version = self.relay.own_version(vertex)
        return version if version >= self.key_round.get(vertex, 0) else -1

    def _key_record(self, node: int, vertex: int) -> ConfigRecord:
        """The vertices ``node`` seals its next model to (itself, then its neighbours that
        have keys) and their public sealing keys."""
        nodes = {self.vertex(n): n for n in self.book.node_ids if n in self.keys.sealing}
        recipients = [j for j in (vertex, *self.relay.graph.neighbours(vertex)) if j in nodes]
        self._recipients[node] = recipients
        keys = [self.keys.sealing[nodes[j]] for j in recipients]
        return ConfigRecord({"vertices": recipients, "keys": keys})

    # -- messages -------------------------------------------------------------------------------
    def _message(self, node: int, server_round: int, kind: str, initial: bool = False) -> Message:
        """This node's message: its own model's version, its neighbours' models that it lacks,
        and on first contact or after a loss the domain and its own last accepted model; a
        train message asks for ``evaluate-first`` when the last round's evaluation rides on it
        and the node has a model to evaluate (the nodes an evaluate exchange would ask)."""
        vertex, relay = self.vertex(node), self.relay
        everything = self.book[node].needs_sync
        listing, send = relay.outgoing(vertex, everything, self.key_round.get(vertex, 0))
        models = relay.neighbour_models(send)
        own = self._own_version(vertex)
        config = {
            SERVER_ROUND: server_round,
            "own-version": own,
            "gamma": self.fedfun.gamma_for(relay.graph.spectral_norm()),
            "degree": relay.graph.degree(vertex),
            INITIAL: initial,
        }
        if kind == TRAIN and self.evaluation_due is not None and own >= 0:
            config[EVALUATE_FIRST] = True  # as its evaluate message would go
        content = RecordDict({CONFIG: ConfigRecord(config), NEIGHBOURS: ConfigRecord(listing)})
        if kind == TRAIN and self.keys is not None:
            content[RELAY_KEYS] = self._key_record(node, vertex)
        if everything:
            content[SETUP] = ConfigRecord({TRAIN_EXAMPLES: self.bounds.samples})
            content[BOUNDS] = arrays_to_record(
                {"lower": self.bounds.lower, "upper": self.bounds.upper}
            )
            if own >= 0:
                models[OWN_PREFIX] = relay.latest[vertex]
        content[MODELS], content[MODEL_ARRAYS] = model_records(models)
        relay.mark_delivered(vertex, send, everything)
        self.book[node].needs_sync = False
        return Message(content, node, kind, group_id=str(server_round))

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """Every node (no sampling): the neighbours' models it lacks."""
        self._set_up_keys(grid, server_round)
        log(
            INFO,
            "%s round %d: relaying neighbour models to %d nodes",
            self.label,
            server_round,
            len(nodes),
        )
        return [self._message(node, server_round, TRAIN) for node in nodes]

    # -- replies --------------------------------------------------------------------------------
    def _checked_model(self, reply: Message) -> tuple[dict, dict, dict[str, float]]:
        """The reply's model (sealed: its form only), its local loss and sample count."""
        records = exact_records(
            reply.content, {MODELS: ConfigRecord, MODEL_ARRAYS: ArrayRecord, METRICS: MetricRecord}
        )
        config = dict(records[MODELS])
        arrays = record_to_arrays(records[MODEL_ARRAYS], self.limits.max_bytes)
        if any(not k.startswith(REPLY_PREFIX) for k in [*config, *arrays]):
            raise DecodeError(f"a model key is not under {REPLY_PREFIX!r}")
        if self.keys is None:
            require_unit_cube(decode_node_model(config, arrays, REPLY_PREFIX, self.limits))
        elif arrays:
            raise DecodeError("a sealed model carries no arrays of its own")
        else:
            node = reply.metadata.src_node_id
            check_sealed(
                reprefixed(config, {}, REPLY_PREFIX, "")[0],
                self._recipients.get(node, []),
                self.keys.sealing.get(node, b""),
                self.limits.max_bytes,
            )
        metrics = checked_metrics(records[METRICS], [LOSS, TRAIN_EXAMPLES])
        checked_count(metrics, TRAIN_EXAMPLES, example_limit(self.task), 1)
        return config, arrays, metrics

    def _store_replies(
        self, server_round: int, replies: Iterable[Message]
    ) -> dict[int, dict[str, float]]:
        """Keep every good reply's model as its vertex's latest; nodes that did not answer
        usably may hold nothing we sent, so they get everything next time."""
        good = self.screen(server_round, replies, self._checked_model)
        for node, (config, arrays, _) in good.items():
            self.relay.store(self.vertex(node), config, arrays, REPLY_PREFIX, server_round)
        self.book.accept(server_round, good)
        self._lost([node for node in self.book.node_ids if node not in good])
        return {n: metrics for n, (_, _, metrics) in good.items()}

    def _lost(self, nodes: list[int]) -> None:
        """``nodes`` may not hold what we sent: everything again next time."""
        self.book.lost(nodes)
        for node in nodes:
            self.relay.forget_deliveries(self.vertex(node))

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        good = self._store_replies(server_round, replies)
        metrics = {"participants": len(good), "models_held": len(self.relay.latest)}
        if good:
            metrics["local_loss"] = float(np.mean([m[LOSS] for m in good.values()]))
        return None, metrics

    # -- evaluation -----------------------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message relays what round t's evaluate
        message would (every node trains every round)."""
        return self.fedfun.federated_eval and self.fedfun.eval_with_train

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every node with a model: its own model and its neighbours'; nothing when it rides
        on the next round's training."""
        self._evaluating = []
        if not self.fedfun.federated_eval or self.defers_evaluation(server_round):
            return []
        self._evaluating = [n for n in self.book.node_ids if self._own_version(self.vertex(n)) >= 0]
        return [self._message(node, server_round, EVALUATE) for node in self._evaluating]

    def on_evaluation_screened(self, screened: Screened) -> None:
        """The nodes asked whose answer was not usable may hold nothing we sent."""
        self._lost([node for node in self._evaluating if node not in screened.accepted])

    def evaluation_metrics(self, accepted: dict[int, dict[str, float]]) -> dict[str, float]:
        names = {
            TEST_ACCURACY: "test_accuracy",
            TRAIN_ACCURACY: "train_accuracy",
            LOCAL_ACCURACY: "local_accuracy",
        }
        out = spread_over_nodes({n: {names[k]: m[k] for k in names} for n, m in accepted.items()})
        pairs = sum(m[NEIGHBOUR_COUNT] for m in accepted.values())
        if pairs:
            out["consensus_distance"] = sum(m[CONSENSUS] for m in accepted.values()) / pairs
        return out

    def site_metrics(self, value: dict[str, float]) -> dict[str, float]:
        """The site's own model on its own test rows."""
        return {"test_accuracy": value[TEST_ACCURACY]}

    def check_evaluation_record(self, record: Any, node: int) -> dict[str, float]:
        """A node's figures: accuracies in [0, 1], at most its degree of neighbours compared."""
        metrics = checked_metrics(record, EVALUATION_KEYS)
        degree = self.relay.graph.degree(self.vertex(node))
        for key in (TEST_ACCURACY, TRAIN_ACCURACY, LOCAL_ACCURACY):
            if metrics[key] > 1:
                raise DecodeError(f"{key}={metrics[key]} is above 1")
        if not metrics[NEIGHBOUR_COUNT].is_integer() or metrics[NEIGHBOUR_COUNT] > degree:
            raise DecodeError(
                f"{NEIGHBOUR_COUNT}={metrics[NEIGHBOUR_COUNT]} is not an integer "
                f"of at most the node's degree {degree}"
            )
        return metrics

    # -- state ----------------------------------------------------------------------------------
    def state_context(self) -> dict[str, Any]:
        return {**super().state_context(), FEATURES: self.limits.n_features, LIMITS: self.limits}

    def family_state(self) -> FedFunState | None:
        if self.relay is None:
            return None
        return FedFunState(
            self.relay.graph.n,
            self.bounds.samples,
            self.bounds.lower,
            self.bounds.upper,
            self.relay.state(),
        )

    def load_family_state(self, state: FedFunState) -> None:
        if np.any(state.lower > state.upper):
            raise DecodeError("state field lower: above upper")
        self.bounds = AgreedBounds(state.lower, state.upper, state.samples)
        self.relay = RelayBook.restore(self.graph_for(state.vertices), state.relay)


def build_fedfun(settings: RunSettings, task: TaskData) -> FedFunStrategy:
    """The relay for ``algorithm`` in fedfun, psr, dfedavgm, dfedfish, dfeddf."""
    fedfun = fedfun_settings(settings)
    if task.kind != "classification":
        raise ConfigError(
            f"{settings.algorithm} supports classification tasks; {settings.task!r} "
            "is a regression task"
        )
    if fedfun.parametric() and fedfun.learner != "mlp":
        raise ConfigError(
            f"fedfun.learner={fedfun.learner!r}: {settings.algorithm} averages "
            "parameters and needs 'mlp' (trees need algorithm='fedfun')"
        )
    if fedfun.algorithm == FSR and fedfun.learner == "tree" and fedfun.delta <= 0:
        raise ConfigError(
            "fedfun.delta must be > 0 with fedfun.learner='tree' (the KDDT's kernel needs a radius)"
        )
    return FedFunStrategy(
        fedfun, task, settings.seed, settings.relay_encryption, settings.num_rounds
    )
