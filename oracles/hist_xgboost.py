"""Histogram-based XGBoost across nodes (``fedxgb-hist``): what a node computes from its own rows
(bins, gradients, per-leaf histograms) and what the server computes from their sums (splits,
leaf weights, the trees), by XGBoost's own rules, so that the federated booster equals XGBoost
``hist`` trained on every node's rows pooled.

XGBoost cannot grow a tree from histograms it did not build (its collective "federated" mode
needs its own gRPC server and plugin, outside Flower's messages), and no other library exposes
its split rule; so the rule is restated here from xgboost 3.2's source and the tests hold it to
XGBoost's output:

- gradients (``src/objective``): float32; squared error ``g = m - y, h = 1``; logistic
  ``p = 1 / (exp(min(-m, 88.7)) + 1 + 1e-16)``, ``g = p - y``, ``h = max(p (1 - p), 1e-16)``;
  softmax with ``h = max(2 p (1 - p), 1e-16)`` (XGBoost's factor 2), its max started at
  ``FLT_MIN``.
- split search (``src/tree/hist/evaluate_splits.h``, ``split_evaluator.h``, ``param.h``): per
  feature, in order, a forward scan (missing values right) and, when the node has missing
  values, a backward scan (missing left); a candidate counts when both children have hessian
  >= ``min_child_weight``; its ``loss_chg = f32(f32(gain(L)) + f32(gain(R))) - f32(gain(P))``
  with ``gain(S) = f32(G^2) / f32(H + lambda)`` (0 when ``H <= 0``); the best is the largest,
  ties to the lower feature, then to the earlier candidate. A node is split when
  ``loss_chg > 1e-6``, ``>= gamma``, both hessians non-zero and its depth < ``max_depth``.
- leaves (``CalcWeight``): ``f32(-G / (H + lambda))`` (0 when ``H < min_child_weight``), times
  ``eta`` in float32. Trees grow depth-wise, all K trees of an iteration (one per class) at once.

Bins: a feature's agreed edges ``E`` (strictly increasing float32) make ``len(E) + 1`` bins,
``bin(x) = #{e in E: e <= x}``, and a missing value (NaN) its own slot. A split "bins < b go
left" is the XGBoost condition ``x < E[b - 1]``. Where a run of bins holds no training row the
threshold is put where XGBoost's would be on the binned rows: at the next bin any row occupies
(``present``), so predictions agree off the training rows too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from functions.bins import BinLayout, GrowingTree
from functions.xgboost_trees import Tree
from oracles.hist_kernels import add_rows, leaf_nodes, search_splits

SQUARED, LOGISTIC, SOFTMAX = "reg:squarederror", "binary:logistic", "multi:softprob"
RT_EPS = 1e-6  # XGBoost's kRtEps: the least loss change that splits a node
HESS_EPS = np.float32(1e-16)
F32 = np.float32


@dataclass(frozen=True)
class TreeParams:
    """XGBoost's tree parameters that the server applies (``eta``, ``lambda``, ``gamma``,
    ``min_child_weight``, ``max_depth``)."""

    eta: float = 0.3
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    max_depth: int = 6

    def xgboost(self) -> dict[str, float]:
        """The same parameters as ``xgboost.train`` names them."""
        return {
            "eta": self.eta,
            "lambda": self.reg_lambda,
            "gamma": self.gamma,
            "min_child_weight": self.min_child_weight,
            "max_depth": self.max_depth,
        }


# -- bins --------------------------------------------------------------------------------------
def column_sketch(x: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A node's quantile summary of each column: ``size`` quantiles (levels 0..1, NaN for a
    column with no value) and the count of non-missing values; no row leaves the node."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    counts = np.sum(~np.isnan(x), axis=0)
    levels = np.linspace(0.0, 1.0, size)
    points = np.full((x.shape[1], size), np.nan)
    for f in np.flatnonzero(counts):
        points[f] = np.quantile(x[~np.isnan(x[:, f]), f], levels, method="inverted_cdf")
    return points, counts.astype(np.int64)


def merge_sketches(
    sketches: Sequence[np.ndarray], counts: Sequence[np.ndarray], max_bin: int
) -> list[np.ndarray]:
    """Each feature's edges from the nodes' sketches: the distinct sketch points themselves
    when they number at most ``max_bin`` (every value its own bin), else ``max_bin - 1``
    quantiles of the sketch points, each node's points weighted by its count."""
    edges = []
    for f in range(sketches[0].shape[0]):
        points = np.concatenate([s[f] for s in sketches])
        weights = np.concatenate(
            [np.full(s.shape[1], c[f] / s.shape[1]) for s, c in zip(sketches, counts)]
        )
        keep = ~np.isnan(points)
        points, weights = points[keep], weights[keep]
        distinct = np.unique(points.astype(F32))
        if len(distinct) <= max_bin:
            edges.append(distinct[1:])
            continue
        order = np.argsort(points, kind="stable")
        cumulative = np.cumsum(weights[order]) / weights.sum()
        levels = np.arange(1, max_bin) / max_bin
        picked = points[order][np.minimum(np.searchsorted(cumulative, levels), len(points) - 1)]
        edges.append(np.unique(picked.astype(F32))[1:])
    return edges


