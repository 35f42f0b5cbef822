"""What ``fedxgb-hist`` sends, as Flower records, and every check on what it receives.

Server to node: the agreed bin edges (``layout_record``) and the trees being grown with the
leaves whose histograms it needs (``growing_record``). Node to server: once, its quantile sketch
of each column (``sketch_record``); then, per level, its histograms (``histogram_record``).
Every reader bounds and checks shapes, dtypes and values before anything is used: a histogram
with slots out of range or out of order, non-finite sums, a negative hessian, a listed slot
without rows, counts that disagree between features or exceed the node's rows are a
``DecodeError`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord

from functions.bins import BinLayout, GrowingTree
from functions.errors import DecodeError, NonFiniteError
from functions.params import arrays_to_record, record_to_arrays

F32 = np.float32
LOWEST, HIGHEST = (
    np.finfo(F32).min,
    np.finfo(F32).max,
)  # conditions that send every row right or left
_TREE_FIELDS = ("feature", "first-right", "default-left", "left", "right")


def _exact(arrays: dict[str, np.ndarray], names: Sequence[str], where: str) -> None:
    if sorted(arrays) != sorted(names):
        raise DecodeError(f"{where}: expected arrays {sorted(names)}, got {sorted(arrays)[:8]}")


def _typed(array: np.ndarray, dtype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        raise DecodeError(f"{name}: expected {dtype} {shape}, got {array.dtype} {array.shape}")
    return array


# -- the sketch: once per run, node to server ----------------------------------------------------
@dataclass(frozen=True)
class Sketch:
    """A node's quantile summary: (d, size) points, (d,) non-missing counts, its rows."""

    points: np.ndarray
    counts: np.ndarray
    rows: int


def sketch_record(points: np.ndarray, counts: np.ndarray, rows: int) -> ArrayRecord:
    return arrays_to_record(
        {"points": points, "counts": counts, "rows": np.array([rows], np.int64)}
    )


def read_sketch(record: object, num_features: int, size: int) -> Sketch:
    """A node's sketch: ``size`` non-decreasing finite quantiles per column it has values in
    (NaN rows for a column with none), counts between 0 and its rows."""
    arrays = record_to_arrays(record, max_bytes=8 * num_features * (size + 1) + 8)
    _exact(arrays, ("points", "counts", "rows"), "sketch")
    points = _typed(arrays["points"], "float64", (num_features, size), "points")
    counts = _typed(arrays["counts"], "int64", (num_features,), "counts")
    rows = int(_typed(arrays["rows"], "int64", (1,), "rows")[0])
    if rows < 1 or np.any(counts < 0) or np.any(counts > rows):
        raise DecodeError(
            f"counts must lie in [0, rows={rows}], got {counts.min()}..{counts.max()}"
        )
    filled = counts > 0
    if not np.all(np.isnan(points[~filled])):
        raise DecodeError("a column without values must have NaN quantiles")
    if not np.all(np.isfinite(points[filled])):
        raise NonFiniteError("points: a column's quantiles hold NaN or inf")
    if np.any(np.diff(points[filled], axis=1) < 0):
        raise DecodeError("points: a column's quantiles decrease")
    return Sketch(points, counts, rows)


def grid_record(counts: np.ndarray, rows: int) -> ArrayRecord:
    """A node's grid counts, flat (``fedxgb-hist.bins='grid'``), and its rows."""
    return arrays_to_record(
        {"cells": counts.ravel().astype(np.int64), "rows": np.array([rows], np.int64)}
    )


def read_grid(
    record: object, num_features: int, cells: int, most_rows: int
) -> tuple[np.ndarray, int]:
    """Grid counts (d, cells) and rows from a node, or their secure sum: none negative, no
    column counting more than ``rows``, which is at most ``most_rows``."""
    arrays = record_to_arrays(record, max_bytes=8 * (num_features * cells + 1))
    _exact(arrays, ("cells", "rows"), "grid")
    counts = _typed(arrays["cells"], "int64", (num_features * cells,), "cells")
    rows = int(_typed(arrays["rows"], "int64", (1,), "rows")[0])
    counts = counts.reshape(num_features, cells)
    if not 1 <= rows <= most_rows or np.any(counts < 0) or np.any(counts.sum(axis=1) > rows):
        raise DecodeError(f"grid counts must be >= 0 and count at most the rows ({rows})")
    return counts, rows


# -- the bins: server to node ------------------------------------------------------------------
def layout_record(layout: BinLayout) -> ArrayRecord:
    sizes = np.array([len(e) for e in layout.edges], np.int64)
    edges = np.concatenate([*layout.edges, np.zeros(0, np.float32)]).astype(np.float32)
    return arrays_to_record({"edges": edges, "sizes": sizes})


def read_layout(record: object, num_features: int, max_bin: int) -> BinLayout:
    """The agreed edges: per feature at most ``max_bin - 1`` strictly increasing finite
    float32 values."""
    arrays = record_to_arrays(record, max_bytes=4 * num_features * max_bin + 8 * num_features)
    _exact(arrays, ("edges", "sizes"), "layout")
    return checked_layout(arrays["edges"], arrays["sizes"], num_features, max_bin)


