"""Server half of FFGB, FFGB.C and FFGB.L: averages the nodes' functions, i.e. merges ensembles
(Algorithm 1 of the FFGB paper), and keeps every node's copy current with deltas.

The global function is a weighted ensemble with a version (``functions.ensembles``). Each message
to a node carries what that node lacks since the version it holds (different for every node):
learners it has not seen, the common rescaling, and, instead of the node's own learners of its
last accepted round, the factor with which they entered the average. A node that failed gets the
whole ensemble. Replies are checked against the run (architecture, size, the schedule's weights)
before they count; the average is over the replies that pass, in partition order (appendix F:
m of N nodes per round with ``fraction-train``). The server keeps its test-set predictions,
updated from each round's new learners only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.ensembles import (
    Delta,
    Ensemble,
    PredictionCache,
    average,
    lone_learner,
    pack_delta,
    read_header,
    read_lone_learner,
    unpack_delta,
)
from functions.errors import DecodeError
from functions.learners import learner_spec
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import (
    CONFIG,
    DELTA,
    DELTA_ARRAYS,
    DISTILL_ERROR,
    EVALUATE,
    LAST_ACCEPTED,
    METRICS,
    ORACLE_ERROR,
    SERVER_ROUND,
    STUDENT,
    STUDENT_ARRAYS,
    TRAIN,
    TRAIN_EXAMPLES,
)
from functions.trees import TreeArrays
from oracles.boosting import AVERAGE, DESCENT, round_coefficients
from oracles.distillation import NONE, average_networks, distilled_coefficients
from oracles.weak_learning import new_network
from run_config.ffgb import DISTILL, FFGBSettings, delta_limits
from run_config.ffgb import learner_spec as run_learner_spec
from strategies.base import FederatedStrategy
from strategies.evaluation import (
    checked_count,
    checked_metrics,
    combine_evaluation_sums,
    decode_evaluation_sums,
    example_limit,
)
from strategies.node_book import NodeSlot
from strategies.sampling import Sampler
from strategies.screening import exact_records, screen_replies
from tasks.datasets import TaskData


@dataclass
class FFGBSlot(NodeSlot):
    """What a node holds: the ensemble's version (None: nothing), and its own learners of its
    last accepted round, which its next delta leaves out: appended at the update starting at
    ``own_version``, sequence numbers ``own_first`` .. + ``own_count`` - 1 (0: none), averaged
    with ``own_fraction``."""

    version: int | None = None
    own_version: int = 0
    own_first: int = 0
    own_count: int = 0
    own_fraction: float = 0.0

    def lose(self) -> None:
        super().lose()
        self.version = None
        self.forget_own()

    def forget_own(self) -> None:
        self.own_version = self.own_first = self.own_count = 0
        self.own_fraction = 0.0


@dataclass(frozen=True)
class CheckedIncrement:
    """A train reply that passed every check."""

    delta: Delta
    oracle_error: float
    distill_error: float | None = None


@dataclass(frozen=True)
class CheckedStudent:
    """A distillation-round reply that passed every check."""

    network: object
    examples: int
    distill_error: float


class FFGBStrategy(FederatedStrategy):
    """FFGB family on Flower's Message API: delta-synced ensembles, partial participation."""

    label = "FFGB"
    slot = FFGBSlot

    def __init__(self, ffgb: FFGBSettings, task: TaskData, central_evaluation: bool,
                 fraction: float, seed: int) -> None:
        self.ffgb, self.task = ffgb, task
        self.spec = run_learner_spec(ffgb, task)
        self.loss, self.bound = ffgb.loss(task), ffgb.final_bound(task)
        self.limits = delta_limits(ffgb, task)
        self.x_test = task.x_test.reshape(len(task.x_test), -1)
        self.ensemble = Ensemble.constant(np.zeros(task.num_outputs), self.x_test.shape[1])
        self.test_cache: PredictionCache | None = None
        if central_evaluation:
            self.test_cache = PredictionCache(self.x_test)
            self.test_cache.update(self.ensemble.snapshot())
        self.sampler = Sampler(fraction, seed)  # its generator also seeds the student
        self.learners_up = self.learners_down = 0
        self.student: object | None = None  # the global distillation's network (FedAvg)
        self.student_rounds = 0  # FedAvg rounds of the current distillation that had replies

    # -- set-up ---------------------------------------------------------------------------------
    def summary(self) -> None:
        f = self.ffgb
        learner = f"tree of depth {f.tree_depth}" if self.spec is None else str(self.spec)
        log(INFO, "\t%s: K=%d, %s steps (eta0=%s, mu=%s), residual=%s, learner %s, oracle %s",
            f.variant, f.local_steps, f.steps.kind, f.steps.eta0, f.mu, f.residual, learner,
            f.oracle)
        if f.distill != NONE or f.distill_every:
            log(INFO, "\tdistillation: client side %s; global every %d boosting rounds "
                "(%d FedAvg rounds of %d steps)", f.distill, f.distill_every, f.distill_rounds,
                f.distill_steps)

    def description(self) -> dict[str, Any]:
        return {"kind": "ensemble", "learner": self.ffgb.learner,
                "learners": len(self.ensemble.learners)}

    # -- messages -------------------------------------------------------------------------------
    def _delta_for(self, node: int) -> Delta:
        """What ``node`` lacks: everything after a failure, else since the version it holds,
        without its own learners of its last accepted round."""
        slot = self.book[node]
        own = (slot.own_version, slot.own_first, slot.own_count, slot.own_fraction)
        slot.forget_own()  # sent now, or never again
        since = slot.version
        if slot.needs_sync or since is None or since < self.ensemble.offset:
            return self.ensemble.snapshot()
        version, first, count, fraction = own
        if count and since <= version:
            factor = fraction * self.ensemble.scales_after(version)
            return self.ensemble.delta(since, omit=(first, count), own_factor=factor)
        return self.ensemble.delta(since)

    def _message(self, node: int, server_round: int, kind: str, student: bool = False
                 ) -> Message:
        delta = self._delta_for(node)
        config, arrays = pack_delta(delta)
        content = RecordDict({
            DELTA: ConfigRecord(config), DELTA_ARRAYS: arrays_to_record(arrays),
            CONFIG: ConfigRecord({SERVER_ROUND: server_round,
                                  LAST_ACCEPTED: self.book[node].last_accepted}),
        })
        if student:
            content[STUDENT], content[STUDENT_ARRAYS] = self._student_records()
            self.learners_down += 1
        self.book[node].version = self.ensemble.version
        self.book[node].needs_sync = False
        self.learners_down += len(delta.learners)
        return Message(content, node, kind, group_id=str(server_round))

    def _student_records(self) -> tuple[ConfigRecord, ArrayRecord]:
        config, arrays = pack_delta(lone_learner(self.student, self.x_test.shape[1],
                                                 self.task.num_outputs))
        return ConfigRecord(config), arrays_to_record(arrays)

    # -- training -------------------------------------------------------------------------------
    def train_messages(self, server_round: int, nodes: list[int], arrays: ArrayRecord,
                       config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Each sampled node's delta (appendix F: m of N nodes), and in a distillation round
        the student."""
        phase, index = self.ffgb.phase(server_round)
        distilling = phase == DISTILL
        if distilling and index == 1:
            self.student_rounds = 0
            if self.student is None:  # else: warm start from the last distillation's student
                self.student = new_network(self.spec, int(self.sampler.rng.integers(2**31)))
        log(INFO, "%s round %d: %d of %d nodes %s; ensemble of %d learners", self.label,
            server_round, len(nodes), len(self.book.node_ids),
            f"distil it ({index}/{self.ffgb.distill_rounds})" if distilling else "train",
            len(self.ensemble.learners))
        return [self._message(node, server_round, TRAIN, distilling) for node in nodes]

    def _expected_coefficients(self, t: int) -> tuple[float, list[float]]:
        """(scale, weights) of a reply in boosting round t (0-based)."""
        form = AVERAGE if self.ffgb.variant == "ffgb-l" else DESCENT
        scale, weights = round_coefficients(self.ffgb.steps.etas(t), self.ffgb.mu, form)
        if self.ffgb.distill == NONE:
            return scale, weights
        return distilled_coefficients(self.ffgb.distill, scale, weights)

    def _check_learner(self, learner: object) -> None:
        """The run's architecture (and FFGB.C's clipping bound G2), nothing larger."""
        clipping = self.ffgb.clipping(self.task)
        if self.spec is None:
            if not isinstance(learner, TreeArrays) or learner.depth > self.ffgb.tree_depth:
                raise DecodeError(f"expected a tree of depth <= {self.ffgb.tree_depth}")
            if clipping is not None and np.abs(learner.value).max() > clipping.learner_bound:
                raise DecodeError(f"a leaf value exceeds G2 = {clipping.learner_bound}")
            return
        expected = self.spec
        if clipping is not None:
            expected = replace(expected, output_bound=float(clipping.learner_bound))
        if learner_spec(learner) != expected:
            raise DecodeError(f"a learner is not the run's {expected}")

    def _checked_increment(self, server_round: int, reply: Message) -> CheckedIncrement:
        records = exact_records(reply.content, {DELTA: ConfigRecord, DELTA_ARRAYS: ArrayRecord,
                                                METRICS: MetricRecord})
        config = dict(records[DELTA])
        header = read_header(config, self.limits)  # bounded before any array is decoded
        if header.full or header.own_count or header.since != self.ensemble.version:
            raise DecodeError(f"expected an increment on version {self.ensemble.version}")
        scale, weights = self._expected_coefficients(self.ffgb.phase(server_round)[1])
        if header.count != len(weights):
            raise DecodeError(f"{header.count} learners, expected {len(weights)}")
        arrays = record_to_arrays(records[DELTA_ARRAYS], self.limits.delta_bytes(header.count))
        delta = unpack_delta(config, arrays, self.limits)
        if delta.scale != scale or list(delta.weights) != weights:
            raise DecodeError("scale or weights do not match the step sizes of the round")
        for learner in delta.learners:
            self._check_learner(learner)
        distilled = self.ffgb.distill != NONE
        errors = checked_metrics(records[METRICS],
                                 [ORACLE_ERROR, DISTILL_ERROR] if distilled else [ORACLE_ERROR])
        return CheckedIncrement(delta, errors[ORACLE_ERROR], errors.get(DISTILL_ERROR))

    def _checked_student(self, reply: Message) -> CheckedStudent:
        records = exact_records(reply.content, {STUDENT: ConfigRecord,
                                                STUDENT_ARRAYS: ArrayRecord,
                                                METRICS: MetricRecord})
        config = dict(records[STUDENT])
        if read_header(config, self.limits).count != 1:  # bounded before any array is decoded
            raise DecodeError("expected one student network")
        arrays = record_to_arrays(records[STUDENT_ARRAYS], self.limits.delta_bytes(1))
        network = read_lone_learner(unpack_delta(config, arrays, self.limits))
        if learner_spec(network) != self.spec:
            raise DecodeError(f"the student is not the run's {self.spec}")
        metrics = checked_metrics(records[METRICS], [TRAIN_EXAMPLES, DISTILL_ERROR])
        examples = checked_count(metrics, TRAIN_EXAMPLES, example_limit(self.task), 1)
        return CheckedStudent(network, examples, metrics[DISTILL_ERROR])

    def aggregate(self, server_round: int, replies: Iterable[Message]
                  ) -> tuple[ArrayRecord | None, dict[str, float]]:
        phase, index = self.ffgb.phase(server_round)
        check = self._checked_student if phase == DISTILL else (
            lambda r: self._checked_increment(server_round, r))
        good = self.screen(server_round, replies, check)
        metrics = {"participants": len(good)}
        if phase == DISTILL:
            self._distill(server_round, index, good, metrics)
        elif good:
            before = self.ensemble.version
            fraction, first = 1.0 / len(good), before + 1
            for node, checked in good.items():
                count, slot = len(checked.delta.learners), self.book[node]
                slot.own_version, slot.own_first, slot.own_count = before, first, count
                slot.own_fraction = fraction
                first += count
                self.learners_up += count
            self.ensemble = average(self.ensemble, [c.delta for c in good.values()],
                                    [fraction] * len(good))
            self.book.accept(server_round, good)
            if self.test_cache is not None:
                self.test_cache.update(self.ensemble.delta(before))
            metrics["oracle_error"] = float(np.mean([c.oracle_error for c in good.values()]))
            if self.ffgb.distill != NONE:
                metrics["distill_error"] = float(np.mean([c.distill_error
                                                          for c in good.values()]))
        metrics.update(self._size_metrics())
        return None, metrics

    def _distill(self, server_round: int, index: int, good: dict[int, CheckedStudent],
                 metrics: dict[str, float]) -> None:
        """FedAvg of the students (weighted by points); after the last round of a distillation
        the student replaces the whole ensemble (scale 0)."""
        if good:
            self.learners_up += len(good)
            total = sum(c.examples for c in good.values())
            self.student = average_networks([c.network for c in good.values()],
                                            [c.examples / total for c in good.values()],
                                            new_network(self.spec, 0))
            self.book.accept(server_round, good)
            self.student_rounds += 1
            metrics["distill_error"] = float(np.average([c.distill_error for c in good.values()],
                                                        weights=[c.examples for c in good.values()]))
        if index < self.ffgb.distill_rounds:
            return
        if self.student_rounds == 0:
            log(WARNING, "%s: no node trained the student; the ensemble stays as it is",
                self.label)
            return
        before = self.ensemble.version
        self.ensemble = self.ensemble.extend([self.student], [1.0], scale=0.0)
        for slot in self.book.slots.values():
            slot.forget_own()
        if self.test_cache is not None:
            self.test_cache.update(self.ensemble.delta(before))
        log(INFO, "%s: the ensemble is replaced by its distilled student", self.label)

    def _size_metrics(self) -> dict[str, float]:
        """``ensemble_size`` and ``models_exchanged``: learners up and down so far, per node
        (the paper's count, section 4.1: N K per round with full participation)."""
        return {"ensemble_size": len(self.ensemble.learners),
                "models_exchanged": (self.learners_up + self.learners_down)
                / len(self.book.node_ids)}

    # -- evaluation -----------------------------------------------------------------------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if not self.ffgb.federated_eval:
            return []
        return [self._message(node, server_round, EVALUATE) for node in self.book.node_ids]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        kind = self.task.kind
        screened = screen_replies(
            self.label, server_round, replies,
            lambda r: decode_evaluation_sums(
                exact_records(r.content, {METRICS: MetricRecord})[METRICS], self.task),
            self.book.node_ids)
        self.book.lost(screened.errors)  # it may not hold what we sent
        sums = screened.in_order(self.book.node_ids).values()
        combined = combine_evaluation_sums(sums, kind)
        if self.test_cache is not None:  # the central figures take the plain names
            combined = {k if k == "train_loss" else f"federated_{k}": v
                        for k, v in combined.items()}
        return MetricRecord({**combined, **self._size_metrics(), "failures": screened.rejected})

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        if self.test_cache is None:
            return {}
        values = self.test_cache.values
        if self.bound is not None:
            values = np.clip(values, -self.bound, self.bound)
        loss, correct = self.loss.sums(values, self.task.y_test)
        n = len(self.task.y_test)
        if correct is None:
            return {"test_mse": loss / n, "test_loss": loss / n}
        return {"test_accuracy": correct / n, "test_loss": loss / n}

    # -- state ----------------------------------------------------------------------------------
    def family_state(self) -> dict[str, ArrayRecord | ConfigRecord]:
        config, arrays = pack_delta(self.ensemble.snapshot())
        versions, scales = zip(*self.ensemble.updates) if self.ensemble.updates else ((), ())
        state = {
            "ensemble": ConfigRecord(config),
            "ensemble-arrays": arrays_to_record(arrays),
            "ensemble-history": ConfigRecord({"versions": list(versions),
                                              "scales": [float(s) for s in scales]}),
            "traffic": ConfigRecord({"up": self.learners_up, "down": self.learners_down,
                                     "student-rounds": self.student_rounds}),
        }
        if self.student is not None:
            state["student"], state["student-arrays"] = self._student_records()
        if self.test_cache is not None:
            state["test-values"] = arrays_to_record({"values": self.test_cache.values})
        return state

    def load_family_state(self, state: RecordDict) -> None:
        snapshot = unpack_delta(dict(state["ensemble"]), record_to_arrays(state["ensemble-arrays"]),
                                self.limits)
        history = state["ensemble-history"]
        self.ensemble = Ensemble(snapshot.base, snapshot.n_features, snapshot.learners,
                                 snapshot.weights,
                                 tuple(zip(history["versions"], history["scales"])),
                                 offset=snapshot.since)
        traffic = state["traffic"]
        self.learners_up, self.learners_down = traffic["up"], traffic["down"]
        self.student_rounds = traffic["student-rounds"]
        if "student" in state:
            self.student = read_lone_learner(unpack_delta(
                dict(state["student"]), record_to_arrays(state["student-arrays"]), self.limits))
        if self.test_cache is not None:
            self.test_cache = PredictionCache(self.x_test, self.ensemble.version,
                                              state["test-values"]["values"].numpy())
