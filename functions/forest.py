"""Many trees as one forest: their packed wire form, and the evaluation of all of them at once.

Wire form, keys under a caller's prefix (both sides know the number of features and outputs):

- ``sizes``: nodes per tree (the smallest unsigned int dtype that fits);
- ``feature``: each node's split feature in PREORDER (node, left subtree, right subtree), all
  trees concatenated; a leaf is marked by the dtype's largest value (unsigned) or -1 (signed).
  The encoder picks the smallest unsigned dtype that holds every feature index and the mark;
- ``threshold``: float32, internal nodes only, in preorder. Thresholds are rounded down to
  float32, which splits float32 inputs (trees cast inputs to float32) exactly as before;
- ``value``: float32, leaves only, in preorder, (n_leaves, n_outputs). Leaf values travel as
  float32, so the encoder refuses a tree whose values are not float32 numbers: the sender must
  use the float32-rounded tree itself (``from_sklearn(..., value_dtype=np.float32)``), and both
  sides then predict bit-identically.

In preorder the left child of an internal node is the next node and its right child follows the
left subtree, so no child index travels. The decoder checks with a running counter (no
recursion) that each tree's leaf marks form exactly one full binary tree of the stated size.

``add_weighted`` evaluates a forest level by level: all (tree, sample) pairs take one
vectorised step per depth over a (n_trees, n_samples) node-index matrix (leaves point at
themselves), then leaf values are added tree by tree in order, so the result is bit-identical to
a loop over ``TreeArrays.predict``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from functions.errors import DecodeError, check_float32
from functions.trees import LEAF, LEAF_FEATURE, TreeArrays, round_down_float32

FIELDS = ("sizes", "feature", "threshold", "value")
CHUNK_ENTRIES = 1 << 20  # (tree, sample) pairs walked at once: bounds memory to ~100 MB
_UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)


@dataclass(frozen=True)
class _Packed:
    """The nodes of many trees in one index space (tree t's nodes start at ``starts[t]``)."""

    starts: np.ndarray
    sizes: np.ndarray
    left: np.ndarray  # global child indices; -1 at leaves
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray

    @classmethod
    def of(cls, trees: Sequence[TreeArrays]) -> _Packed:
        if len({tree.spec for tree in trees}) != 1:
            raise ValueError("expected one or more trees with the same inputs and outputs")
        sizes = np.array([tree.n_nodes for tree in trees], dtype=np.intp)
        starts = np.cumsum(sizes) - sizes
        offset = np.repeat(starts, sizes)
        left, right = (
            np.concatenate([getattr(t, name) for t in trees]).astype(np.intp)
            for name in ("children_left", "children_right")
        )
        leaf = left == LEAF
        return cls(
            starts,
            sizes,
            np.where(leaf, LEAF, left + offset),
            np.where(leaf, LEAF, right + offset),
            np.concatenate([t.feature for t in trees]).astype(np.intp),
            np.concatenate([t.threshold for t in trees]),
            np.concatenate([t.value for t in trees]),
        )

    def preorder(self) -> np.ndarray:
        """order[i] = the node at preorder position i (tree by tree), level by level."""
        inner = self.left != LEAF
        levels = [self.starts]
        while (nodes := levels[-1][inner[levels[-1]]]).size:
            levels.append(np.concatenate([self.left[nodes], self.right[nodes]]))
        size = np.ones(len(self.left), dtype=np.intp)
        for level in reversed(levels):  # subtree sizes, deepest level first
            nodes = level[inner[level]]
            size[nodes] += size[self.left[nodes]] + size[self.right[nodes]]
        position = np.empty_like(size)
        position[self.starts] = self.starts
        for level in levels:
            nodes = level[inner[level]]
            position[self.left[nodes]] = position[nodes] + 1
            position[self.right[nodes]] = position[nodes] + 1 + size[self.left[nodes]]
        order = np.empty_like(position)
        order[position] = np.arange(len(position))
        return order


def pack_trees(trees: Sequence[TreeArrays], prefix: str = "") -> dict[str, np.ndarray]:
    """The wire form of ``trees`` (one or more, same spec); see the module docstring.

    ``ValueError`` if a leaf value is not a float32 number or a threshold rounds to -inf.
    """
    packed = _Packed.of(trees)
    order = packed.preorder()
    leaf = packed.left[order] == LEAF
    feature_dtype = _smallest_unsigned(trees[0].n_features)
    feature = np.where(leaf, np.iinfo(feature_dtype).max, packed.feature[order])
    threshold = round_down_float32(packed.threshold[order][~leaf])
    if not np.all(np.isfinite(threshold)):
        raise ValueError("a split threshold is below the float32 range")
    value = packed.value[order][leaf]
    value32 = value.astype(np.float32)
    if not np.array_equal(value32, value):
        raise ValueError(
            "leaf values must be float32 numbers: send the float32-rounded tree "
            "(from_sklearn(..., value_dtype=np.float32))"
        )
    return {
        prefix + "sizes": packed.sizes.astype(_smallest_unsigned(int(packed.sizes.max()))),
        prefix + "feature": feature.astype(feature_dtype),
        prefix + "threshold": threshold,
        prefix + "value": value32,
    }


def join_packed_trees(
    parts: Sequence[Mapping[str, np.ndarray]], prefix: str = ""
) -> dict[str, np.ndarray]:
    """``pack_trees`` of the concatenated trees, from the packs of its parts (tree by tree the
    wire form is independent; only the ``sizes`` dtype depends on every tree)."""
    joined = {prefix + name: np.concatenate([part[name] for part in parts]) for name in FIELDS}
    sizes = joined[prefix + "sizes"]
    joined[prefix + "sizes"] = sizes.astype(_smallest_unsigned(int(sizes.max())))
    return joined


def unpack_trees(
    arrays: Mapping[str, object],
    prefix: str,
    count: int,
    n_features: int,
    n_outputs: int,
    max_nodes: int,
) -> list[TreeArrays]:
    """``count`` trees from ``pack_trees`` output; ``DecodeError`` on any fault.

    Checks integer ``sizes`` (count,) in [1, max_nodes] and ``feature`` (total nodes,) with
    split features in [0, n_features), that each tree's leaf marks form one full binary tree of
    its size, and finite float32 ``threshold`` (internal nodes,) and ``value`` (leaves,
    n_outputs). The caller checks the key set.
    """
    sizes = _integers(arrays[prefix + "sizes"], prefix + "sizes", (count,))
    if np.any((sizes < 1) | (sizes > max_nodes)):
        raise DecodeError(f"{prefix}sizes: a tree has fewer than 1 or more than {max_nodes} nodes")
    sizes = sizes.astype(np.intp)
    total = int(sizes.sum())
    feature = _integers(arrays[prefix + "feature"], prefix + "feature", (total,))
    leaf = feature == (np.iinfo(feature.dtype).max if feature.dtype.kind == "u" else -1)
    split = feature[~leaf]
    if np.any((split < 0) | (split >= n_features)):
        raise DecodeError(f"{prefix}feature: a split feature is outside [0, {n_features})")
    ends = np.cumsum(sizes)
    counter = _tree_counter(leaf, sizes, ends, prefix)
    inner = ~leaf
    threshold = check_float32(
        arrays[prefix + "threshold"], prefix + "threshold", (int(inner.sum()),)
    )
    value = check_float32(
        arrays[prefix + "value"], prefix + "value", (total - len(threshold), n_outputs)
    )
    offset = np.repeat(ends - sizes, sizes)
    index = np.arange(total)
    left = np.where(inner, index + 1 - offset, LEAF).astype(np.int32)
    right_global = _right_children(counter, inner)
    right = np.full(total, LEAF, dtype=np.int32)
    right[inner] = right_global - offset[inner]
    node_feature = np.where(leaf, LEAF_FEATURE, feature.astype(np.int64)).astype(np.int32)
    node_threshold = np.full(total, LEAF_FEATURE, dtype=np.float32)
    node_threshold[inner] = threshold
    node_value = np.zeros((total, n_outputs), dtype=np.float32)
    node_value[leaf] = value
    depths = _depths(inner, right_global, ends - sizes).tolist()
    return [
        TreeArrays.prechecked(
            left[a:b],
            right[a:b],
            node_feature[a:b],
            node_threshold[a:b],
            node_value[a:b],
            n_features,
            depth,
        )
        for a, b, depth in zip((ends - sizes).tolist(), ends.tolist(), depths)
    ]


def add_weighted(
    out: np.ndarray, trees: Sequence[TreeArrays], weights: Sequence[float], x: np.ndarray
) -> None:
    """``out += sum_k weights[k] * trees[k].predict(x)``, tree by tree in order (bit-identical).

    All trees must share one spec; ``x`` is (n, n_features) without NaN (``ValueError``).
    """
    packed = _Packed.of(trees)
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != trees[0].n_features:
        raise ValueError(f"expected inputs of shape (n, {trees[0].n_features}), got {x.shape}")
    if np.isnan(x).any():
        raise ValueError("NaN inputs are not supported (scikit-learn routes them per node)")
    n = len(x)
    leaf = packed.left == LEAF
    index = np.arange(len(leaf))
    child = np.stack(
        [np.where(leaf, index, packed.left), np.where(leaf, index, packed.right)], axis=1
    ).ravel()  # child[2 * node + goes_right]; leaves point at themselves
    column = np.where(leaf, 0, packed.feature) * n  # offset of the feature's column in x.T
    inputs = np.ascontiguousarray(x.T).ravel()
    weighted = packed.value.astype(np.float64) * np.repeat(weights, packed.sizes)[:, np.newaxis]
    depths = np.array([tree.depth for tree in trees])
    samples = np.arange(n)
    step = max(1, CHUNK_ENTRIES // max(n, 1))
    for first in range(0, len(trees), step):
        node = np.repeat(packed.starts[first : first + step, np.newaxis], n, axis=1)
        for _ in range(depths[first : first + step].max()):
            goes_right = inputs[column[node] + samples] > packed.threshold[node]
            node = child[2 * node + goes_right]
        for leaves in node:
            out += np.take(weighted, leaves, axis=0)  # faster than fancy indexing


def _smallest_unsigned(largest: int) -> type:
    return next(dtype for dtype in _UNSIGNED if np.iinfo(dtype).max >= largest)


def _integers(array: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iu":
        raise DecodeError(
            f"{name}: expected an integer array, got "
            f"{getattr(array, 'dtype', type(array).__name__)}"
        )
    if array.shape != shape:
        raise DecodeError(f"{name}: expected shape {shape}, got {array.shape}")
    return array


def _tree_counter(leaf: np.ndarray, sizes: np.ndarray, ends: np.ndarray, prefix: str) -> np.ndarray:
    """Running count over all nodes of (internal: +1, leaf: -1), after checking the trees.

    Within one tree, open slots = 1 + the count since the tree's start: a preorder sequence is
    one full binary tree exactly when slots stay open until its last node and close there.
    """
    counter = np.cumsum(np.where(leaf, -1, 1))
    before = np.concatenate([[0], counter])[ends - sizes]
    local = counter - np.repeat(before, sizes)
    last = np.zeros(len(leaf), dtype=bool)
    last[ends - 1] = True
    bad = np.flatnonzero(((local < 0) & ~last) | (last & (local != -1)))
    if bad.size:
        tree = int(np.searchsorted(ends, bad[0], side="right"))
        raise DecodeError(
            f"{prefix}feature: the leaf marks of tree {tree} do not form one full "
            f"binary tree of {sizes[tree]} nodes in preorder"
        )
    return counter


def _depths(inner: np.ndarray, right: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each tree's depth, from its checked preorder (``right``: the global index of each
    internal node's right child): every node's distance to its root by pointer doubling over
    the parent links, so the passes grow as log2 of the depth, not as the depth."""
    parent = np.arange(len(inner))  # roots point at themselves
    nodes = np.flatnonzero(inner)
    parent[nodes + 1] = nodes
    parent[right] = nodes
    distance = (parent != np.arange(len(inner))).astype(np.intp)
    while not np.array_equal(ancestor := parent[parent], parent):
        distance += distance[parent]
        parent = ancestor
    return np.maximum.reduceat(distance, starts)


def _right_children(counter: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Global index of each internal node's right child, from the checked running count.

    The left subtree of internal node i starts at i + 1 and ends at the first node e > i whose
    count is counter[i] - 1; the right child is e + 1. Found for all nodes at once by sorting
    (count, index) pairs.
    """
    total = len(counter)
    low = int(counter.min())
    keys = np.sort((counter - low) * (total + 1) + np.arange(total))
    nodes = np.flatnonzero(inner)
    wanted = (counter[nodes] - 1 - low) * (total + 1) + nodes + 1
    return keys[np.searchsorted(keys, wanted)] % (total + 1) + 1
