"""The bins of histogram-based boosting (``fedxgb-hist``): each feature's agreed edges, and a
tree being grown in bin terms; no Flower import, so solvers may use them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
LOWEST, HIGHEST = (
    np.finfo(F32).min,
    np.finfo(F32).max,
)  # conditions that send every row right or left


@dataclass(frozen=True)
class BinLayout:
    """Where each feature's bins sit in a flat histogram row: feature ``f`` has
    ``len(edges[f]) + 1`` bins and then its missing slot, from ``offsets[f]``."""

    edges: tuple[np.ndarray, ...]
    offsets: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        sizes = [len(e) + 2 for e in self.edges]
        object.__setattr__(
            self, "offsets", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        )

    @property
    def num_features(self) -> int:
        return len(self.edges)

    @property
    def num_slots(self) -> int:
        return int(self.offsets[-1])

    def bins(self, x: np.ndarray) -> np.ndarray:
        """(n, d) bin of every value, ``len(edges[f]) + 1`` (the missing slot) for NaN."""
        x = np.asarray(x, dtype=F32).reshape(len(x), -1)
        out = np.empty(x.shape, dtype=np.int64)
        for f, e in enumerate(self.edges):
            column = x[:, f]
            out[:, f] = np.where(np.isnan(column), len(e) + 1, np.searchsorted(e, column, "right"))
        return out

    def condition(self, f: int, first_right: int) -> np.float32:
        """XGBoost's ``split_condition`` for "bins < ``first_right`` of feature f go left"."""
        if first_right <= 0:
            return LOWEST
        if first_right > len(self.edges[f]):
            return HIGHEST
        return self.edges[f][first_right - 1]


@dataclass(frozen=True)
class GrowingTree:
    """A tree being grown, in bin terms: per node the feature, the first bin that goes right,
    where missing values go, and the children (-1: a leaf)."""

    feature: np.ndarray
    first_right: np.ndarray
    default_left: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @staticmethod
    def root() -> GrowingTree:
        one = np.zeros(1, np.int64)
        return GrowingTree(one, one.copy(), one.copy(), one - 1, one - 1)

    def extends(self, earlier: GrowingTree) -> bool:
        """Whether this tree is ``earlier`` with some of its leaves split: every node that was
        split is split alike, so a row's node in ``earlier`` is above its leaf here."""
        size = len(earlier.left)
        if len(self.left) < size:
            return False
        inner = earlier.left >= 0
        mine = (self.feature, self.first_right, self.default_left, self.left, self.right)
        theirs = (
            earlier.feature,
            earlier.first_right,
            earlier.default_left,
            earlier.left,
            earlier.right,
        )
        return all(np.array_equal(a[:size][inner], b[inner]) for a, b in zip(mine, theirs))