def grid_boundaries(cells: int) -> np.ndarray:
    """The lower boundary of cells 1..cells-1 of the fixed grid: equal cells of
    u = 1/2 + arctan(x) / pi, which covers the whole line and is finest where standardised
    values lie."""
    return np.tan(np.pi * (np.arange(1, cells) / cells - 0.5))


def grid_counts(x: np.ndarray, cells: int) -> np.ndarray:
    """A node's count of its values of each column in each cell of the fixed grid, (d, cells)
    int64 (missing values counted nowhere): what is summed over the nodes to place the edges
    without any node's quantiles."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    boundaries = grid_boundaries(cells)
    counts = np.zeros((x.shape[1], cells), np.int64)
    for f in range(x.shape[1]):
        column = x[~np.isnan(x[:, f]), f]
        counts[f] = np.bincount(np.searchsorted(boundaries, column, "right"), minlength=cells)
    return counts


def grid_edges(counts: np.ndarray, max_bin: int) -> list[np.ndarray]:
    """Each feature's edges from the nodes' summed grid counts: every occupied cell its own
    bin when they number at most ``max_bin``, else the cells of ``max_bin - 1`` quantiles of
    the pooled counts; an edge is its cell's lower boundary (float32)."""
    boundaries = grid_boundaries(counts.shape[1])
    edges = []
    for n in counts:
        occupied = np.flatnonzero(n)
        if len(occupied) <= max_bin:
            cells = occupied[1:]
        else:
            cumulative = np.cumsum(n) / n.sum()
            cells = np.searchsorted(cumulative, np.arange(1, max_bin) / max_bin, "right")
            cells = cells[cells > occupied[0]]
        edges.append(np.unique(boundaries[cells - 1].astype(F32)))
    return edges


