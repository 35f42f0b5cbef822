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
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.batched import weighted_sum
from functions.ensembles import Ensemble
from functions.protocol import TRAIN
from oracles.boosting import AVERAGE, round_coefficients
from strategies.ffgb import FFGBStrategy
from strategies.roster import rekeyed


class FFGBLOneShotStrategy(FFGBStrategy):
    """FFGB.L with one upload per node: the server replays the rounds on the learners' weights."""

    label = "FFGB.L one-shot"

    def __init__(self, *args: object, num_rounds: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.num_rounds = num_rounds
        self.pool: dict[int, tuple] = {}  # node -> its K learners, in partition order
        self.pool_test: np.ndarray | None = None  # (N K, n_test, outputs): each learner's values
        self.sampled: list[int] = []  # the nodes of the current round's average

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if self.roster is None:
            self._start(grid, server_round)
        else:
            self._roster_failures += self.returning_nodes(grid, server_round)
        self.sampled = self._sample()  # the same draws as the multi-round run
        if server_round > 1:
            return []
        log(INFO, "%s: every node fits its %d learners once", self.label, self.ffgb.local_steps)
        return [self._message(node, server_round, TRAIN) for node in self.roster.node_ids]

    def rebind(self, old: int, new: int) -> None:
        """The learners the partition uploaded in round 1 stay in the pool, under the new id."""
        super().rebind(old, new)
        self.pool = rekeyed(self.pool, old, new)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        metrics = MetricRecord({"failures": self._roster_failures})
        self._roster_failures = 0
        if server_round == 1:
            good, rejected = self.book.screen(
                server_round, replies, lambda r: self._checked_increment(server_round, r))
            self.book.accept(server_round, good)
            self.pool = {node: checked.delta.learners for node, checked in good.items()}
            self.learners_up += sum(len(learners) for learners in self.pool.values())
            self.own_of.clear()
            self._cache_pool_predictions()
            metrics["failures"] += rejected
        members = [node for node in self.sampled if node in self.pool]
        metrics["participants"] = len(members)
        self._step(server_round - 1, members)
        metrics.update(self._size_metrics())
        return None, metrics

    def _cache_pool_predictions(self) -> None:
        learners = [h for node in self.roster.node_ids for h in self.pool.get(node, ())]
        outputs = self.task.num_outputs
        self.pool_test = np.stack([weighted_sum([h], [1.0], self.x_test, outputs)
                                   for h in learners]) if learners else None

    def _step(self, t: int, members: list[int]) -> None:
        """f^{t+1} = s_t f^t + the members' learners with weights w_{k,t} / |members|."""
        scale, weights = round_coefficients(self.ffgb.steps.etas(t), 0.0, AVERAGE)
        old = dict(zip(self._pool_order(), self.ensemble.weights))
        coefficients = []
        for node in self.roster.node_ids:
            for k in range(len(self.pool.get(node, ()))):
                add = weights[k] / len(members) if node in members else 0.0
                coefficients.append(scale * old.get((node, k), 0.0) + add)
        learners = tuple(h for node in self.roster.node_ids for h in self.pool.get(node, ()))
        self.ensemble = Ensemble(self.ensemble.base, self.x_test.shape[1], learners,  # f^0 = 0
                                 tuple(coefficients), offset=self.ensemble.version)
        if self.test_cache is not None and self.pool_test is not None:
            values = np.einsum("l,lno->no", np.array(coefficients), self.pool_test)
            self.test_cache.values, self.test_cache.version = values, self.ensemble.version

    def _pool_order(self) -> list[tuple[int, int]]:
        return [(node, k) for node in self.roster.node_ids
                for k in range(len(self.pool.get(node, ())))]

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if server_round < self.num_rounds or not self.ffgb.federated_eval:
            return []
        for node in self.roster.node_ids:  # the function, once: every node gets it whole
            self.book.needs_sync[node] = True
        return super().configure_evaluate(server_round, arrays, config, grid)

    def description(self) -> dict[str, object]:
        return {**super().description(), "one_shot": True}

    def state_record(self) -> RecordDict:
        state = super().state_record()
        state["pool"] = ConfigRecord({"node-ids": [str(n) for n in self.pool]})
        return state

    def load_state_record(self, state: RecordDict) -> None:
        super().load_state_record(state)
        nodes = [int(n) for n in state["pool"]["node-ids"]]
        k = self.ffgb.local_steps
        learners = iter(self.ensemble.learners)
        self.pool = {node: tuple(next(learners) for _ in range(k))
                     for node in self.roster.node_ids if node in nodes} if self.roster else {}
        if self.pool:
            self._cache_pool_predictions()
