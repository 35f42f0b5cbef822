"""FFGB's global distillation phase: a FedAvg of one student network towards the ensemble.

Every ``distill-every`` boosting rounds, ``distill-rounds`` FedAvg rounds train one network (the
student, of the learners' spec) on the nodes' points towards f; after the last of them the
student replaces the whole ensemble (an update of scale 0), so the ensemble stops growing. The
student warm-starts from the previous distillation's. It travels beside each node's delta and is
packed once a round, whatever the number of recipients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from functions.ensembles import lone_learner, pack_delta, read_lone_learner, unpack_delta
from functions.errors import DecodeError
from functions.learners import learner_spec
from functions.params import arrays_to_record, record_to_arrays
from oracles.distillation import average_networks
from oracles.weak_learning import new_network
from strategies.ffgb_replies import CheckedStudent
from strategies.state_codec import LIMITS

SPEC = "learner-spec"  # state-decoding context: the run's learner spec, which the student has


@dataclass
class GlobalDistillation:
    """The student, and how many FedAvg rounds of the current distillation had replies."""

    spec: object  # the learners' NetworkSpec
    n_features: int
    n_outputs: int
    rounds: int  # FedAvg rounds per distillation
    student: object | None = None
    student_rounds: int = 0
    _records: tuple[ConfigRecord, ArrayRecord] | None = field(default=None, repr=False)

    def begin(self, index: int, rng: np.random.Generator) -> None:
        """FedAvg round ``index`` (1-based) of a distillation: the first starts a new one (a new
        student if there was none before)."""
        if index == 1:
            self.student_rounds = 0
            if self.student is None:
                self.student = new_network(self.spec, int(rng.integers(2**31)))
        self._records = None

    def records(self) -> tuple[ConfigRecord, ArrayRecord]:
        """The student as records, packed once per round."""
        if self._records is None:
            config, arrays = pack_delta(lone_learner(self.student, self.n_features, self.n_outputs))
            self._records = ConfigRecord(config), arrays_to_record(arrays)
        return self._records

    def combine(
        self, index: int, good: dict[int, CheckedStudent]
    ) -> tuple[dict[str, float], object | None]:
        """FedAvg of the students (weighted by points); the round's metrics, and the student
        when this round ends a distillation that had replies (it then replaces f)."""
        metrics: dict[str, float] = {}
        if good:
            total = sum(c.examples for c in good.values())
            self.student = average_networks(
                [c.network for c in good.values()],
                [c.examples / total for c in good.values()],
                new_network(self.spec, 0),
            )
            self.student_rounds += 1
            errors = [c.distill_error for c in good.values()]
            metrics["distill_error"] = float(
                np.average(errors, weights=[c.examples for c in good.values()])
            )
        self._records = None
        finished = index >= self.rounds and self.student_rounds > 0
        return metrics, self.student if finished else None


@dataclass(frozen=True)
class StoredStudent:
    """The student as strategy state (``strategies.state_codec``'s Wire form): a lone learner's
    delta, decoded under the context's ``LIMITS`` and checked against its ``SPEC``."""

    network: object
    n_features: int
    n_outputs: int
    RECORDS: ClassVar[Mapping[str, type]] = {"": ConfigRecord, "arrays": ArrayRecord}

    def to_records(self) -> dict[str, ConfigRecord | ArrayRecord]:
        config, arrays = pack_delta(lone_learner(self.network, self.n_features, self.n_outputs))
        return {"": ConfigRecord(config), "arrays": arrays_to_record(arrays)}

    @classmethod
    def from_records(cls, records: Mapping[str, Any], context: Mapping[str, Any]) -> StoredStudent:
        delta = unpack_delta(
            dict(records[""]), record_to_arrays(records["arrays"]), context[LIMITS]
        )
        network = read_lone_learner(delta)
        if learner_spec(network) != context[SPEC]:
            raise DecodeError(f"the student is not the run's {context[SPEC]}")
        return cls(network, delta.n_features, delta.n_outputs)