# -- a node's part -----------------------------------------------------------------------------
def gradients(objective: str, margins: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XGBoost's float32 gradient and hessian of every row and output, (n, K) each."""
    m = np.asarray(margins, dtype=F32).reshape(len(y), -1)
    if objective == SQUARED:
        return m - np.asarray(y, F32)[:, None], np.ones_like(m)
    if objective == LOGISTIC:
        p = F32(1) / (np.exp(np.minimum(-m, F32(88.7))) + F32(1) + HESS_EPS)
        return p - np.asarray(y, F32)[:, None], np.maximum(p * (F32(1) - p), HESS_EPS)
    wmax = np.maximum(m.max(axis=1, keepdims=True), np.finfo(F32).tiny)
    e = np.exp(m - wmax)
    total = np.sum(e.astype(np.float64), axis=1, keepdims=True)  # XGBoost sums in double
    p = e / total.astype(F32)
    h = np.maximum(F32(2) * p * (F32(1) - p), HESS_EPS)
    g = p - (np.arange(m.shape[1])[None, :] == np.asarray(y)[:, None]).astype(F32)
    return g, h


def growing_of(layout: BinLayout, tree: Tree) -> GrowingTree | None:
    """A finished tree (``TreeBuilder.to_tree``'s, raw thresholds) back in bin terms, so binned
    rows walk it; None when a split's threshold is not the condition of one of the layout's
    bins (``BinLayout.condition``)."""
    inner = np.flatnonzero(tree.left >= 0)
    feature = np.where(tree.left >= 0, tree.split_index, 0).astype(np.int64)
    first_right = np.zeros(len(tree.left), np.int64)
    for i in inner:
        f, condition = int(feature[i]), tree.split_condition[i]
        edges = layout.edges[f]
        if condition == layout.condition(f, 0):
            first_right[i] = 0
        elif condition == layout.condition(f, len(edges) + 1):
            first_right[i] = len(edges) + 1
        else:
            first_right[i] = int(np.searchsorted(edges, condition)) + 1
        if layout.condition(f, int(first_right[i])) != condition:
            return None
    return GrowingTree(
        feature,
        first_right,
        tree.default_left.astype(np.int64),
        tree.left.astype(np.int64),
        tree.right.astype(np.int64),
    )


def carried_leaves(
    layout: BinLayout,
    bins: np.ndarray,
    trees: Sequence[Tree],
    kept: Sequence[GrowingTree],
    kept_nodes: np.ndarray,
) -> np.ndarray | None:
    """(n, K) each binned row's leaf in the finished ``trees``, walked on from ``kept_nodes``,
    its node in the trees being grown at their last level (``kept``), which ``trees`` must
    extend: a step or two a row where a walk from the roots costs the trees' depth (XGBoost
    updates its predictions from its training's row partition likewise). None when ``trees``
    are not ``kept`` finished. The leaf is the one a raw value reaches (a bin goes right from
    the split's first bin exactly when its value is not below the threshold) for finite values
    and NaN; not for infinities, which a caller leaves to ``hist_kernels.add_trees``."""
    growing = [growing_of(layout, tree) for tree in trees]
    if (
        len(growing) != len(kept)
        or kept_nodes.shape != (len(bins), len(kept))
        or not all(g is not None and g.extends(k) for g, k in zip(growing, kept))
        or not all(
            0 <= kept_nodes[:, i].min(initial=0) and kept_nodes[:, i].max(initial=0) < len(k.left)
            for i, k in enumerate(kept)
        )
    ):
        return None
    return row_nodes(layout, bins, growing, kept_nodes)


def row_nodes(
    layout: BinLayout,
    bins: np.ndarray,
    trees: Sequence[GrowingTree],
    start: np.ndarray | None = None,
) -> np.ndarray:
    """(n, K) the node each row ends in, in each of ``trees``; ``start``: each row's node at an
    earlier level of the same trees (``GrowingTree.extends``), walked down from (a level's
    splits cost one step a row, not the tree's depth)."""
    missing = np.asarray([len(e) + 1 for e in layout.edges], np.int64)
    return np.stack(
        [
            leaf_nodes(tree, bins, missing, None if start is None else start[:, k])
            for k, tree in enumerate(trees)
        ],
        axis=1,
    ).reshape(len(bins), len(trees))


def histograms(
    layout: BinLayout,
    bins: np.ndarray,
    g: np.ndarray,
    h: np.ndarray,
    trees: Sequence[GrowingTree],
    open_leaves: Sequence[tuple[int, int]],
    nodes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The node's sums over its rows of gradient, hessian and count per (open leaf, slot):
    (M, S) float64, float64 and int64 for the M ``open_leaves`` ((tree, node) pairs); ``nodes``:
    each row's node in each tree (``row_nodes``, found here when not given). The sums are a
    compiled loop (``oracles.hist_kernels``)."""
    if nodes is None:
        nodes = row_nodes(layout, bins, trees)
    sums = np.zeros((len(open_leaves), layout.num_slots, 3))
    by_tree: dict[int, list[tuple[int, int]]] = {}
    for m, (k, node) in enumerate(open_leaves):
        by_tree.setdefault(k, []).append((m, node))
    for k, wanted in by_tree.items():
        position = np.full(len(trees[k].left), -1, np.int64)
        for m, node in wanted:
            position[node] = m
        add_rows(layout, bins, position[nodes[:, k]], g[:, k], h[:, k], sums)
    return sums[:, :, 0].copy(), sums[:, :, 1].copy(), sums[:, :, 2].astype(np.int64)


def merge_small_slots(
    layout: BinLayout, grad: np.ndarray, hess: np.ndarray, count: np.ndarray, least: int
) -> None:
    """Hide slots counting fewer than ``least`` rows, in place: along each (leaf, feature),
    bins then the missing slot, a small slot's sums move into the next slot, and what is left
    at the end into the last slot that kept its own; a leaf with fewer than ``least`` rows
    keeps them all in its last bin. Every feature still adds up to the leaf's totals, so the
    server's splits stay consistent, but no slot reports fewer than ``least`` of this node's
    rows (unless the leaf holds fewer): what a split loses is measured in benchmarks."""
    if least <= 1:
        return
    rows = np.arange(len(count))
    for f in range(layout.num_features):
        start, end = int(layout.offsets[f]), int(layout.offsets[f + 1])
        carry_g, carry_h = np.zeros(len(count)), np.zeros(len(count))
        carry_c = np.zeros(len(count), np.int64)
        last_kept = np.full(len(count), end - 2)
        for j in range(start, end):
            carry_g += grad[:, j]
            carry_h += hess[:, j]
            carry_c += count[:, j]
            kept = carry_c >= least
            grad[:, j] = np.where(kept, carry_g, 0.0)
            hess[:, j] = np.where(kept, carry_h, 0.0)
            count[:, j] = np.where(kept, carry_c, 0)
            last_kept = np.where(kept, j, last_kept)
            carry_g, carry_h = np.where(kept, 0.0, carry_g), np.where(kept, 0.0, carry_h)
            carry_c = np.where(kept, 0, carry_c)
        grad[rows, last_kept] += carry_g
        hess[rows, last_kept] += carry_h
        count[rows, last_kept] += carry_c


# -- the server's part -------------------------------------------------------------------------
def leaf_weight(params: TreeParams, g: float, h: float) -> np.float32:
    """XGBoost's ``CalcWeight``: -G / (H + lambda), 0 below ``min_child_weight``."""
    if h < F32(params.min_child_weight) or h <= 0:
        return F32(0)
    return F32(-g / (h + float(F32(params.reg_lambda))))


@dataclass(frozen=True)
class Split:
    """The best split of an open leaf: ``feature``, the first bin that goes right, where missing
    values go, its loss change and the children's (G, H) sums."""

    feature: int
    first_right: int
    default_left: bool
    loss_chg: float
    left: tuple[float, float]
    right: tuple[float, float]


def best_splits(
    layout: BinLayout,
    params: TreeParams,
    builders: Sequence[TreeBuilder],
    grad: np.ndarray,
    hess: np.ndarray,
    count: np.ndarray,
    present: np.ndarray,
) -> list[Split | None]:
    """XGBoost's choice for each open leaf of ``builders`` (in ``open_leaves`` order) from its
    summed histogram row (see the module docstring), None where no candidate changes the loss by
    more than 0; ``present``: the slots any training row occupies (the root's counts), for the
    thresholds. The search is a compiled loop (``oracles.hist_kernels.search_splits``)."""
    parents = np.array([b.sums[node] for b in builders for node in b.open], np.float64)
    ints, losses, sums = search_splits(
        layout,
        *(np.ascontiguousarray(a) for a in (grad, hess, count)),
        parents.reshape(-1, 2),
        present,
        float(F32(params.reg_lambda)),
        float(F32(params.min_child_weight)),
    )
    return [
        Split(
            int(f),
            int(first_right),
            bool(backward),
            float(losses[m]),
            (float(sums[m, 0]), float(sums[m, 1])),
            (float(sums[m, 2]), float(sums[m, 3])),
        )
        if found
        else None
        for m, (f, first_right, backward, found) in enumerate(ints)
    ]


def splits_apply(split: Split | None, params: TreeParams, depth: int) -> bool:
    """Whether XGBoost expands the node with ``split`` at ``depth`` (``IsValidImpl``)."""
    return (
        split is not None
        and split.loss_chg > RT_EPS
        and split.left[1] != 0
        and split.right[1] != 0
        and split.loss_chg >= F32(params.gamma)
        and depth < params.max_depth
    )


@dataclass
class TreeBuilder:
    """One tree grown depth-wise on the server: its nodes' (G, H) sums, depths and splits."""

    sums: list[tuple[float, float]]
    depth: list[int] = field(default_factory=lambda: [0])
    feature: list[int] = field(default_factory=lambda: [0])
    first_right: list[int] = field(default_factory=lambda: [0])
    default_left: list[int] = field(default_factory=lambda: [0])
    left: list[int] = field(default_factory=lambda: [-1])
    right: list[int] = field(default_factory=lambda: [-1])
    loss_chg: list[float] = field(default_factory=lambda: [0.0])
    measured: list[bool] = field(default_factory=lambda: [True])  # sums from a histogram
    open: list[int] = field(default_factory=lambda: [0])

    def growing(self) -> GrowingTree:
        return GrowingTree(
            *(
                np.asarray(v, np.int64)
                for v in (self.feature, self.first_right, self.default_left, self.left, self.right)
            )
        )

    def split(self, node: int, s: Split) -> None:
        """Give ``node`` two children (numbered as XGBoost's ``ExpandNode`` does)."""
        self.feature[node], self.first_right[node] = s.feature, s.first_right
        self.default_left[node], self.loss_chg[node] = int(s.default_left), s.loss_chg
        self.left[node], self.right[node] = len(self.sums), len(self.sums) + 1
        for sums in (s.left, s.right):
            self.sums.append(sums)
            self.depth.append(self.depth[node] + 1)
            self.feature.append(0)
            self.first_right.append(0)
            self.default_left.append(0)
            self.left.append(-1)
            self.right.append(-1)
            self.loss_chg.append(0.0)
            self.measured.append(False)

    def to_tree(self, layout: BinLayout, params: TreeParams) -> Tree:
        """XGBoost's arrays of the finished tree: raw thresholds, leaf values times ``eta``."""
        n = len(self.sums)
        weights = np.array([leaf_weight(params, g, h) for g, h in self.sums], F32)
        left, right = np.asarray(self.left, np.int32), np.asarray(self.right, np.int32)
        condition = np.empty(n, F32)
        for i in range(n):
            if left[i] < 0:
                condition[i] = F32(weights[i] * F32(params.eta))
            else:
                condition[i] = layout.condition(self.feature[i], self.first_right[i])
        return Tree(
            left,
            right,
            np.where(left >= 0, np.asarray(self.feature), 0).astype(np.int32),
            condition,
            np.asarray(self.default_left, np.int32),
            weights,
            np.asarray(self.loss_chg, F32),
            np.array([h for _, h in self.sums], F32),
        )


def grow_level(
    builders: Sequence[TreeBuilder],
    layout: BinLayout,
    params: TreeParams,
    grad: np.ndarray,
    hess: np.ndarray,
    count: np.ndarray,
    present: np.ndarray,
) -> list[tuple[int, int]]:
    """Split every open leaf of ``builders`` from the summed histograms (rows in the order of
    ``open_leaves(builders)``); returns the new open leaves (the children that may split)."""
    splits = best_splits(layout, params, builders, grad, hess, count, present)
    m = 0
    for builder in builders:
        opened = []
        for node in builder.open:
            s = splits[m]
            m += 1
            if splits_apply(s, params, builder.depth[node]):
                builder.split(node, s)
                if builder.depth[node] + 1 < params.max_depth:
                    opened += [builder.left[node], builder.right[node]]
        builder.open = opened
    return open_leaves(builders)


def open_leaves(builders: Sequence[TreeBuilder]) -> list[tuple[int, int]]:
    """The (tree, node) pairs whose histograms the next level needs, in order."""
    return [(k, node) for k, b in enumerate(builders) for node in b.open]


def root_sums(layout: BinLayout, grad: np.ndarray, hess: np.ndarray) -> list[tuple[float, float]]:
    """Each tree's root (G, H) from its root histogram row: feature 0's slots, missing included."""
    end = int(layout.offsets[1])
    return [(float(grad[k, :end].sum()), float(hess[k, :end].sum())) for k in range(len(grad))]


Exchange = Callable[
    [list[GrowingTree], list[tuple[int, int]]], tuple[np.ndarray, np.ndarray, np.ndarray]
]
Leaf = tuple[int, int]  # (tree, node)
Rows = tuple[np.ndarray, np.ndarray, np.ndarray]  # one leaf's (grad, hess, count) histogram row


def grow_iteration(
    layout: BinLayout,
    params: TreeParams,
    num_trees: int,
    exchange: Exchange,
    exact: bool = True,
) -> list[Tree]:
    """One boosting iteration: ``num_trees`` trees (one per class) grown level by level. Each
    level ``exchange`` sums the nodes' histograms of the leaves it is given (the trees so far
    and those leaves in; the summed (grad, hess, count) rows out). Below the root it is given
    only the child of each split with fewer rows; the sibling's histogram is the parent's minus
    that child's (XGBoost's own subtraction trick), so each level after the root sends half the
    leaves.

    ``exact=False``: the nodes' histograms are coarsened (``merge_small_slots``): a node's rows
    no longer sit where the server's split sees them, so the split's sums are not the children's
    and a parent's histogram minus a child's is not the sibling's. Every leaf is then asked for,
    and its sums (G, H) are its histogram's totals (which merging keeps), the leaves below the
    last split level in one more exchange."""
    builders = [TreeBuilder([(0.0, 0.0)]) for _ in range(num_trees)]
    leaves = open_leaves(builders)
    grad, hess, count = exchange([b.growing() for b in builders], leaves)
    for builder, sums in zip(builders, root_sums(layout, grad, hess)):
        builder.sums[0] = sums
    present = count[0] > 0
    held = {leaf: (grad[m], hess[m], count[m]) for m, leaf in enumerate(leaves)}
    while leaves:
        leaves = grow_level(builders, layout, params, grad, hess, count, present)
        if not exact:
            leaves = _measured(builders, layout, exchange, leaves)
        if not leaves:
            break
        parent_of = {
            child: (k, node)
            for k, builder in enumerate(builders)
            for node in range(len(builder.left))
            for child in ((k, builder.left[node]), (k, builder.right[node]))
            if builder.left[node] >= 0
        }
        asked = [
            leaf
            for leaf in leaves
            if not exact or leaf == _smaller_child(builders, layout, held, parent_of[leaf])
        ]
        got = exchange([b.growing() for b in builders], asked)
        rows = {leaf: (got[0][i], got[1][i], got[2][i]) for i, leaf in enumerate(asked)}
        for leaf in leaves:
            if leaf not in rows:
                rows[leaf] = _sibling_rows(
                    held[parent_of[leaf]], rows[_sibling(builders, leaf, parent_of)]
                )
        held = rows
        grad, hess, count = (np.stack([rows[leaf][i] for leaf in leaves]) for i in range(3))
        if not exact:
            _take_totals(builders, layout, leaves, grad, hess)
    return [b.to_tree(layout, params) for b in builders]


def _measured(
    builders: Sequence[TreeBuilder], layout: BinLayout, exchange: Exchange, leaves: list[Leaf]
) -> list[Leaf]:
    """``leaves`` (the next level's open ones); when there are none, the children of the last
    split level, which no histogram has summed yet, get their sums from one more exchange."""
    if leaves:
        return leaves
    unmeasured = [
        (k, node)
        for k, b in enumerate(builders)
        for node in range(len(b.left))
        if b.left[node] < 0 and b.depth[node] > 0 and not b.measured[node]
    ]
    if unmeasured:
        grad, hess, _ = exchange([b.growing() for b in builders], unmeasured)
        _take_totals(builders, layout, unmeasured, grad, hess)
    return []


def _take_totals(
    builders: Sequence[TreeBuilder],
    layout: BinLayout,
    leaves: list[Leaf],
    grad: np.ndarray,
    hess: np.ndarray,
) -> None:
    """Each leaf's (G, H): its histogram's totals (feature 0's slots, missing included)."""
    end = int(layout.offsets[1])
    for m, (k, node) in enumerate(leaves):
        builders[k].sums[node] = (float(grad[m, :end].sum()), float(hess[m, :end].sum()))
        builders[k].measured[node] = True


def _sibling(builders: Sequence[TreeBuilder], leaf: Leaf, parent_of: dict[Leaf, Leaf]) -> Leaf:
    k, parent = parent_of[leaf]
    b = builders[k]
    return (k, b.right[parent] if b.left[parent] == leaf[1] else b.left[parent])


def _smaller_child(
    builders: Sequence[TreeBuilder], layout: BinLayout, held: dict[Leaf, Rows], parent: Leaf
) -> Leaf:
    """The child of ``parent``'s split with fewer rows (the left on a tie), from the parent's
    counts of the split feature."""
    k, node = parent
    b = builders[k]
    f, start = b.feature[node], int(layout.offsets[b.feature[node]])
    count = held[parent][2]
    missing = int(count[start + len(layout.edges[f]) + 1])
    total = int(count[start : int(layout.offsets[f + 1])].sum())
    left = int(count[start : start + b.first_right[node]].sum()) + missing * b.default_left[node]
    return (k, b.left[node]) if left <= total - left else (k, b.right[node])


def _sibling_rows(parent: Rows, child: Rows) -> Rows:
    """The parent's histogram minus one child's: the other child's (exact zeros where it
    counts no row)."""
    count = parent[2] - child[2]
    empty = count == 0
    grad = np.where(empty, 0.0, parent[0] - child[0])
    hess = np.where(empty, 0.0, np.maximum(parent[1] - child[1], 0.0))
    return grad, hess, count
