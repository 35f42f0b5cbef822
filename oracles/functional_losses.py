"""Pointwise losses of a function's outputs and their functional gradients (FFGB paper, eq. 6).

On an empirical measure the functional gradient of R_i at g is, at each data point x_j,
grad_1 l(g(x_j), y_j): for cross-entropy softmax(g(x_j)) - onehot(y_j), for the square loss
g(x_j) - y_j. Nothing is divided by the number of points: that is the L2(alpha_i) gradient.

The reported loss is the task's (as for every algorithm of the project): mean cross-entropy, or
the mean over points of the squared error summed over outputs (regression: the task's MSE).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax, softmax

CROSS_ENTROPY = "cross-entropy"
SQUARE = "square"
_SEQUENTIAL = 8  # numpy adds fewer values along a row one after another (pairwise from 8)


@dataclass(frozen=True)
class PointwiseLoss:
    """A loss l(f(x), y) on outputs (n, c) against labels (class ids) or targets (n, c)."""

    kind: str
    num_classes: int  # 0: targets are given as values (regression)

    def __post_init__(self) -> None:
        if self.kind not in (CROSS_ENTROPY, SQUARE):
            raise ValueError(f"unknown loss {self.kind!r}")
        if self.kind == CROSS_ENTROPY and self.num_classes < 2:
            raise ValueError("cross-entropy needs class labels")

    def targets(self, y: np.ndarray) -> np.ndarray:
        """Labels as float64 outputs: one-hot rows for classes, (n, 1) columns for values."""
        if self.num_classes:
            return np.eye(self.num_classes)[np.asarray(y, dtype=np.int64)]
        return np.asarray(y, dtype=np.float64).reshape(len(y), -1)

    def gradient(self, f: np.ndarray, y: np.ndarray) -> np.ndarray:
        """grad_1 l(f(x_j), y_j) at every point: (n, c) float64."""
        if self.kind == CROSS_ENTROPY:
            return softmax(f, axis=1) - self.targets(y)
        return f - self.targets(y)

    def hessian_diagonal(self, f: np.ndarray) -> np.ndarray:
        """The diagonal of grad_1^2 l(f(x_j), y_j) at every point, (n, c): p (1 - p) for
        cross-entropy (p = softmax(f)), 1 for the square loss."""
        if self.kind == CROSS_ENTROPY:
            p = softmax(f, axis=1)
            return p * (1.0 - p)
        return np.ones_like(f, dtype=np.float64)

    def values(self, f: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The loss at every point (n,): cross-entropy, or the squared error summed over outputs."""
        if self.kind == CROSS_ENTROPY:
            rows, y = np.arange(len(f)), np.asarray(y, dtype=np.int64)
            if f.shape[1] >= _SEQUENTIAL:  # numpy sums 8 or more values in another order
                return -log_softmax(f, axis=1)[rows, y]
            return -_log_softmax_at(f, y)
        return np.sum((f - self.targets(y)) ** 2, axis=1)

    def sums(self, f: np.ndarray, y: np.ndarray) -> tuple[float, float | None]:
        """Summed loss over the points, and the number of correct argmax predictions (None for
        regression): what a node reports and the server combines."""
        loss = float(self.values(f, y).sum()) if len(f) else 0.0
        if not self.num_classes:
            return loss, None
        return loss, float(np.sum(np.argmax(f, axis=1) == np.asarray(y))) if len(f) else 0.0


def _log_softmax_at(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log softmax(f)[j, y_j] for every row j, bit for bit scipy's ``log_softmax`` (f minus the
    row's maximum, 0 where that is not finite, minus the log of the sum of the exponentials)
    for fewer than ``_SEQUENTIAL`` columns, computed column by column: numpy's reductions along
    a short row axis take several times longer than the exponentials themselves (the
    evaluation of ``benchmarks.hist_time``'s rounds)."""
    top = f[:, 0].copy()
    for c in range(1, f.shape[1]):
        np.maximum(top, f[:, c], out=top)
    top[~np.isfinite(top)] = 0
    total = np.zeros(len(f))
    for c in range(f.shape[1]):
        total += np.exp(f[:, c] - top)
    return (f[np.arange(len(f)), y] - top) - np.log(total)
