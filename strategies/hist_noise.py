"""Row-level differential privacy of ``fedxgb-hist`` (``dp.noise-multiplier``): Gaussian noise
of z times a row's L2 sensitivity on every summed release, the grid counts that place the bin
edges and each tree level's histograms, counted by the run's privacy budget.

A row adds 1 to one grid cell of each of its d columns (sensitivity sqrt(d)); at a tree level it
sits in one open leaf of each of the K trees grown together, where it adds its gradient, hessian
and 1 to one slot of each column (sensitivity sqrt(K d (1 + H^2 + 1)), gradients in [-1, 1] and
hessians at most H: 1/4 for the logistic, 1/2 for the softmax). A sibling's histogram (the
parent's less the child's) and every split and leaf value are post-processing. The noise is the
server's, from the run's seed, or under secure aggregation the nodes' shares (each of the n
asked adds z s / sqrt(n), from the OS's randomness), so the server never sees a noiseless sum;
a node that drops takes its share with it, and the release is counted at z sqrt(m / n). What
is released is then cleaned for the tree rules: counts rounded and made non-negative, hessians
non-negative, and a child must hold a hessian sum clear of the noise to split off
(``least_hessian``). The nodes' evaluation figures, which ride beside the histograms, are not
covered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from oracles.hist_xgboost import LOGISTIC
from strategies.privacy_budget import PrivacyBudget

MARGIN = 12.0  # standard deviations of a node's noise share its bound allows for


@dataclass
class HistogramNoise:
    """The noise of a run: its multiplier, the two sensitivities and the budget it spends."""

    multiplier: float
    levels: float  # a row's L2 sensitivity at a tree level
    grid: float  # ... in the grid counts
    budget: PrivacyBudget

    @classmethod
    def of(
        cls, multiplier: float, delta: float, objective: str, trees: int, features: int
    ) -> HistogramNoise:
        hessian = 0.25 if objective == LOGISTIC else 0.5
        levels = math.sqrt(trees * features * (2.0 + hessian**2))
        return cls(multiplier, levels, math.sqrt(features), PrivacyBudget(delta, "a row"))

    def least_hessian(self, max_bin: int) -> float:
        """The hessian sum a child needs to split off (``min_child_weight``) so that it stands
        3 noise standard deviations clear of the noise a split's sum carries (a cumulative sum
        over up to ``max_bin`` noisy slots): a noise-sized leaf would carry a noise-sized weight,
        and the margins of a few such rounds overflow the softmax."""
        return 3.0 * self.multiplier * self.levels * math.sqrt(max_bin)

    def share(self, sensitivity: float, nodes: int) -> float:
        """The standard deviation each of ``nodes`` adds to its part of a secure sum."""
        return self.multiplier * sensitivity / math.sqrt(nodes)

    def central(self, arrays: list[np.ndarray], sensitivity: float, rng: np.random.Generator):
        """``arrays`` (a plain sum) with the server's noise, float64."""
        std = self.multiplier * sensitivity
        return [np.asarray(a, np.float64) + rng.normal(0.0, std, np.shape(a)) for a in arrays]

    def release(self, secure: bool, nodes: int, asked: int) -> float:
        """Count a release over ``nodes`` of the ``asked`` (shares lost with the nodes that
        dropped, under secure aggregation); the epsilon so far."""
        ratio = math.sqrt(nodes / asked) if secure else 1.0
        return self.budget.release(self.multiplier * ratio, nodes)


def cleaned(
    grad: np.ndarray, hess: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noisy sums made fit for the tree rules: hessians and counts not negative, counts whole."""
    return (
        np.asarray(grad, np.float64),
        np.maximum(np.asarray(hess, np.float64), 0.0),
        noisy_counts(count),
    )


def noisy_counts(counts: np.ndarray) -> np.ndarray:
    """Noisy grid counts made counts: whole and not negative."""
    return np.maximum(np.rint(counts), 0).astype(np.int64)
