"""What an FFGB reply must be before it counts: checked against the run, bounded before decoded.

A boosting reply is an increment on the server's version with the round's K learners, the
schedule's scale and weights, and learners of the run's architecture (FFGB.C: within G2). A
distillation reply is one student network of the run's spec and a bounded example count. Each
header is read and compared before any array of the reply is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord

from functions.ensembles import Delta, read_header, read_lone_learner, unpack_delta
from functions.errors import DecodeError
from functions.learners import learner_spec
from functions.params import record_to_arrays
from functions.protocol import (
    DELTA,
    DELTA_ARRAYS,
    DISTILL_ERROR,
    METRICS,
    ORACLE_ERROR,
    STUDENT,
    STUDENT_ARRAYS,
    TRAIN_EXAMPLES,
)
from functions.sealed_learners import SealedLearner, SealedSpec, spans
from oracles.boosting import AVERAGE, DESCENT, round_coefficients
from oracles.distillation import NONE, distilled_coefficients
from run_config.ffgb import FFGBSettings
from strategies.evaluation import checked_count, checked_metrics, example_limit
from strategies.screening import exact_records
from tasks.datasets import TaskData


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


class FFGBReplies:
    """The checks of one run's replies (its learner spec, schedule, clipping and limits)."""

    def __init__(self, ffgb: FFGBSettings, task: TaskData) -> None:
        self.ffgb, self.task = ffgb, task
        self.model = ffgb.model(task)
        self.spec, self.limits = self.model.spec, self.model.limits
        # with relay encryption the learners are sealed: their nodes check what they open
        self.sealed = SealedSpec(self.spec.n_features, self.spec.n_outputs)

    def check_learner(self, learner: object) -> None:
        """The run's architecture (``BoostingModel.check_learner``), or with relay encryption
        a sealed learner of the run's inputs and outputs."""
        if not self.ffgb.relay_encryption:
            self.model.check_learner(learner)
        elif not isinstance(learner, SealedLearner) or learner.spec != self.sealed:
            raise DecodeError("expected sealed learners (relay-encryption)")

    def coefficients(self, t: int) -> tuple[float, list[float]]:
        """(scale, weights) of a reply in boosting round t (0-based)."""
        form = AVERAGE if self.ffgb.variant == "ffgb-l" else DESCENT
        scale, weights = round_coefficients(self.ffgb.steps.etas(t), self.ffgb.mu, form)
        if self.ffgb.distill == NONE:
            return scale, weights
        return distilled_coefficients(self.ffgb.distill, scale, weights)

    def _array_bytes(self, count: int) -> int:
        """The most array bytes a reply of ``count`` learners may hold (sealed: their box, and
        a length and a weight each)."""
        if not self.ffgb.relay_encryption:
            return self.limits.delta_bytes(count)
        return self.limits.sealed_bytes(count) + 16 * count + self.limits.delta_bytes(0)

    def increment(self, reply: Message, version: int, t: int) -> CheckedIncrement:
        """A boosting reply of round t (0-based) on the server's ``version``."""
        records = exact_records(
            reply.content, {DELTA: ConfigRecord, DELTA_ARRAYS: ArrayRecord, METRICS: MetricRecord}
        )
        config = dict(records[DELTA])
        header = read_header(config, self.limits)  # bounded before any array is decoded
        if header.full or header.own_count or header.since != version:
            raise DecodeError(f"expected an increment on version {version}")
        scale, weights = self.coefficients(t)
        if header.count != len(weights):
            raise DecodeError(f"{header.count} learners, expected {len(weights)}")
        arrays = record_to_arrays(records[DELTA_ARRAYS], self._array_bytes(header.count))
        delta = unpack_delta(config, arrays, self.limits)
        if delta.scale != scale or list(delta.weights) != weights:
            raise DecodeError("scale or weights do not match the step sizes of the round")
        for learner in delta.learners:
            self.check_learner(learner)
        if self.ffgb.relay_encryption and len(spans(delta.learners)) != 1:
            raise DecodeError("expected the reply's learners sealed in one box")
        distilled = self.ffgb.distill != NONE
        errors = checked_metrics(
            records[METRICS], [ORACLE_ERROR, DISTILL_ERROR] if distilled else [ORACLE_ERROR]
        )
        return CheckedIncrement(delta, errors[ORACLE_ERROR], errors.get(DISTILL_ERROR))

    def student(self, reply: Message) -> CheckedStudent:
        """A distillation reply: the student trained on the node's points."""
        records = exact_records(
            reply.content,
            {STUDENT: ConfigRecord, STUDENT_ARRAYS: ArrayRecord, METRICS: MetricRecord},
        )
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