def checked_layout(
    edges: np.ndarray, sizes: np.ndarray, num_features: int, max_bin: int
) -> BinLayout:
    """``BinLayout`` of flat float32 ``edges``, ``sizes[f]`` of them per feature, checked as
    ``read_layout`` says (also what a checkpoint holds)."""
    sizes = _typed(sizes, "int64", (num_features,), "sizes")
    if np.any(sizes < 0) or np.any(sizes > max_bin - 1):
        raise DecodeError(f"sizes: each must lie in [0, {max_bin - 1}]")
    edges = _typed(edges, "float32", (int(sizes.sum()),), "edges")
    if not np.all(np.isfinite(edges)):
        raise NonFiniteError("edges: hold NaN or inf")
    split = np.split(edges, np.cumsum(sizes)[:-1])
    if any(np.any(np.diff(e) <= 0) for e in split):
        raise DecodeError("edges: a feature's edges must increase strictly")
    return BinLayout(tuple(split))


# -- the trees being grown: server to node -------------------------------------------------------
def growing_record(trees: Sequence[GrowingTree], leaves: Sequence[tuple[int, int]]) -> ArrayRecord:
    arrays = {
        name: np.concatenate([getattr(t, name.replace("-", "_")) for t in trees]).astype(np.int64)
        for name in _TREE_FIELDS
    }
    arrays["nodes"] = np.array([len(t.left) for t in trees], np.int64)
    arrays["open"] = np.array(leaves, np.int64).reshape(-1, 2)
    return arrays_to_record(arrays)


def read_growing(
    record: object, layout: BinLayout, num_trees: int, max_depth: int
) -> tuple[list[GrowingTree], list[tuple[int, int]]]:
    """The trees being grown (each a binary tree, children after their parent, splits on known
    features at bins that exist) and the open leaves, which must be leaves of their trees."""
    max_nodes = 2 ** (max_depth + 1) - 1
    arrays = record_to_arrays(record, max_bytes=8 * (num_trees * (6 * max_nodes + 2) + 8))
    _exact(arrays, (*_TREE_FIELDS, "nodes", "open"), "growing")
    nodes = _typed(arrays["nodes"], "int64", (num_trees,), "nodes")
    if np.any(nodes < 1) or np.any(nodes > max_nodes):
        raise DecodeError(f"nodes: each tree has 1..{max_nodes} nodes")
    total = int(nodes.sum())
    columns = {n: _typed(arrays[n], "int64", (total,), n) for n in _TREE_FIELDS}
    bounds = np.cumsum(nodes)[:-1]
    trees = []
    for k, parts in enumerate(zip(*(np.split(columns[n], bounds) for n in _TREE_FIELDS))):
        trees.append(_checked_tree(GrowingTree(*parts), layout, f"tree {k}"))
    leaves = _typed(arrays["open"], "int64", arrays["open"].shape, "open")
    if leaves.ndim != 2 or leaves.shape[1] != 2 or len(leaves) > num_trees * 2**max_depth:
        raise DecodeError(f"open: expected (leaves, 2), got {leaves.shape}")
    pairs = [(int(k), int(node)) for k, node in leaves]
    for k, node in pairs:
        if not (0 <= k < num_trees and 0 <= node < nodes[k] and trees[k].left[node] < 0):
            raise DecodeError(f"open: ({k}, {node}) is not a leaf of a tree being grown")
    if len(set(pairs)) != len(pairs):
        raise DecodeError("open: a leaf is listed twice")
    return trees, pairs


def _checked_tree(tree: GrowingTree, layout: BinLayout, where: str) -> GrowingTree:
    n = len(tree.left)
    inner = tree.left >= 0
    children = np.concatenate([tree.left[inner], tree.right[inner]])
    ok = (
        np.array_equal(inner, tree.right >= 0)
        and np.all(tree.left[inner] > np.flatnonzero(inner))
        and np.all(children < n)
        and len(np.unique(children)) == len(children) == n - 1
        and np.all((tree.default_left == 0) | (tree.default_left == 1))
        and np.all((tree.feature >= 0) & (tree.feature < layout.num_features))
    )
    if not ok:
        raise DecodeError(f"{where}: not a binary tree of known features")
    limits = np.array([len(e) + 1 for e in layout.edges])[tree.feature]
    if np.any((tree.first_right < 0) | (tree.first_right > limits)):
        raise DecodeError(f"{where}: a split at a bin its feature does not have")
    return tree


