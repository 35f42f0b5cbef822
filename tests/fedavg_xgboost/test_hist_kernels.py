"""The compiled loops of ``fedxgb-hist`` (``oracles.hist_kernels``) give, bit for bit, what the
vectorised numpy they replaced gave: each row's leaf, and the float64 sums per (open leaf,
slot) of several trees' open leaves at once, missing values and rows in no open leaf included;
and a new process loads them from numba's disk cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from functions.bins import F32, BinLayout, GrowingTree
from oracles.hist_kernels import leaf_nodes
from oracles.hist_xgboost import Split, TreeBuilder, TreeParams, best_splits, histograms

PROJECT = Path(__file__).resolve().parents[2]


def reference_leaf_of(tree: GrowingTree, bins: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The numpy walk the kernel replaced: every row down one level a pass."""
    node = np.zeros(len(bins), np.int64)
    for _ in range(len(tree.left)):
        inner = tree.left[node] >= 0
        if not inner.any():
            break
        rows = np.flatnonzero(inner)
        at = node[rows]
        f = tree.feature[at]
        b = bins[rows, f]
        go_left = np.where(b == missing[f], tree.default_left[at] == 1, b < tree.first_right[at])
        node[rows] = np.where(go_left, tree.left[at], tree.right[at])
    return node


def reference_histograms(layout, bins, g, h, trees, open_leaves):
    """The np.bincount sums the kernel replaced."""
    n, d = bins.shape
    slots = bins + layout.offsets[:-1][None, :]
    missing = np.asarray([len(e) + 1 for e in layout.edges])
    size = layout.num_slots
    grad = np.zeros((len(open_leaves), size))
    hess = np.zeros((len(open_leaves), size))
    count = np.zeros((len(open_leaves), size), np.int64)
    by_tree: dict[int, list[tuple[int, int]]] = {}
    for m, (k, node) in enumerate(open_leaves):
        by_tree.setdefault(k, []).append((m, node))
    for k, wanted in by_tree.items():
        leaf = reference_leaf_of(trees[k], bins, missing)
        position = np.full(len(trees[k].left), -1)
        for m, node in wanted:
            position[node] = m
        row_m = position[leaf]
        rows = np.flatnonzero(row_m >= 0)
        index = (row_m[rows, None] * size + slots[rows]).ravel()
        total = len(open_leaves) * size
        weights = {"g": g, "h": h}
        for out, key in ((grad, "g"), (hess, "h")):
            out += np.bincount(
                index, np.repeat(weights[key][rows, k].astype(np.float64), d), total
            ).reshape(out.shape)
        count += np.bincount(index, minlength=total).reshape(count.shape)
    return grad, hess, count


