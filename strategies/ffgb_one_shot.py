"""FFGB.L in one round of communication (Remark 3.1 of the FFGB paper, ``ffgb.one-shot=true``).

FFGB.L's oracle calls do not depend on the round (Algorithm 4, lines 4 and 6: the node fits its
Lipschitz extension u_i with error feedback, never f^t), so node i's learners h_i1..h_iK are the
same every round. Round 1 asks every node for them once; from then on the server carries out
the updates and the averages itself: with S_t the nodes sampled in round t (the same seeded
sampler as the multi-round run) and (s_t, w_{k,t}) the round's coefficients,

    f^{t+1} = s_t f^t + sum_{i in S_t} sum_k (w_{k,t} / |S_t|) h_ik,

which only changes the weights of the N K learners of the pool, so the ensemble never grows past
N K. The result equals the multi-round FFGB.L run round by round (up to the order of float
sums). Nodes receive the function once, for the federated evaluation of the last round.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.batched import weighted_sum
from functions.ensembles import Ensemble
from functions.protocol import TRAIN
from oracles.boosting import AVERAGE, round_coefficients
from strategies.ffgb import FFGBStrategy


class FFGBLOneShotStrategy(FFGBStrategy):
    """FFGB.L with one upload per node: the server replays the rounds on the learners' weights."""

    label = "FFGB.L one-shot"

    def __init__(self, *args: object, num_rounds: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.num_rounds = num_rounds
        self.pool: dict[int, tuple] = {}  # roster position -> its K learners, in that order
        self.pool_test: np.ndarray | None = None  # (N K, n_test, outputs): each learner's values
        self.sampled: list[int] = []  # the positions of the current round's average

    def train_messages(self, server_round: int, nodes: list[int], arrays: ArrayRecord,
                       config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """Round 1: every node fits its learners; later rounds send nothing. ``nodes`` are
        drawn by the same sampler as the multi-round run's, and only enter the averages."""
        self.sampled = [self.book.position(node) for node in nodes]
        if server_round > 1:
            return []
        log(INFO, "%s: every node fits its %d learners once", self.label, self.ffgb.local_steps)
        return [self._message(node, server_round, TRAIN) for node in self.book.node_ids]

    def aggregate(self, server_round: int, replies: Iterable[Message]
                  ) -> tuple[ArrayRecord | None, dict[str, float]]:
        if server_round == 1:
            good = self.screen(server_round, replies,
                               lambda r: self._checked_increment(server_round, r))
            self.book.accept(server_round, good)
            self.pool = {self.book.position(node): checked.delta.learners
                         for node, checked in good.items()}
            self.learners_up += sum(len(learners) for learners in self.pool.values())
            for slot in self.book.slots.values():
                slot.forget_own()
            self._cache_pool_predictions()
        members = [position for position in self.sampled if position in self.pool]
        self._step(server_round - 1, members)
        return None, {"participants": len(members), **self._size_metrics()}

    def _cache_pool_predictions(self) -> None:
        learners = [h for position in self._positions() for h in self.pool.get(position, ())]
        outputs = self.task.num_outputs
        self.pool_test = np.stack([weighted_sum([h], [1.0], self.x_test, outputs)
                                   for h in learners]) if learners else None

    def _step(self, t: int, members: list[int]) -> None:
        """f^{t+1} = s_t f^t + the members' learners with weights w_{k,t} / |members|."""
        scale, weights = round_coefficients(self.ffgb.steps.etas(t), 0.0, AVERAGE)
        old = dict(zip(self._pool_order(), self.ensemble.weights))
        coefficients = []
        for position in self._positions():
            for k in range(len(self.pool.get(position, ()))):
                add = weights[k] / len(members) if position in members else 0.0
                coefficients.append(scale * old.get((position, k), 0.0) + add)
        learners = tuple(h for position in self._positions() for h in self.pool.get(position, ()))
        self.ensemble = Ensemble(self.ensemble.base, self.x_test.shape[1], learners,  # f^0 = 0
                                 tuple(coefficients), offset=self.ensemble.version)
        if self.test_cache is not None and self.pool_test is not None:
            values = np.einsum("l,lno->no", np.array(coefficients), self.pool_test)
            self.test_cache.values, self.test_cache.version = values, self.ensemble.version

    def _positions(self) -> range:
        return range(len(self.book.node_ids))

    def _pool_order(self) -> list[tuple[int, int]]:
        return [(position, k) for position in self._positions()
                for k in range(len(self.pool.get(position, ())))]

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if server_round < self.num_rounds or not self.ffgb.federated_eval:
            return []
        self.book.lost(self.book.node_ids)  # the function, once: every node gets it whole
        return super().configure_evaluate(server_round, arrays, config, grid)

    def description(self) -> dict[str, object]:
        return {**super().description(), "one_shot": True}

    def family_state(self) -> dict[str, ArrayRecord | ConfigRecord]:
        return {**super().family_state(), "pool": ConfigRecord({"positions": list(self.pool)})}

    def load_family_state(self, state: RecordDict) -> None:
        super().load_family_state(state)
        positions = [int(p) for p in state["pool"]["positions"]]
        k = self.ffgb.local_steps
        learners = iter(self.ensemble.learners)
        self.pool = {position: tuple(next(learners) for _ in range(k))
                     for position in positions} if self.book is not None else {}
        if self.pool:
            self._cache_pool_predictions()
