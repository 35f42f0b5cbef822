"""The compiled loops of histogram boosting (``fedxgb-hist``): where each row ends in a tree
being grown, a node's gradient, hessian and count sums per (open leaf, slot), the best split of
each open leaf, and a finished tree's leaf values added to a node's margins.

numba compiles them (numpy has no scatter-add that does not first build an index and a weight
array of n x d entries, which cost more than the sums). Each is the plain loop over the rows in
their order, so every float64 sum adds its terms in the same order as ``np.bincount`` over the
row-major index did: the sums, and the trees grown from them, are bit for bit those of the
vectorised numpy they replace (``tests/fedavg_xgboost/test_hist_kernels.py`` holds that reference).
Compiled on first use and cached on disk by numba (``_compiled``): a process that is new for each
message (a deployment's ClientApp) loads the machine code instead of compiling it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numba
import numpy as np

from functions.bins import BinLayout, GrowingTree
from functions.xgboost_trees import Tree

F = TypeVar("F", bound=Callable[..., Any])


def _compiled(function: F) -> F:
    """``function`` compiled by numba, with its machine code cached on disk where numba finds a
    writable folder (``__pycache__`` beside this file, else the user's cache folder, or
    ``NUMBA_CACHE_DIR``), keyed by this file's contents; compiled in each process, on first
    use, where it finds none."""
    try:
        return numba.njit(nogil=True, cache=True)(function)
    except RuntimeError:  # numba: "no locator available" (no writable folder)
        return numba.njit(nogil=True)(function)


@_compiled
def _walk(bins, missing, feature, first_right, default_left, left, right, out):
    for r in range(bins.shape[0]):
        node = out[r]
        while left[node] >= 0:
            f = feature[node]
            b = bins[r, f]
            if b == missing[f]:
                go_left = default_left[node] == 1
            else:
                go_left = b < first_right[node]
            node = left[node] if go_left else right[node]
        out[r] = node


def leaf_nodes(
    tree: GrowingTree, bins: np.ndarray, missing: np.ndarray, start: np.ndarray | None = None
) -> np.ndarray:
    """The node each row (its ``bins``, (n, d)) ends in; ``missing``: each feature's missing
    slot. ``start``: a node of the tree above each row's leaf (where the row was before the
    tree's last splits), walked down from instead of the root."""
    out = np.zeros(len(bins), np.int64) if start is None else np.array(start, np.int64)
    arrays = (tree.feature, tree.first_right, tree.default_left, tree.left, tree.right)
    _walk(bins, *(np.ascontiguousarray(a, np.int64) for a in (missing, *arrays)), out)
    return out


@_compiled
def _accumulate(bins, offsets, row_leaf, g, h, sums):
    d = bins.shape[1]
    for r in range(bins.shape[0]):
        m = row_leaf[r]
        if m < 0:
            continue
        gr, hr = np.float64(g[r]), np.float64(h[r])
        for f in range(d):
            s = offsets[f] + bins[r, f]
            sums[m, s, 0] += gr
            sums[m, s, 1] += hr
            sums[m, s, 2] += 1.0


def add_rows(
    layout: BinLayout,
    bins: np.ndarray,
    row_leaf: np.ndarray,
    g: np.ndarray,
    h: np.ndarray,
    sums: np.ndarray,
) -> None:
    """Add each row's gradient ``g`` and hessian ``h`` (float32, (n,)) and a count of 1 to the
    slots of its bins in histogram row ``row_leaf`` of ``sums`` ((M, S, 3) float64: gradient,
    hessian and count sums side by side, one cache line a slot; -1: the row is in no open
    leaf), in place. A count stays an exact integer in float64 up to 2^53 rows."""
    _accumulate(
        bins,
        layout.offsets,
        np.ascontiguousarray(row_leaf, np.int64),
        np.ascontiguousarray(g, np.float32),
        np.ascontiguousarray(h, np.float32),
        sums,
    )


@_compiled
def _gain(g, h, lam):
    """XGBoost's float32 ``CalcGainGivenWeight``: G^2 / (H + lambda), 0 where H <= 0."""
    if h <= 0:
        return np.float32(0)
    return np.float32(g * g) / np.float32(h + lam)


