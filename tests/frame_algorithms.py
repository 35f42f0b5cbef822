"""Two test-only algorithms whose global function is not a torch model, to prove the frame.

- ``test-trees``: square-loss boosting of depth-3 regression trees on one-hot labels. The server
  holds a weighted ensemble (``functions.ensembles``), sends each node only the learners it has
  not seen (a different delta per node), averages the nodes' new trees and evaluates the
  ensemble centrally. Nodes keep their predictions on their own data, not the ensemble.
- ``test-local``: nothing global. Each node fits its own classification tree (deeper every
  round) and evaluates it; the server reports the mean, min and max over nodes.

Neither touches a file outside this one: each is one family declaration (``TREES``, ``LOCAL``),
a server half (the lifecycle's hooks only) and a client half, and ``test-trees`` has a key table
(``TREES_KEYS``). The tests register them as a new family registers itself: one line in the
catalogue (``run_config.families.FAMILIES``) and one in each registry (``strategies.registry``,
``client_app.registry``); ``python -m run_config.reference`` then writes its keys into
``pyproject.toml`` and docs/configuration.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from client_app.job import ClientJob
from client_app.node_info import describe_node
from functions.ensembles import Delta, Ensemble, pack_delta, unpack_delta
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import CONFIG, EVALUATE, METRICS, QUERY_NODE, SERVER_ROUND, TRAIN
from functions.trees import decode_tree, encode_tree, from_sklearn
from run_config.common import RunSettings
from run_config.family import Algorithm, Family, Table
from run_config.keys import Key, build, read_keys, within
from strategies.base import FederatedStrategy
from strategies.ensemble_sync import EnsembleSync, StoredEnsemble, SyncSlot
from strategies.evaluation import checked_metrics, spread_over_nodes
from strategies.screening import exact_records
from tasks.datasets import TaskData

DELTA, DELTA_ARRAYS = "delta", "delta-arrays"

TREES_KEYS = (
    Key("test-trees.step", float, 0.5, "Weight of each round's averaged tree", within(0, 1, "(]")),
    Key("test-trees.depth", int, 3, "Depth of each node's regression tree", within(1, 8)),
)


@dataclass(frozen=True)
class TreesSettings:
    """``test-trees.*``, read once per run on the server and once per node."""

    step: float
    depth: int


def trees_settings(settings: RunSettings) -> TreesSettings:
    return build(TreesSettings, read_keys(settings.raw, TREES_KEYS), TREES_KEYS)


TREES_TABLE = Table("`test-trees.*`", "the frame tests' boosted trees", TREES_KEYS)
TREES: Family[TreesSettings, None] = Family(
    "test-trees",
    (Algorithm("test-trees", "boosted trees (test only)"),),
    trees_settings,
    tables=(TREES_TABLE,),
    message_types=(TRAIN, QUERY_NODE),
)
LOCAL: Family[None, None] = Family(
    "test-local", (Algorithm("test-local", "one tree per node (test only)"),), lambda _: None
)


def _delta_records(config: dict, arrays: dict) -> dict[str, Any]:
    return {DELTA: ConfigRecord(config), DELTA_ARRAYS: arrays_to_record(arrays)}


def _read_delta(content: RecordDict) -> Delta:
    records = exact_records(content, {DELTA: ConfigRecord, DELTA_ARRAYS: ArrayRecord})
    return unpack_delta(dict(records[DELTA]), record_to_arrays(records[DELTA_ARRAYS]))


@dataclass
class TreesState:
    """The ensemble, its learners in the checkpoint's segments."""

    ensemble: StoredEnsemble


class BoostedTreesStrategy(FederatedStrategy):
    """Server half of ``test-trees``: the global function is an ensemble of trees, each node's
    copy kept current by the shared ``EnsembleSync`` (the nodes here keep no own values, so
    every delta carries all the new learners)."""

    label = "test-trees"
    slot = SyncSlot
    State = TreesState

    def __init__(self, settings: RunSettings, task: TaskData) -> None:
        self.task = task
        self.trees = trees_settings(settings)
        n_features = int(np.prod(self.task.input_shape))
        self.sync = EnsembleSync(Ensemble.constant(np.zeros(self.task.num_classes), n_features))

    def summary(self) -> None:
        """Nothing to configure."""

    def description(self) -> dict[str, Any]:
        return {"kind": "ensemble of trees", "learners": self.sync.ensemble.version}

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        x = self.task.x_test.reshape(len(self.task.x_test), -1)
        scores = self.sync.ensemble.predict(x)
        return {"test_accuracy": float(np.mean(scores.argmax(axis=1) == self.task.y_test))}

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        messages = []
        for node in nodes:  # each node gets what it lacks, and only that
            delta, delta_arrays, _ = self.sync.records_for(self.book[node])
            content = RecordDict(
                {
                    DELTA: delta,
                    DELTA_ARRAYS: delta_arrays,
                    CONFIG: ConfigRecord({SERVER_ROUND: server_round}),
                }
            )
            messages.append(Message(content, node, TRAIN, group_id=str(server_round)))
        return messages

    def _checked(self, reply: Message) -> Delta:
        delta = _read_delta(reply.content)
        version = self.sync.ensemble.version
        if (
            delta.full
            or delta.since != version
            or len(delta.learners) != 1
            or delta.weights != (self.trees.step,)
        ):
            raise ValueError(
                f"expected one learner of weight {self.trees.step} after version {version}"
            )
        return delta

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        good = self.screen(server_round, replies, self._checked)
        if good:
            self.sync.average(
                [(self.book[node], delta) for node, delta in good.items()], keep_own=False
            )
        return None, {"participants": len(good), "ensemble_size": self.sync.ensemble.version}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []

    def family_state(self) -> TreesState:
        return TreesState(StoredEnsemble(self.sync.ensemble))

    def load_family_state(self, state: TreesState) -> None:
        self.sync.restore(state.ensemble.ensemble)

    def segment_names(self) -> list[str]:
        return self.sync.segment_names()

    def segment_record(self, name: str) -> RecordDict:
        return self.sync.segment_record(name)


