"""Server half of ``fedxgb-bagging`` and ``fedxgb-cyclic``: Flower's ``FedXgbBagging`` and
``FedXgbCyclic`` with the global booster held as checked trees and every reply checked.

From Flower: the messages' shape (the booster's JSON bytes as one uint8 array at
``arrays["0"]``, and ``server-round`` in ``config``), the settings summary (Flower's strategy,
held as a part: ``flower``) and the two rules. Bagging: the sampled nodes each boost
``fedxgb.local-rounds`` iterations on the global booster and send only those; the server
appends every node's trees. Cyclic: one node a round, in turn (partition order), boosts on
the global booster and sends the whole model, which replaces it. Nodes keep nothing, so every
message carries the whole booster.

Ours: the server never keeps or forwards a node's bytes. It holds the trees
(``functions.boosters``) and sends their canonical JSON; a reply counts only if it is bounded
and parses as a booster of the run's spec holding exactly ``local-rounds`` new iterations, and
for cyclic only if its first trees are the global booster's, unchanged. Any other reply is a
counted failure, as a missing one. The append takes whole iterations (a tree per class each):
Flower's own ``aggregate_bagging`` appends ``num_parallel_tree`` trees of each reply as class 0,
which for softmax models (or more than one local round) builds a wrong model XGBoost still loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO
from typing import Any, ClassVar

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedXgbBagging, FedXgbCyclic

from functions.boosters import (
    Booster,
    booster_record,
    class_margins,
    encode_booster,
    raw_record,
    read_booster,
)
from functions.errors import DecodeError
from functions.protocol import ARRAYS, CONFIG, EVALUATE, EVALUATE_FIRST, SERVER_ROUND, TRAIN
from oracles.xgboost_local import INSTALL, available, outputs
from run_config.common import RunSettings
from run_config.fedxgb import FedXgbSettings, check_task, fedxgb_settings
from strategies.base import FederatedStrategy, flower_options
from strategies.evaluation import (
    EvaluationSums,
    central_figures,
    decode_evaluation_sums,
    federated_figures,
)
from strategies.node_book import messages_to
from strategies.sampling import Sampler
from strategies.screening import exact_records
from tasks.datasets import TaskData
from tasks.errors import ConfigError

SPEC = "booster-spec"  # state-decoding context: the run's BoosterSpec


@dataclass(frozen=True)
class StoredBooster:
    """The global booster as strategy state (``strategies.state_codec``'s Wire form): its
    canonical JSON as one uint8 array, read back through the same checks as a reply."""

    booster: Booster
    RECORDS: ClassVar[Mapping[str, type]] = {"": ArrayRecord}

    def to_records(self) -> dict[str, ArrayRecord]:
        return {"": booster_record(self.booster)}

    @classmethod
    def from_records(cls, records: Mapping[str, Any], context: Mapping[str, Any]) -> StoredBooster:
        return cls(read_booster(records[""], context[SPEC])[0])


@dataclass
class FedXgbState:
    """What a run continues from: the global booster (the roster and sampler are the base's)."""

    booster: StoredBooster


class XgbStrategy(FederatedStrategy):
    """What both rules share: the global booster, its messages, evaluation and state. A
    concrete rule holds Flower's strategy of that rule (``flower``: its summary)."""

    State = FedXgbState
    flower: FedXgbBagging | FedXgbCyclic | None = None

    def __init__(
        self, fedxgb: FedXgbSettings, task: TaskData, central_evaluation: bool, num_rounds: int = 0
    ) -> None:
        super().__init__(num_rounds)
        self.fedxgb, self.task = fedxgb, task
        self.spec, self.loss = fedxgb.spec(task), fedxgb.loss(task)
        self.x_test = task.x_test.reshape(len(task.x_test), -1) if central_evaluation else None
        self._hold(Booster(self.spec))

    def _hold(self, booster: Booster, raw: bytes | None = None) -> None:
        """Make ``booster`` the global one; its canonical bytes (``raw`` if already built) are
        built once and shared by every message until it changes."""
        self.booster = booster
        self.raw = encode_booster(booster) if raw is None else raw
        self.record = raw_record(self.raw)

    def summary(self) -> None:
        f = self.fedxgb
        log(
            INFO,
            "\t%s: %d local iterations a round, depth <= %d, eta %s%s, boosters <= %d bytes",
            f.algorithm,
            f.local_rounds,
            f.max_depth,
            f.eta,
            " / num-partitions" if f.scaled_eta and f.bagging else "",
            f.max_booster_bytes,
        )
        if self.flower is not None:
            self.flower.summary()

    def exports(self) -> dict[str, bytes]:
        """The booster as XGBoost's JSON: ``xgboost.Booster().load_model("model.json")``."""
        return {"model.json": self.raw}

    def description(self) -> dict[str, Any]:
        return {
            "kind": "xgboost booster",
            "objective": self.spec.objective,
            "trees": len(self.booster.trees),
        }

    def _messages(self, server_round: int, nodes: list[int], kind: str) -> Iterable[Message]:
        """The global booster to ``nodes``; a train message asks for ``evaluate-first`` when
        the last round's evaluation rides on it."""
        config = ConfigRecord({SERVER_ROUND: server_round})
        if kind == TRAIN and self.evaluation_due is not None:
            config[EVALUATE_FIRST] = True
        content = RecordDict({ARRAYS: self.record, CONFIG: config})
        return messages_to(content, nodes, kind)

    def _reply_booster(self, reply: Message) -> Booster:
        """The reply's booster: its only record, bounded, parsed and checked against the spec."""
        record = exact_records(reply.content, {ARRAYS: ArrayRecord})[ARRAYS]
        return read_booster(record, self.spec)[0]

    def _metrics(self) -> dict[str, float]:
        return {"ensemble_size": len(self.booster.trees), "booster_bytes": len(self.raw)}

    # -- evaluation -----------------------------------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The global booster to every node (all of them for cyclic too: ``train_loss`` is F
        over every node); nothing when it rides on the next round's training (bagging)."""
        if not self.fedxgb.federated_eval or self.defers_evaluation(server_round):
            return []
        return self._messages(server_round, self.book.node_ids, EVALUATE)

    def check_evaluation_record(self, record: Any, node: int) -> EvaluationSums:
        """A node's loss sums and counts at the global booster."""
        return decode_evaluation_sums(record, self.task)

    def evaluation_metrics(self, accepted: dict[int, EvaluationSums]) -> dict[str, float]:
        combined = federated_figures(
            accepted.values(), self.task.kind, central=self.x_test is not None
        )
        return {**combined, **self._metrics()}

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        if self.x_test is None:
            return {}
        margins = class_margins(self.spec, outputs(self.raw, self.x_test))
        loss, correct = self.loss.sums(margins, self.task.y_test)
        return central_figures(loss, correct, len(self.task.y_test))

    # -- state ----------------------------------------------------------------------------------
    def state_context(self) -> dict[str, Any]:
        return {**super().state_context(), SPEC: self.spec}

    def family_state(self) -> FedXgbState:
        return FedXgbState(StoredBooster(self.booster))

    def load_family_state(self, state: FedXgbState) -> None:
        self._hold(state.booster.booster)


class CheckedFedXgbBagging(XgbStrategy):
    """Flower's FedXgbBagging: every sampled node's new trees are appended to the booster."""

    label = "FedXgbBagging"

    def __init__(
        self,
        fedxgb: FedXgbSettings,
        task: TaskData,
        central_evaluation: bool,
        fraction_train: float,
        seed: int,
        num_rounds: int = 0,
    ) -> None:
        super().__init__(fedxgb, task, central_evaluation, num_rounds)
        self.flower = FedXgbBagging(
            **flower_options(fraction_train), min_train_nodes=1, min_evaluate_nodes=1
        )
        self.sampler = Sampler(fraction_train, seed)

    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message brings round t's booster."""
        return self.fedxgb.federated_eval and self.fedxgb.eval_with_train

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        log(
            INFO,
            "%s round %d: %d of %d nodes boost a booster of %d trees",
            self.label,
            server_round,
            len(nodes),
            len(self.book.node_ids),
            len(self.booster.trees),
        )
        return self._messages(server_round, nodes, TRAIN)

    def _new_trees(self, reply: Message) -> Booster:
        booster = self._reply_booster(reply)
        if booster.iterations != self.fedxgb.local_rounds:
            raise DecodeError(
                f"holds {booster.iterations} iterations, expected the "
                f"fedxgb.local-rounds={self.fedxgb.local_rounds} new ones only"
            )
        return booster

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        """Every checked reply's trees appended, in partition order; a booster that would
        outgrow ``max-booster-bytes`` is not taken (the round keeps the booster it had: a
        warning of the run)."""
        good = self.screen(server_round, replies, self._new_trees)
        if good:
            merged = self.booster.plus(good.values())
            raw = encode_booster(merged)
            if len(raw) > self.spec.max_bytes:
                self.warn(
                    server_round,
                    f"the booster would outgrow fedxgb.max-booster-bytes={self.spec.max_bytes}; "
                    "the round's trees are dropped",
                )
            else:
                self._hold(merged, raw)
        return None, {"participants": len(good), **self._metrics()}


class CheckedFedXgbCyclic(XgbStrategy):
    """Flower's FedXgbCyclic: one node a round, in partition order; its booster replaces the
    global one."""

    label = "FedXgbCyclic"

    def __init__(
        self, fedxgb: FedXgbSettings, task: TaskData, central_evaluation: bool, num_rounds: int = 0
    ) -> None:
        super().__init__(fedxgb, task, central_evaluation, num_rounds)
        self.flower = FedXgbCyclic(**flower_options(1.0))

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        node = nodes[(server_round - 1) % len(nodes)]
        log(
            INFO,
            "%s round %d: node %d of %d boosts a booster of %d trees",
            self.label,
            server_round,
            nodes.index(node) + 1,
            len(nodes),
            len(self.booster.trees),
        )
        return self._messages(server_round, [node], TRAIN)

    def _successor(self, reply: Message) -> Booster:
        booster = self._reply_booster(reply)
        self.booster.check_prefix_of(booster, self.fedxgb.local_rounds)
        return booster

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        """The node's checked booster replaces the global one (a failed round keeps it)."""
        good = self.screen(server_round, replies, self._successor)
        for booster in good.values():
            self._hold(booster)
        return None, {"participants": len(good), **self._metrics()}


def build_fedxgb(settings: RunSettings, task: TaskData) -> XgbStrategy:
    """``fedxgb-bagging`` or ``fedxgb-cyclic`` (``algorithm``) from the ``fedxgb.*`` table;
    ConfigError before any node trains if this machine lacks the ``xgboost`` extra."""
    if not available():
        raise ConfigError(f"algorithm={settings.algorithm!r} needs the xgboost package: {INSTALL}")
    fedxgb = fedxgb_settings(settings)
    check_task(task)
    if fedxgb.bagging:
        return CheckedFedXgbBagging(
            fedxgb,
            task,
            settings.central_evaluation,
            settings.fraction_train,
            settings.seed,
            settings.num_rounds,
        )
    return CheckedFedXgbCyclic(fedxgb, task, settings.central_evaluation, settings.num_rounds)
