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

This is the boosting part of ``FFGBStrategy`` when ``one-shot`` is on (``RoundBoosting`` is the
multi-round one): it decides who is asked and how the round's replies enter f.
"""

from __future__ import annotations

from logging import INFO

import numpy as np
from flwr.common.logger import log

from functions.batched import weighted_sum
from functions.ensembles import PredictionCache
from functions.errors import DecodeError
from oracles.boosting import AVERAGE, round_coefficients
from run_config.ffgb import FFGBSettings
from strategies.ensemble_sync import EnsembleSync
from strategies.ffgb_replies import CheckedIncrement
from strategies.node_book import NodeBook


class OneShotBoosting:
    """One upload per node: the server replays the rounds on the pool's weights."""

    label = "FFGB.L one-shot"

    def __init__(
        self, ffgb: FFGBSettings, x_test: np.ndarray, n_outputs: int, num_rounds: int
    ) -> None:
        self.ffgb, self.x_test, self.n_outputs = ffgb, x_test, n_outputs
        self.num_rounds = num_rounds
        self.pool: dict[int, tuple] = {}  # roster position -> its K learners, in that order
        self.pool_test: np.ndarray | None = None  # (N K, n_test, outputs): each learner's values
        self.sampled: list[int] = []  # the positions of the current round's average
        self.joined: set[int] = set()  # positions of nodes that joined, yet to fit learners

    def recipients(self, server_round: int, nodes: list[int], book: NodeBook) -> list[int]:
        """Round 1: every node fits its learners; later rounds ask only the nodes that joined
        and have not fitted theirs yet. ``nodes`` are drawn by the same sampler as the
        multi-round run's, and only enter the averages."""
        self.sampled = [book.position(node) for node in nodes]
        if server_round == 1:
            log(INFO, "%s: every node fits its %d learners once", self.label, self.ffgb.local_steps)
            return list(book.node_ids)
        return [node for node in book.node_ids if book.position(node) in self.joined]

    def join(self, position: int) -> None:
        """A node joined at ``position``: it fits its learners in the next round."""
        self.joined.add(position)

    def combine(
        self,
        server_round: int,
        good: dict[int, CheckedIncrement],
        book: NodeBook,
        sync: EnsembleSync,
        test_cache: PredictionCache | None,
    ) -> tuple[int, int]:
        """Round 1 fills the pool; every round then takes one step on its weights. Returns
        (participants, learners received)."""
        new = {book.position(node): checked.delta.learners for node, checked in good.items()}
        self.joined -= set(new)
        received = sum(len(learners) for learners in new.values())
        old = dict(zip(self._order(), sync.ensemble.weights))  # f's learners, as last built
        if new:
            self.pool = dict(sorted({**self.pool, **new}.items()))  # by position, as f's
            self._cache_pool_predictions()
        members = [position for position in self.sampled if position in self.pool]
        self._step(server_round - 1, members, old, sync, test_cache)
        return len(members), received

    def evaluation_nodes(self, server_round: int, book: NodeBook) -> list[int]:
        """Only after the last round, every node, with the function whole."""
        if server_round < self.num_rounds:
            return []
        book.lost(book.node_ids)
        return list(book.node_ids)

    def _cache_pool_predictions(self) -> None:
        learners = [h for pooled in self.pool.values() for h in pooled]  # f's order
        self.pool_test = (
            np.stack([weighted_sum([h], [1.0], self.x_test, self.n_outputs) for h in learners])
            if learners
            else None
        )

    def _step(
        self,
        t: int,
        members: list[int],
        old: dict[tuple[int, int], float],
        sync: EnsembleSync,
        test_cache: PredictionCache | None,
    ) -> None:
        """f^{t+1} = s_t f^t + the members' learners with weights w_{k,t} / |members|; ``old``:
        f^t's weights by (position, k)."""
        scale, weights = round_coefficients(self.ffgb.steps.etas(t), 0.0, AVERAGE)
        order = self._order()
        coefficients = [
            scale * old.get((position, k), 0.0)
            + (weights[k] / len(members) if position in members else 0.0)
            for position, k in order
        ]
        learners = tuple(self.pool[position][k] for position, k in order)
        sync.rebuild(learners, coefficients)
        if test_cache is not None and self.pool_test is not None:
            values = np.einsum("l,lno->no", np.array(coefficients), self.pool_test)
            test_cache.values, test_cache.version = values, sync.ensemble.version

    def _order(self) -> list[tuple[int, int]]:
        """(position, k) of every learner of the pool, in f's order (by position)."""
        return [
            (position, k) for position, learners in self.pool.items() for k in range(len(learners))
        ]

    def state(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The roster positions whose learners form the pool, in order, and those of the nodes
        that joined and have not fitted theirs."""
        return tuple(self.pool), tuple(sorted(self.joined))

    def load_state(
        self,
        pool: tuple[int, ...] | None,
        joined: tuple[int, ...] | None,
        sync: EnsembleSync,
        positions: int,
    ) -> None:
        """The pool back from the checkpoint's ensemble (K learners per position, in order)."""
        k = self.ffgb.local_steps
        if (
            pool is None
            or joined is None
            or len(set(pool)) != len(pool)
            or any(not 0 <= p < positions for p in (*pool, *joined))
            or len(sync.ensemble.learners) != len(pool) * k
        ):
            raise DecodeError(
                f"pool: expected distinct roster positions below {positions}, {k} learners each"
            )
        learners = iter(sync.ensemble.learners)
        self.pool = {position: tuple(next(learners) for _ in range(k)) for position in pool}
        self.joined = set(joined)
        if self.pool:
            self._cache_pool_predictions()