def boosted_trees_train(job: ClientJob[TreesSettings, None]) -> RecordDict:
    """Client half of ``test-trees``: update the cached predictions, fit a tree to the residual."""
    data, state, trees = job.data, job.state, job.family
    x = data.x_train.reshape(len(data.x_train), -1)
    delta = _read_delta(RecordDict({k: job.content[k] for k in (DELTA, DELTA_ARRAYS)}))
    if delta.full:
        values = np.tile(delta.base, (len(x), 1))
    elif "trees.version" in state and state["trees.version"]["version"] == delta.since:
        values = state["trees.values"]["values"].numpy() * delta.scale
    else:
        raise RuntimeError("predictions lost; the server will send everything")
    for weight, learner in zip(delta.weights, delta.learners):
        values = values + weight * learner.predict(x)
    state["trees.values"] = arrays_to_record({"values": values})
    state["trees.version"] = ConfigRecord({"version": delta.version})
    residual = np.eye(delta.n_outputs)[data.y_train] - values
    fitted = DecisionTreeRegressor(max_depth=trees.depth, random_state=0).fit(x, residual)
    tree = from_sklearn(fitted, value_dtype=np.float32)
    reply = Delta(delta.version, 1.0, (tree,), (trees.step,), delta.n_features, delta.n_outputs)
    return RecordDict(_delta_records(*pack_delta(reply)))


class LocalModelsStrategy(FederatedStrategy):
    """Server half of ``test-local``: no global function; it relays nothing, it only asks."""

    label = "test-local"

    def __init__(self, settings: RunSettings, task: TaskData) -> None:
        """Nothing to set up: no global function, no sampling."""

    def summary(self) -> None:
        """Nothing to configure."""

    def _messages(self, server_round: int, kind: str, nodes: list[int]) -> list[Message]:
        content = RecordDict({CONFIG: ConfigRecord({SERVER_ROUND: server_round})})
        return [Message(content, n, kind, group_id=str(server_round)) for n in nodes]

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        return self._messages(server_round, TRAIN, nodes)

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        return None, {"participants": sum(not r.has_error() for r in replies)}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self._messages(server_round, EVALUATE, self.book.node_ids)

    def check_evaluation(self, reply: Message) -> dict[str, float]:
        return checked_metrics(
            exact_records(reply.content, {METRICS: MetricRecord})[METRICS], ["test_accuracy"]
        )

    def evaluation_metrics(self, accepted: dict[int, dict[str, float]]) -> dict[str, float]:
        return spread_over_nodes(accepted)


def local_train(job: ClientJob[None, None]) -> RecordDict:
    """Client half of ``test-local``: fit this node's own tree (depth = round), keep it."""
    data = job.data
    depth = int(job.content[CONFIG][SERVER_ROUND])
    fitted = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(
        data.x_train.reshape(len(data.x_train), -1), data.y_train
    )
    job.state["local.tree"] = arrays_to_record(encode_tree(from_sklearn(fitted)))
    job.state["local.classes"] = arrays_to_record({"classes": fitted.classes_})
    return RecordDict()


def local_evaluate(job: ClientJob[None, None]) -> RecordDict:
    """Client half of ``test-local``: this node's own tree on its test shard."""
    data = job.data
    x = data.x_test.reshape(len(data.x_test), -1)
    classes = job.state["local.classes"]["classes"].numpy()
    tree = decode_tree(
        record_to_arrays(job.state["local.tree"]), "", x.shape[1], len(classes), max_nodes=100_000
    )
    accuracy = float(np.mean(classes[tree.predict(x).argmax(axis=1)] == data.y_test))
    return RecordDict({METRICS: MetricRecord({"test_accuracy": accuracy})})


STRATEGIES = {TREES: BoostedTreesStrategy, LOCAL: LocalModelsStrategy}
CLIENT_HALVES = {
    TREES: {TRAIN: boosted_trees_train, QUERY_NODE: describe_node},
    LOCAL: {TRAIN: local_train, EVALUATE: local_evaluate, QUERY_NODE: describe_node},
}
