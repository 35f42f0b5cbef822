"""Decision trees as plain arrays: predicted with numpy, sent as named arrays, never pickled.

scikit-learn has no predictor that runs on bare arrays (its ``Tree`` is rebuilt only by
unpickling), so ``TreeArrays.predict`` walks the tree itself: one vectorised step per depth level
over all samples still inside the tree. It follows scikit-learn's convention exactly: inputs are
cast to float32 and a sample goes left when ``x[feature] <= threshold``; leaves have both children
-1 and feature -2. Thresholds are stored as float32 rounded down (the largest float32 not above
scikit-learn's float64 midpoint), which sends the same float32 inputs the same way, so predictions
stay bit-identical while each threshold costs 4 bytes.

Wire format of one tree, keys under a caller's prefix (the number of features and outputs never
travel; both sides know them): ``children_left``, ``children_right``, ``feature`` (int32,
n_nodes), ``threshold`` (float32 or float64, n_nodes), ``value`` (float32 or float64, (n_nodes,
n_outputs)). Many trees travel packed in preorder (``functions.forest``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from functions.errors import DecodeError

LEAF = -1  # child index of a leaf, as in scikit-learn
LEAF_FEATURE = -2  # feature of a leaf, as in scikit-learn
FIELDS = ("children_left", "children_right", "feature", "threshold", "value")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class TreeSpec:
    """What a tree maps from and to: all trees of one ensemble share it, whatever their shape."""

    n_features: int
    n_outputs: int
    kind: ClassVar[str] = "tree"


@dataclass(frozen=True, eq=False)
class TreeArrays:
    """A binary tree of axis-aligned splits with a vector of outputs per node (root = node 0).

    Construction checks that the arrays form one tree (see ``check_tree``), so ``predict``
    always terminates, and records its depth.
    """

    children_left: np.ndarray
    children_right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    n_features: int
    _depth: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_depth", check_tree(self))

    @classmethod
    def prechecked(
        cls,
        children_left: np.ndarray,
        children_right: np.ndarray,
        feature: np.ndarray,
        threshold: np.ndarray,
        value: np.ndarray,
        n_features: int,
        depth: int,
    ) -> TreeArrays:
        """A tree whose arrays a vectorised decoder has already checked as ``check_tree`` does
        (``functions.forest.unpack_trees``), with the depth it computed. Built without the
        per-tree check, whose fixed cost (about 0.1 ms) dominated decoding thousands of trees."""
        tree = object.__new__(cls)
        for name, array in (
            ("children_left", children_left),
            ("children_right", children_right),
            ("feature", feature),
            ("threshold", threshold),
            ("value", value),
            ("n_features", n_features),
            ("_depth", depth),
        ):
            object.__setattr__(tree, name, array)
        return tree

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    @property
    def n_outputs(self) -> int:
        return self.value.shape[1]

    @property
    def depth(self) -> int:
        """Length of the longest root-to-leaf path (a single leaf has depth 0)."""
        return self._depth

    @cached_property
    def spec(self) -> TreeSpec:
        """Built once a tree: grouping thousands of received trees asks for it many times."""
        return TreeSpec(self.n_features, self.n_outputs)

    def apply(self, x: np.ndarray, dtype: type = np.float32) -> np.ndarray:
        """The index of the leaf each row of ``x`` falls into (scikit-learn's ``apply``), the
        inputs compared in ``dtype`` (float32 as scikit-learn; a KDDT walks in float64)."""
        x = np.asarray(x, dtype=dtype)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected inputs of shape (n, {self.n_features}), got {x.shape}")
        if np.isnan(x).any():
            raise ValueError("NaN inputs are not supported (scikit-learn routes them per node)")
        node = np.zeros(len(x), dtype=np.intp)
        active = np.flatnonzero(self.feature[node] != LEAF_FEATURE)
        while active.size:
            at = node[active]
            left = x[active, self.feature[at]] <= self.threshold[at]
            node[active] = np.where(left, self.children_left[at], self.children_right[at])
            active = active[self.feature[node[active]] != LEAF_FEATURE]
        return node

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Outputs (n, n_outputs) of the leaves the rows of ``x`` reach."""
        return self.value[self.apply(x)]


def check_tree(tree: TreeArrays) -> int:
    """The tree's depth; ``ValueError`` unless the arrays form a single finite tree rooted at 0.

    Checks dtypes, equal lengths, leaves (both children -1, feature -2), internal nodes (children
    in [1, n), feature in [0, n_features), finite threshold), that every node but the root has
    exactly one parent and that all nodes are reachable from the root (so no cycles), and finite
    values.
    """
    left, right, feature = tree.children_left, tree.children_right, tree.feature
    threshold, value = tree.threshold, tree.value
    for name in ("children_left", "children_right", "feature"):
        array = getattr(tree, name)
        if not isinstance(array, np.ndarray) or array.dtype != np.int32 or array.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D int32 array, got {_describe(array)}")
    for name, ndim in (("threshold", 1), ("value", 2)):
        array = getattr(tree, name)
        if not isinstance(array, np.ndarray) or array.dtype not in _FLOATS or array.ndim != ndim:
            raise ValueError(
                f"{name}: expected a {ndim}-D float32/64 array, got {_describe(array)}"
            )
    n = len(feature)
    if n == 0 or not len(left) == len(right) == len(threshold) == len(value) == n:
        raise ValueError(
            f"expected n >= 1 nodes in every array, got lengths "
            f"{[len(a) for a in (left, right, feature, threshold, value)]}"
        )
    if not (isinstance(tree.n_features, int) and tree.n_features >= 1 and value.shape[1] >= 1):
        raise ValueError(
            f"need n_features >= 1 and n_outputs >= 1, got {tree.n_features}, {value.shape[1]}"
        )
    leaf = left == LEAF
    if np.any(right[leaf] != LEAF) or np.any(feature[leaf] != LEAF_FEATURE):
        raise ValueError("a leaf (left child -1) has a right child or a split feature")
    inner = ~leaf
    children = np.concatenate([left[inner], right[inner]])
    if np.any((children < 1) | (children >= n)):
        raise ValueError(f"a child index is outside [1, {n})")
    if np.any((feature[inner] < 0) | (feature[inner] >= tree.n_features)):
        raise ValueError(f"a split feature is outside [0, {tree.n_features})")
    if not np.all(np.isfinite(threshold[inner])):
        raise ValueError("a split threshold is NaN or inf")
    if np.any(np.bincount(children, minlength=n)[1:] != 1):
        raise ValueError("some node has no parent or several parents")
    reached, depth, frontier = 1, 0, np.array([0])
    while True:  # each node has one parent, so a level never repeats a node
        frontier = frontier[inner[frontier]]
        if not frontier.size:
            break
        frontier = np.concatenate([left[frontier], right[frontier]])
        reached, depth = reached + frontier.size, depth + 1
    if reached != n:
        raise ValueError(f"only {reached} of {n} nodes are reachable from the root (a cycle)")
    if not np.all(np.isfinite(value)):
        raise ValueError("a node value is NaN or inf")
    return depth


def from_sklearn(estimator: object, value_dtype: type = np.float64) -> TreeArrays:
    """The fitted tree of a ``DecisionTreeRegressor`` or single-output ``DecisionTreeClassifier``.

    A classifier's values are its class probabilities, normalised as ``predict_proba`` does.
    ``value_dtype=np.float32`` halves the value bytes but then outputs are float32-rounded.
    """
    tree = estimator.tree_
    value = tree.value
    if hasattr(estimator, "classes_"):
        if estimator.n_outputs_ != 1:
            raise ValueError("multi-output classifiers are not supported")
        value = value[:, 0, : estimator.n_classes_]
        normaliser = value.sum(axis=1)[:, np.newaxis]
        normaliser[normaliser == 0.0] = 1.0
        value = value / normaliser
    else:
        value = value[:, :, 0]
    return TreeArrays(
        children_left=tree.children_left.astype(np.int32),
        children_right=tree.children_right.astype(np.int32),
        feature=tree.feature.astype(np.int32),
        threshold=round_down_float32(tree.threshold),
        value=np.ascontiguousarray(value, dtype=value_dtype),
        n_features=int(estimator.n_features_in_),
    )


def round_down_float32(threshold: np.ndarray) -> np.ndarray:
    """The largest float32 not above each value: float32 inputs split the same way by it."""
    rounded = threshold.astype(np.float32)
    above = rounded > threshold
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded


def encode_tree(tree: TreeArrays, prefix: str = "") -> dict[str, np.ndarray]:
    """The tree's five arrays under ``prefix + field``."""
    return {prefix + name: getattr(tree, name) for name in FIELDS}


def decode_tree(
    arrays: Mapping[str, np.ndarray],
    prefix: str,
    n_features: int,
    n_outputs: int,
    max_nodes: int,
) -> TreeArrays:
    """Rebuild a tree from ``arrays`` (its keys under ``prefix``, and no others with that prefix).

    Checks the key set, value shape against ``n_outputs``, ``n_nodes <= max_nodes`` and everything
    ``check_tree`` checks; any fault raises ``DecodeError``.
    """
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"{prefix}tree: expected a mapping, got {type(arrays).__name__}")
    keys = {k for k in arrays if isinstance(k, str) and k.startswith(prefix)}
    if keys != {prefix + name for name in FIELDS}:
        raise DecodeError(
            f"{prefix}tree: expected keys {list(FIELDS)}, got "
            f"{sorted(k[len(prefix) :] for k in keys)}"
        )
    fields = {name: arrays[prefix + name] for name in FIELDS}
    feature = fields["feature"]
    if isinstance(feature, np.ndarray) and feature.ndim == 1 and len(feature) > max_nodes:
        raise DecodeError(f"{prefix}tree: {len(feature)} nodes is more than {max_nodes}")
    try:
        tree = TreeArrays(**fields, n_features=n_features)
    except ValueError as err:
        raise DecodeError(f"{prefix}tree: {err}") from None
    if tree.n_outputs != n_outputs:
        raise DecodeError(f"{prefix}tree: {tree.n_outputs} outputs, expected {n_outputs}")
    return tree


def _describe(array: object) -> str:
    if isinstance(array, np.ndarray):
        return f"{array.dtype} of shape {array.shape}"
    return type(array).__name__