def reference_gain(params: TreeParams, g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """The numpy gain the kernel replaced."""
    lam = float(F32(params.reg_lambda))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (g * g).astype(F32) / (h + lam).astype(F32)
    return np.where(h <= 0, F32(0), value).astype(F32)


def reference_best_split(
    layout: BinLayout,
    params: TreeParams,
    grad: np.ndarray,
    hess: np.ndarray,
    count: np.ndarray,
    parent: tuple[float, float],
    present: np.ndarray,
) -> Split | None:
    """The numpy split search the kernel replaced."""
    pg, ph = parent
    root_gain = reference_gain(params, np.array([pg]), np.array([ph]))[0]
    mcw = float(F32(params.min_child_weight))
    best: Split | None = None
    best_loss = F32(0)
    for f in range(layout.num_features):
        start, nb = int(layout.offsets[f]), len(layout.edges[f]) + 1
        g, h = grad[start : start + nb], hess[start : start + nb]
        has_missing = count[start + nb] > 0
        for backward in (False, True) if has_missing else (False,):
            if backward:  # right = bins >= j, for j = nb-1 .. 0; missing left
                rg, rh = np.cumsum(g[::-1]), np.cumsum(h[::-1])
                lg, lh = pg - rg, ph - rh
            else:  # left = bins <= j, for j = 0 .. nb-1; missing right
                lg, lh = np.cumsum(g), np.cumsum(h)
                rg, rh = pg - lg, ph - lh
            valid = (lh >= mcw) & (rh >= mcw)
            loss = (reference_gain(params, lg, lh) + reference_gain(params, rg, rh)).astype(
                F32
            ) - root_gain
            loss = np.where(valid & np.isfinite(loss), loss, -np.inf).astype(F32)
            j = int(np.argmax(loss))  # the first of equal ones, as XGBoost's strict update
            if not loss[j] > best_loss:
                continue
            best_loss = loss[j]
            if backward:
                b = nb - 1 - j  # the lowest bin going right
                first_right = b
            else:
                occupied = np.flatnonzero(present[start + j + 1 : start + nb])
                first_right = j + 1 + int(occupied[0]) if len(occupied) else nb
            best = Split(
                f,
                first_right,
                backward,
                float(loss[j]),
                (float(lg[j]), float(lh[j])),
                (float(rg[j]), float(rh[j])),
            )
    return best


def random_tree(rng, layout: BinLayout, depth: int) -> GrowingTree:
    """A full tree of ``depth`` with random splits (nodes numbered breadth first)."""
    inner = 2**depth - 1
    size = 2 ** (depth + 1) - 1
    feature = np.zeros(size, np.int64)
    first_right = np.zeros(size, np.int64)
    default_left = np.zeros(size, np.int64)
    left = np.full(size, -1, np.int64)
    right = np.full(size, -1, np.int64)
    for node in range(inner):
        f = int(rng.integers(layout.num_features))
        feature[node] = f
        first_right[node] = int(rng.integers(len(layout.edges[f]) + 2))
        default_left[node] = int(rng.integers(2))
        left[node], right[node] = 2 * node + 1, 2 * node + 2
    return GrowingTree(feature, first_right, default_left, left, right)


@pytest.mark.parametrize("dtype", [np.uint16, np.int64])
def test_the_kernels_give_the_numpy_sums_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    n, d = 5_000, 7
    x = rng.normal(size=(n, d)).astype(np.float32) * rng.uniform(0.1, 1e4, size=d)
    x[rng.random((n, d)) < 0.05] = np.nan
    edges = tuple(
        np.unique(np.quantile(x[~np.isnan(x[:, f]), f], np.linspace(0, 1, 2 + f * 9)))[1:-1].astype(
            np.float32
        )
        for f in range(d)
    )
    layout = BinLayout(edges)
    bins = layout.bins(x).astype(dtype)
    g = rng.normal(size=(n, 3)).astype(np.float32) * 1e3
    h = rng.uniform(1e-6, 1, size=(n, 3)).astype(np.float32)
    trees = [random_tree(rng, layout, depth) for depth in (0, 2, 4)]
    missing = np.array([len(e) + 1 for e in edges])
    for tree in trees:
        np.testing.assert_array_equal(
            leaf_nodes(tree, bins, missing), reference_leaf_of(tree, bins, missing)
        )
    open_leaves = [(0, 0), (1, 3), (1, 6), (2, 7), (2, 20), (2, 30), (1, 4)]
    ours = histograms(layout, bins, g, h, trees, open_leaves)
    theirs = reference_histograms(layout, bins, g, h, trees, open_leaves)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert ours[2].sum() > 0


@pytest.mark.parametrize("seed", range(4))
def test_the_split_search_gives_the_numpy_choice(seed):
    """Histograms of rows in the leaves of three random trees (missing values, equal rows
    repeated so that candidates tie), searched by the kernel and by the numpy loop."""
    rng = np.random.default_rng(seed)
    n = 600
    x = rng.normal(size=(n, 4)).astype(np.float32).round(1)
    x[rng.random(x.shape) < 0.1] = np.nan
    x[n // 2 :] = x[: n // 2]
    layout = BinLayout(
        tuple(
            np.unique(x[~np.isnan(x[:, f]), f])[1 : 4 + 6 * f].astype(np.float32) for f in range(4)
        )
    )
    bins = layout.bins(x)
    g = rng.normal(size=(n, 3)).astype(np.float32).round(seed)
    h = rng.uniform(0.05, 1, size=(n, 3)).astype(np.float32)
    trees = [random_tree(rng, layout, 2) for _ in range(3)]
    open_leaves = [(k, node) for k in range(3) for node in range(3, 7)]
    grad, hess, count = histograms(layout, bins, g, h, trees, open_leaves)
    present = layout_present(layout, bins)
    end = int(layout.offsets[1])
    builders = []
    for k in range(3):
        builder = TreeBuilder([(0.0, 0.0)] * 7)
        builder.open = list(range(3, 7))
        for i, node in enumerate(builder.open):
            m = 4 * k + i
            builder.sums[node] = (float(grad[m, :end].sum()), float(hess[m, :end].sum()))
        builders.append(builder)
    found = 0
    for params in (
        TreeParams(max_depth=6),
        TreeParams(max_depth=6, min_child_weight=20.0, reg_lambda=0.1),
    ):
        ours = best_splits(layout, params, builders, grad, hess, count, present)
        theirs = [
            reference_best_split(
                layout, params, grad[m], hess[m], count[m], builders[k].sums[node], present
            )
            for m, (k, node) in enumerate(open_leaves)
        ]
        assert ours == theirs
        found += sum(isinstance(s, Split) for s in ours)
    assert found > 0


def layout_present(layout: BinLayout, bins: np.ndarray) -> np.ndarray:
    """The slots any row occupies."""
    present = np.zeros(layout.num_slots, bool)
    present[(bins + layout.offsets[:-1][None, :]).ravel()] = True
    return present


def test_a_deeper_level_walks_on_from_the_nodes_of_the_level_before():
    """A tree whose leaves were split once more: each row walked on from its node in the tree
    before ends where a walk from the root ends; a tree that is not such an extension says so."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2_000, 3)).astype(np.float32)
    layout = BinLayout(tuple(np.linspace(-2, 2, 9, dtype=np.float32) for _ in range(3)))
    bins = layout.bins(x)
    missing = np.array([len(e) + 1 for e in layout.edges])
    deep = random_tree(rng, layout, 3)
    inner = 3  # nodes 0..2 split: the tree of depth 2, whose leaves 3..6 split in ``deep``
    shallow = GrowingTree(
        deep.feature[:7].copy(),
        deep.first_right[:7].copy(),
        deep.default_left[:7].copy(),
        np.where(np.arange(7) < inner, deep.left[:7], -1),
        np.where(np.arange(7) < inner, deep.right[:7], -1),
    )
    assert deep.extends(shallow) and not shallow.extends(deep)
    before = leaf_nodes(shallow, bins, missing)
    assert set(before) <= {3, 4, 5, 6}
    np.testing.assert_array_equal(
        leaf_nodes(deep, bins, missing, before), leaf_nodes(deep, bins, missing)
    )
    other = random_tree(np.random.default_rng(6), layout, 3)
    assert not other.extends(shallow)


@pytest.mark.parametrize("objective", ["multi:softprob", "binary:logistic"])
def test_margins_plus_the_new_trees_are_xgboost_s_prediction_bit_for_bit(objective):
    """A node's margins, carried from round to round by adding each new iteration's leaf
    values, equal XGBoost's prediction of the whole booster, missing values included."""
    xgb = pytest.importorskip("xgboost")
    from functions.boosters import BoosterSpec, decode_booster
    from oracles.hist_kernels import add_trees
    from oracles.xgboost_local import outputs

    rng = np.random.default_rng(7)
    x = rng.normal(size=(3_000, 6)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    multi = objective.startswith("multi")
    y = (np.nan_to_num(x[:, 0]) + rng.normal(size=len(x)) > 0).astype(int)
    if multi:
        y += np.nan_to_num(x[:, 1]) > 0.7
    spec = BoosterSpec(3 if multi else 0, 6, 5, 1 << 30, binary=not multi)
    params = {**spec.params(), "tree_method": "hist", "nthread": 1, "verbosity": 0}
    matrix = xgb.DMatrix(x, label=y)
    booster = None
    margins = None
    held = 0
    for _ in range(6):
        booster = xgb.train(params, matrix, num_boost_round=1, xgb_model=booster)
        raw = bytes(booster.save_raw("json"))
        trees = decode_booster(raw, spec).trees
        if margins is None:
            margins = outputs(raw, x).astype(np.float32)
        else:
            add_trees(margins, x, trees[held:], held)
        held = len(trees)
        np.testing.assert_array_equal(margins, outputs(raw, x).astype(np.float32))


@pytest.mark.parametrize("outputs", [3, 1])
def test_leaves_carried_from_the_last_level_give_the_walk_s_margins_bit_for_bit(outputs):
    """Each iteration's finished trees, from each row's node at the last level grown
    (``carried_leaves``), put every row in the leaf a walk of its raw values reaches (missing
    values, thresholds on the edges themselves), so ``add_leaves`` adds what ``add_trees``
    adds; trees that are not those grown say so."""
    from oracles.hist_kernels import add_leaves, add_trees
    from oracles.hist_xgboost import (
        LOGISTIC,
        SOFTMAX,
        carried_leaves,
        gradients,
        grow_iteration,
        row_nodes,
    )

    rng = np.random.default_rng(11)
    x = rng.normal(size=(4_000, 5)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    layout = BinLayout(tuple(np.unique(np.round(x[~np.isnan(x[:, f]), f], 1)) for f in range(5)))
    x[:50, 0] = layout.edges[0][:50]  # values on the thresholds
    bins = layout.bins(x).astype(np.uint16)
    y = (np.nan_to_num(x[:, 0]) + rng.normal(size=len(x)) > 0).astype(int)
    if outputs == 3:
        y += np.nan_to_num(x[:, 1]) > 0.7
    objective = SOFTMAX if outputs == 3 else LOGISTIC
    params = TreeParams(max_depth=4)
    margins = np.zeros((len(x), outputs), np.float32)
    walked = margins.copy()
    held, carried, first = 0, 0, []
    for _ in range(4):
        g, h = gradients(objective, margins, y)
        last: dict = {}

        def exchange(trees, leaves, g=g, h=h, last=last):
            last["nodes"] = row_nodes(layout, bins, trees, last.get("nodes"))
            last["trees"] = trees
            return histograms(layout, bins, g, h, trees, leaves, last["nodes"])

        finished = grow_iteration(layout, params, outputs, exchange)
        first = first if held else finished
        leaves = carried_leaves(layout, bins, finished, last["trees"], last["nodes"])
        assert leaves is not None
        add_leaves(margins, finished, leaves, held)
        add_trees(walked, x, finished, held)
        np.testing.assert_array_equal(margins, walked)
        carried += 1
        held += len(finished)
    assert carried == 4
    assert carried_leaves(layout, bins, first, last["trees"], last["nodes"]) is None
    assert carried_leaves(layout, bins, finished, last["trees"], last["nodes"][:-1]) is None


FIRST_USE = """
from oracles import hist_kernels
hist_kernels._gain(1.0, 2.0, 1.0)
stats = hist_kernels._gain.stats
print(stats.cache_path is not None, sum(stats.cache_hits.values()))
"""


def first_use(env: dict[str, str]) -> tuple[bool, int]:
    """(whether it has a disk cache, its cache hits) at a kernel's first use in a new
    interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=PROJECT,
    )
    cached, hits = done.stdout.split()
    return cached == "True", int(hits)


def test_a_new_process_loads_the_kernels_from_numba_s_disk_cache(tmp_path):
    """As a deployment's ClientApp, one process a message: the first process compiles a kernel
    and writes numba's cache, the next loads it; where numba finds no writable folder for its
    cache, the kernels still import and compile in each process."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path)}
    assert first_use(cache) == (True, 0)
    assert first_use(cache) == (True, 1)
    assert first_use({"NUMBA_CACHE_LOCATOR_CLASSES": "IPythonCacheLocator"}) == (False, 0)