# -- histograms: node to server ------------------------------------------------------------------
def histogram_record(grad: np.ndarray, hess: np.ndarray, count: np.ndarray) -> ArrayRecord:
    """(M, S) histograms as their occupied slots only: flat ``index`` (int32, increasing) and
    each one's ``grad``, ``hess`` (float64) and ``count`` (int32): 24 bytes a slot. A deep
    level's leaves hold few rows, so most slots are empty: what goes up is bounded by rows x
    features, not by leaves x bins. (``fedxgb-hist.max-histogram-bytes`` keeps M x S far below
    2^31.)"""
    index = np.flatnonzero(count)
    return arrays_to_record(
        {
            "index": index.astype(np.int32),
            "grad": grad.ravel()[index].astype(np.float64),
            "hess": hess.ravel()[index].astype(np.float64),
            "count": count.ravel()[index].astype(np.int32),
        }
    )


def dense_histogram_record(grad: np.ndarray, hess: np.ndarray, count: np.ndarray) -> ArrayRecord:
    """(M, S) histograms with every slot, flat: what a secure sum adds up (which slots a node
    occupies would otherwise show)."""
    return arrays_to_record(
        {
            "grad": grad.ravel().astype(np.float64),
            "hess": hess.ravel().astype(np.float64),
            "count": count.ravel().astype(np.int64),
        }
    )


def check_summed(
    grad: np.ndarray, hess: np.ndarray, count: np.ndarray, layout: BinLayout, rows: int
) -> None:
    """``DecodeError`` unless securely summed (leaves, slots) histograms could be sums of
    nodes' histograms: finite, hessians and counts not negative (to the fixed point's
    rounding), every feature of a leaf counting the same rows, at most ``rows`` in all."""
    if not (np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))):
        raise NonFiniteError("grad/hess: hold NaN or inf")
    if np.any(count < 0) or np.any(hess < -1e-9 * max(1.0, float(np.max(hess, initial=0)))):
        raise DecodeError("a negative count or hessian sum")
    per_feature = np.add.reduceat(count, layout.offsets[:-1], axis=1)
    if np.any(per_feature != per_feature[:, :1]):
        raise DecodeError("the features of a leaf count different rows")
    if np.any(per_feature[:, 0] > rows):
        raise DecodeError(f"a leaf counts more than the {rows} rows of the nodes")


@dataclass(frozen=True)
class SparseHistograms:
    """A node's checked histograms of ``leaves`` open leaves: the occupied slots of the flat
    (leaves x slots) histogram and their sums (``dense`` adds them into running totals)."""

    leaves: int
    size: int
    index: np.ndarray
    grad: np.ndarray
    hess: np.ndarray
    count: np.ndarray

    def add_to(self, totals: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Add these sums into flat (leaves x slots) ``totals`` (grad, hess, count), in place."""
        for total, values in zip(totals, (self.grad, self.hess, self.count)):
            total[self.index] += values

    def dense(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(leaves, slots) grad, hess and count arrays."""
        totals = (np.zeros(self.size), np.zeros(self.size), np.zeros(self.size, np.int64))
        self.add_to(totals)
        return tuple(a.reshape(self.leaves, -1) for a in totals)


def read_histograms(record: object, layout: BinLayout, leaves: int, rows: int) -> SparseHistograms:
    """A node's histograms of ``leaves`` open leaves: listed slots in increasing order within
    the leaves x slots histogram, each counting at least one row, float64 finite sums, hessians
    >= 0, every feature counting the same rows of a leaf, no leaf counting more than the node's
    ``rows``. Nothing the size of the dense histogram is allocated per reply."""
    size = leaves * layout.num_slots
    arrays = record_to_arrays(record, max_bytes=24 * size)
    _exact(arrays, ("index", "grad", "hess", "count"), "histograms")
    index = arrays["index"]
    n = len(index) if index.ndim == 1 else -1
    index = _typed(index, "int32", (n,), "index").astype(np.int64)
    grad = _typed(arrays["grad"], "float64", (n,), "grad")
    hess = _typed(arrays["hess"], "float64", (n,), "hess")
    count = _typed(arrays["count"], "int32", (n,), "count").astype(np.int64)
    if n and (index[0] < 0 or index[-1] >= size or np.any(np.diff(index) <= 0)):
        raise DecodeError(f"index: slots must increase strictly within [0, {size})")
    if not (np.all(np.isfinite(grad)) and np.all(np.isfinite(hess))):
        raise NonFiniteError("grad/hess: hold NaN or inf")
    if np.any(hess < 0):
        raise DecodeError("hess: a negative hessian sum")
    if np.any(count < 1):
        raise DecodeError("count: a listed slot counts no row")
    leaf, slot = np.divmod(index, layout.num_slots)
    feature = np.searchsorted(layout.offsets, slot, side="right") - 1
    per_feature = np.bincount(
        leaf * layout.num_features + feature, count, leaves * layout.num_features
    ).reshape(leaves, layout.num_features)
    if np.any(per_feature != per_feature[:, :1]):
        raise DecodeError("count: the features of a leaf count different rows")
    if np.any(per_feature[:, 0] > rows):
        raise DecodeError(f"count: a leaf counts more than the node's {rows} rows")
    return SparseHistograms(leaves, size, index, grad, hess, count)
