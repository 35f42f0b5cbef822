"""One regression tree as XGBoost's JSON model stores it, as numpy arrays: what
``functions.boosters`` reads from and writes to the wire, and what ``oracles.hist_xgboost``
builds; no Flower import, so solvers may use it."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

ROOT_PARENT = 2147483647  # XGBoost's parent index of a tree's root


@dataclass(frozen=True, eq=False)
class Tree:
    """One regression tree as XGBoost stores it, node by node (children after their parent;
    -1 for a leaf's children; at a leaf ``split_condition`` holds the leaf value)."""

    left: np.ndarray  # int32
    right: np.ndarray  # int32
    split_index: np.ndarray  # int32 feature of each split (0 at leaves)
    split_condition: np.ndarray  # float32 threshold, or leaf value
    default_left: np.ndarray  # int32 0/1: where a missing value goes
    base_weight: np.ndarray  # float32
    loss_change: np.ndarray  # float32
    sum_hessian: np.ndarray  # float32

    @property
    def num_nodes(self) -> int:
        return len(self.left)

    def same_as(self, other: Tree) -> bool:
        """Every field equal, value for value."""
        return all(
            np.array_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
        )

    def parents(self) -> np.ndarray:
        parents = np.full(self.num_nodes, ROOT_PARENT, np.int64)
        inner = np.flatnonzero(self.left >= 0)
        parents[self.left[inner]] = inner
        parents[self.right[inner]] = inner
        return parents


def trees_digest(trees: Sequence[Tree], start: bytes = b"") -> bytes:
    """SHA-256 of ``trees``' structure and values (a leaf's value is its ``split_condition``),
    chained one tree at a time from ``start``: the digest of a booster's first h trees continues
    to that of all of them, so a node holding h trees and the server sending the rest compare
    the same value however the trees reached the node."""
    digest = start
    for tree in trees:
        sha = hashlib.sha256(digest)
        for array in (
            tree.left,
            tree.right,
            tree.split_index,
            tree.split_condition,
            tree.default_left,
        ):
            sha.update(np.ascontiguousarray(array).tobytes())
        digest = sha.digest()
    return digest
