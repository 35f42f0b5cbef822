"""Kernel density decision trees (KDDTs) as functions on a box: exact L2 inner products, codec.

FedFun (section 5.4) regularises a client's tree towards its neighbours' trees in function space.
A KDDT is a ``TreeArrays`` tree plus its domain box [lower, upper]: the leaves cut the box into
boxes N_i (left child: x[f] <= t), and the tree is the function h(x) = v_i on N_i (eq. 15). So the
L2 inner product of two trees on the same box is exact and finite (eq. 16):
<h, g> = sum_{i, j} m(N_i ∩ M_j) <v_i, w_j>, with m the Lebesgue measure. It is computed by
descending both trees at once, keeping only node pairs that overlap with positive measure: for
identical trees that visits each node once, for very different trees up to |h| * |g| pairs.

Thresholds are float64 and ``predict`` walks the tree in float64 (``TreeArrays.predict`` casts to
float32), so a point lies in the box of the leaf it reaches, up to the measure-zero faces.
A threshold outside its node's box leaves one child with an empty (measure-zero) box.

Wire format of one KDDT, keys under a caller's prefix (the numbers of features and outputs never
travel): the five arrays of ``functions.trees`` (``children_left``, ``children_right``,
``feature`` int32; ``threshold`` float64; ``value`` float32 or float64, (n_nodes, n_outputs)),
plus ``lower`` and ``upper`` (float64, (n_features,)), the domain box.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from functions.errors import DecodeError
from functions.trees import FIELDS, LEAF, TreeArrays, decode_tree, encode_tree

BOX_FIELDS = ("lower", "upper")
_CHUNK = 1 << 12  # rows per block when a per-pair computation spans all p features


@dataclass(frozen=True, eq=False)
class KDDT:
    """A tree on the domain box [lower, upper] (float64, lower < upper, p = tree.n_features).

    The arrays must not be modified after construction: the node boxes are cached.
    """

    tree: TreeArrays
    lower: np.ndarray
    upper: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.tree, TreeArrays):
            raise TypeError(f"tree: expected TreeArrays, got {type(self.tree).__name__}")
        if self.tree.threshold.dtype != np.float64:
            raise ValueError(f"threshold: a KDDT needs float64, got {self.tree.threshold.dtype}")
        shape = (self.tree.n_features,)
        for name in BOX_FIELDS:
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != np.float64:
                raise ValueError(
                    f"{name}: expected a float64 array, got "
                    f"{getattr(array, 'dtype', type(array).__name__)}"
                )
            if array.shape != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {array.shape}")
            if not np.all(np.isfinite(array)):
                raise ValueError(f"{name}: contains NaN or inf")
        if not np.all(self.lower < self.upper):
            raise ValueError("the domain box needs lower < upper in every feature")

    @property
    def n_features(self) -> int:
        return self.tree.n_features

    @property
    def n_outputs(self) -> int:
        return self.tree.n_outputs

    @cached_property
    def is_leaf(self) -> np.ndarray:
        return self.tree.children_left == LEAF

    @property
    def n_leaves(self) -> int:
        return int(self.is_leaf.sum())

    def volume(self) -> float:
        """Lebesgue measure of the domain box."""
        return float(np.prod(self.upper - self.lower))

    @cached_property
    def node_boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper), each (n_nodes, p): the box of every node, the domain cut by its path.

        A threshold outside a node's box is clamped to it, so every box has lower <= upper and
        the child on the far side gets width 0 along the split feature.
        """
        tree = self.tree
        lower = np.empty((tree.n_nodes, self.n_features))
        upper = np.empty_like(lower)
        lower[0], upper[0] = self.lower, self.upper
        frontier = np.zeros(1, dtype=np.intp)
        while True:  # one level of the tree per pass
            frontier = frontier[~self.is_leaf[frontier]]
            if not frontier.size:
                break
            f = tree.feature[frontier]
            cut = np.clip(tree.threshold[frontier], lower[frontier, f], upper[frontier, f])
            left, right = tree.children_left[frontier], tree.children_right[frontier]
            for child in (left, right):
                lower[child], upper[child] = lower[frontier], upper[frontier]
            upper[left, f] = cut
            lower[right, f] = cut
            frontier = np.concatenate([left, right])
        lower.setflags(write=False)
        upper.setflags(write=False)
        return lower, upper

    def leaf_boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower (L, p), upper (L, p), values (L, q)) of the leaves, in node order."""
        leaves = np.flatnonzero(self.is_leaf)
        lower, upper = self.node_boxes
        return lower[leaves], upper[leaves], self.tree.value[leaves]

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Index of the leaf each row of ``x`` reaches, walking in float64 (as the boxes)."""
        return self.tree.apply(x, np.float64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Values (n, q) of the leaves the rows of ``x`` reach (the unsmoothed tree)."""
        return self.tree.value[self.apply(x)]


def overlap_measure(
    lower_a: np.ndarray, upper_a: np.ndarray, lower_b: np.ndarray, upper_b: np.ndarray
) -> np.ndarray:
    """m(A_k ∩ B_k) for row-aligned boxes (n, p) (0 where they do not overlap), in blocks."""
    out = np.empty(len(lower_a))
    for start in range(0, len(out), _CHUNK):
        rows = slice(start, start + _CHUNK)
        width = np.minimum(upper_a[rows], upper_b[rows]) - np.maximum(lower_a[rows], lower_b[rows])
        out[rows] = np.prod(np.maximum(width, 0.0), axis=1)
    return out


def leaf_pairs(a: KDDT, b: KDDT) -> tuple[np.ndarray, np.ndarray]:
    """Node indices (i, j) of the leaf pairs of ``a`` and ``b`` that overlap with positive measure.

    Both trees are descended at once from the root pair: a pair splits every internal node it
    holds (2 or 4 child pairs) and a child pair is kept only if it still overlaps. The child
    boxes differ from the parent pair's only along the split features, so only those are checked.
    """
    _check_same_domain(a, b)
    lower_a, upper_a = a.node_boxes
    lower_b, upper_b = b.node_boxes
    i = j = np.zeros(1, dtype=np.intp)
    found_i, found_j = [], []
    while i.size:
        split_a, split_b = ~a.is_leaf[i], ~b.is_leaf[j]
        done = ~(split_a | split_b)
        found_i.append(i[done])
        found_j.append(j[done])
        i, j, split_a, split_b = i[~done], j[~done], split_a[~done], split_b[~done]
        feature_a, feature_b = a.tree.feature[i], b.tree.feature[j]
        dim_a = np.where(split_a, feature_a, feature_b)  # a feature either side may have cut
        dim_b = np.where(split_b, feature_b, feature_a)
        sides_a = (np.where(split_a, a.tree.children_left[i], i), a.tree.children_right[i])
        sides_b = (np.where(split_b, b.tree.children_left[j], j), b.tree.children_right[j])
        next_i, next_j = [], []
        for side_a, keep_a in zip(sides_a, (True, split_a)):
            for side_b, keep_b in zip(sides_b, (True, split_b)):
                keep = keep_a & keep_b  # a leaf has one "child": itself
                for dim in (dim_a, dim_b):
                    keep &= np.maximum(lower_a[side_a, dim], lower_b[side_b, dim]) < np.minimum(
                        upper_a[side_a, dim], upper_b[side_b, dim]
                    )
                next_i.append(side_a[keep])
                next_j.append(side_b[keep])
        i, j = np.concatenate(next_i), np.concatenate(next_j)
    return np.concatenate(found_i), np.concatenate(found_j)


def overlapping_leaves(
    tree: KDDT, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(leaf node index, box index) of every leaf and box [lower_k, upper_k] (rows of (m, p)
    arrays, boxes may reach outside the domain) that overlap with positive measure."""
    node_lower, node_upper = tree.node_boxes
    inside = np.all(np.maximum(lower, tree.lower) < np.minimum(upper, tree.upper), axis=1)
    box = np.flatnonzero(inside)
    node = np.zeros(len(box), dtype=np.intp)
    found_node, found_box = [], []
    while True:
        split = ~tree.is_leaf[node]
        found_node.append(node[~split])
        found_box.append(box[~split])
        node, box = node[split], box[split]
        if not node.size:
            break
        dim = np.tile(tree.tree.feature[node], 2)
        node = np.concatenate([tree.tree.children_left[node], tree.tree.children_right[node]])
        box = np.tile(box, 2)
        keep = np.maximum(node_lower[node, dim], lower[box, dim]) < np.minimum(
            node_upper[node, dim], upper[box, dim]
        )
        node, box = node[keep], box[keep]
    return np.concatenate(found_node), np.concatenate(found_box)


def _pair_measures(a: KDDT, b: KDDT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = leaf_pairs(a, b)
    (lower_a, upper_a), (lower_b, upper_b) = a.node_boxes, b.node_boxes
    return i, j, overlap_measure(lower_a[i], upper_a[i], lower_b[j], upper_b[j])


def inner_product(a: KDDT, b: KDDT) -> float:
    """<a, b> = integral over the domain of <a(x), b(x)> (eq. 16), exact."""
    i, j, measure = _pair_measures(a, b)
    dots = np.einsum("kq,kq->k", a.tree.value[i], b.tree.value[j], dtype=np.float64)
    return float(measure @ dots)


def squared_distance(a: KDDT, b: KDDT) -> float:
    """||a - b||^2 = sum over overlapping leaves of m(N_i ∩ M_j) ||v_i - w_j||^2 (both leaf sets
    partition the domain): never negative, and exactly 0 for identical trees."""
    i, j, measure = _pair_measures(a, b)
    diff = a.tree.value[i].astype(np.float64) - b.tree.value[j]
    return float(measure @ np.einsum("kq,kq->k", diff, diff))


def norm_squared(a: KDDT) -> float:
    """||a||^2 = sum over leaves of volume * ||v||^2."""
    lower, upper, value = a.leaf_boxes()
    volume = np.prod(upper - lower, axis=1)
    return float(volume @ np.einsum("kq,kq->k", value, value, dtype=np.float64))


def _check_same_domain(a: KDDT, b: KDDT) -> None:
    if not (np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)):
        raise ValueError("the two trees have different domain boxes")
    if a.n_outputs != b.n_outputs:
        raise ValueError(f"the two trees have {a.n_outputs} and {b.n_outputs} outputs")


def encode_kddt(tree: KDDT, prefix: str = "") -> dict[str, np.ndarray]:
    """The tree's five arrays and its domain box under ``prefix + name``."""
    return {
        **encode_tree(tree.tree, prefix),
        prefix + "lower": tree.lower,
        prefix + "upper": tree.upper,
    }


def decode_kddt(
    arrays: Mapping[str, np.ndarray],
    prefix: str,
    n_features: int,
    n_outputs: int,
    max_nodes: int,
) -> KDDT:
    """Rebuild a KDDT from ``arrays`` (its keys under ``prefix``, and no others with that prefix).

    Checks everything ``decode_tree`` checks, float64 thresholds, and a finite float64 domain
    box of shape (n_features,) with lower < upper; any fault raises ``DecodeError``.
    """
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"{prefix}kddt: expected a mapping, got {type(arrays).__name__}")
    keys = {k for k in arrays if isinstance(k, str) and k.startswith(prefix)}
    expected = FIELDS + BOX_FIELDS
    if keys != {prefix + name for name in expected}:
        raise DecodeError(
            f"{prefix}kddt: expected keys {list(expected)}, got "
            f"{sorted(k[len(prefix) :] for k in keys)}"
        )
    tree = decode_tree(
        {prefix + name: arrays[prefix + name] for name in FIELDS},
        prefix,
        n_features,
        n_outputs,
        max_nodes,
    )
    try:
        return KDDT(tree, arrays[prefix + "lower"], arrays[prefix + "upper"])
    except ValueError as err:
        raise DecodeError(f"{prefix}kddt: {err}") from None
