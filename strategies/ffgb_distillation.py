"""FFGB's global distillation phase: a FedAvg of one student network towards the ensemble.

Every ``distill-every`` boosting rounds, ``distill-rounds`` FedAvg rounds train one network (the
student, of the learners' spec) on the nodes' points towards f; after the last of them the
student replaces the whole ensemble (an update of scale 0), so the ensemble stops growing. The
student warm-starts from the previous distillation's. It travels beside each node's delta and is
packed once a round, whatever the number of recipients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from functions.ensembles import lone_learner, pack_delta
from functions.params import arrays_to_record
from oracles.distillation import average_networks
from oracles.weak_learning import new_network
from strategies.ffgb_replies import CheckedStudent


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
            config, arrays = pack_delta(lone_learner(self.student, self.n_features,
                                                     self.n_outputs))
            self._records = ConfigRecord(config), arrays_to_record(arrays)
        return self._records

    def combine(self, index: int, good: dict[int, CheckedStudent]) -> tuple[dict[str, float],
                                                                          object | None]:
        """FedAvg of the students (weighted by points); the round's metrics, and the student
        when this round ends a distillation that had replies (it then replaces f)."""
        metrics: dict[str, float] = {}
        if good:
            total = sum(c.examples for c in good.values())
            self.student = average_networks([c.network for c in good.values()],
                                            [c.examples / total for c in good.values()],
                                            new_network(self.spec, 0))
            self.student_rounds += 1
            metrics["distill_error"] = float(np.average([c.distill_error for c in good.values()],
                                                        weights=[c.examples for c in good.values()]))
        self._records = None
        finished = index >= self.rounds and self.student_rounds > 0
        return metrics, self.student if finished else None