@_compiled
def _search(grad, hess, count, offsets, present, pg, ph, lam, mcw, out_int, out_f32, out_f64):
    for m in range(grad.shape[0]):
        root = _gain(pg[m], ph[m], lam)
        best = np.float32(0)
        found = False
        for f in range(offsets.shape[0] - 1):
            start = offsets[f]
            nb = offsets[f + 1] - start - 1  # the bins; the missing slot after them
            directions = 2 if count[m, start + nb] > 0 else 1
            for backward in range(directions):
                acc_g, acc_h = 0.0, 0.0
                for j in range(nb):
                    slot = start + (nb - 1 - j if backward else j)
                    acc_g += grad[m, slot]
                    acc_h += hess[m, slot]
                    if backward:  # right = bins >= nb-1-j; missing left
                        rg, rh, lg, lh = acc_g, acc_h, pg[m] - acc_g, ph[m] - acc_h
                    else:  # left = bins <= j; missing right
                        lg, lh, rg, rh = acc_g, acc_h, pg[m] - acc_g, ph[m] - acc_h
                    if not (lh >= mcw and rh >= mcw):
                        continue
                    loss = np.float32(_gain(lg, lh, lam) + _gain(rg, rh, lam)) - root
                    if not np.isfinite(loss) or not loss > best:
                        continue
                    best, found = loss, True
                    if backward:
                        first_right = nb - 1 - j  # the lowest bin going right
                    else:  # the next bin any training row occupies
                        first_right = nb
                        for b in range(j + 1, nb):
                            if present[start + b]:
                                first_right = b
                                break
                    out_int[m, 0], out_int[m, 1], out_int[m, 2] = f, first_right, backward
                    out_f32[m] = loss
                    out_f64[m, 0], out_f64[m, 1], out_f64[m, 2], out_f64[m, 3] = lg, lh, rg, rh
        out_int[m, 3] = found


def search_splits(
    layout: BinLayout,
    grad: np.ndarray,
    hess: np.ndarray,
    count: np.ndarray,
    parents: np.ndarray,
    present: np.ndarray,
    reg_lambda: float,
    min_child_weight: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """XGBoost's best split of each open leaf from its summed histogram row ((M, S) sums,
    ``parents`` (M, 2): its (G, H)), the candidates in the order XGBoost tries them (features,
    then bins upwards, then downwards with missing values left when the leaf has any) and the
    first of equal losses kept. Per leaf: (feature, first bin right, default left, found),
    the loss change (float32) and the children's (G, H, G, H) (float64)."""
    leaves = len(grad)
    out_int = np.zeros((leaves, 4), np.int64)
    out_f32 = np.zeros(leaves, np.float32)
    out_f64 = np.zeros((leaves, 4))
    _search(
        grad,
        hess,
        count,
        layout.offsets,
        np.ascontiguousarray(present, np.bool_),
        np.ascontiguousarray(parents[:, 0], np.float64),
        np.ascontiguousarray(parents[:, 1], np.float64),
        float(reg_lambda),
        float(min_child_weight),
        out_int,
        out_f32,
        out_f64,
    )
    return out_int, out_f32, out_f64


@_compiled
def _add_leaf_values(x, left, right, feature, condition, default_left, margins, k):
    for r in range(x.shape[0]):
        node = 0
        while left[node] >= 0:
            v = x[r, feature[node]]
            if np.isnan(v):
                go_left = default_left[node] == 1
            else:
                go_left = v < condition[node]
            node = left[node] if go_left else right[node]
        margins[r, k] += condition[node]


def add_trees(margins: np.ndarray, x: np.ndarray, trees: Sequence[Tree], first: int) -> None:
    """Add the leaf values of ``trees`` (XGBoost's, raw thresholds; tree ``first + i`` is of
    output ``(first + i) % K``) to ``margins`` ((n, K) float32), in place, in tree order: what
    XGBoost's prediction adds after the trees before them, bit for bit (its float32 sum runs
    tree by tree from the base score; ``tests/fedavg_xgboost/test_hist_kernels.py``). A row goes
    left when its value is below the condition, and where the tree says when it is missing (NaN)."""
    outputs = margins.shape[1]
    for i, tree in enumerate(trees):
        _add_leaf_values(
            x,
            np.ascontiguousarray(tree.left, np.int64),
            np.ascontiguousarray(tree.right, np.int64),
            np.ascontiguousarray(tree.split_index, np.int64),
            np.ascontiguousarray(tree.split_condition, np.float32),
            np.ascontiguousarray(tree.default_left, np.int64),
            margins,
            (first + i) % outputs,
        )


def add_leaves(margins: np.ndarray, trees: Sequence[Tree], leaves: np.ndarray, first: int) -> None:
    """``add_trees`` for rows whose leaf in each tree is known (``leaves``, (n, len(trees))):
    the same float32 additions in the same tree order, so the same margins bit for bit."""
    outputs = margins.shape[1]
    for i, tree in enumerate(trees):
        margins[:, (first + i) % outputs] += tree.split_condition.astype(np.float32)[leaves[:, i]]
