"""Fitting a kernel density decision tree (Good et al. 2022) to weighted uniform boxes.

FedFun's local problem for trees (sections 5.1 and 5.4) is a sum of terms, each a uniform mass on
a box B_b with a label y_b: a region N with value v costs mass_b(N) ||v - y_b||^2, where
mass_b(N) is the item's mass inside N. A data point x_j smoothed by a box kernel of radius r is
the box [x_j - r, x_j + r] with its weight as mass (the kernel integrates to 1); a leaf of a
neighbour's tree with value w is its box with mass lambda * volume and label w. Only an item's
part inside the domain counts.

``fit_kddt`` grows the tree best-first like CART: a leaf's value is the mass-weighted mean
label, and a split's error reduction is ||S_L||^2/W_L + ||S_R||^2/W_R - ||S||^2/W, with W the
mass and S the mass-weighted label sum on each side. Each node keeps only the items that overlap
it with positive measure, so regularising to a similar tree stays cheap.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from functions.kddt import KDDT, overlapping_leaves
from functions.trees import LEAF, LEAF_FEATURE, TreeArrays

GAIN_TOL = 1e-10  # a split must reduce the error by more than this times the node's ||S||^2/W
SIDE_TOL = 1e-12  # a split must leave more than this fraction of the node's mass on each side
_CHUNK = 1 << 12  # rows per block when a per-pair computation spans all p features
_BLOCK_FLOATS = 1 << 16  # largest array of a split search (512 KiB: cache-sized is fastest)


@dataclass(frozen=True, eq=False)
class Boxes:
    """m items: boxes [lower, upper] (m, p), lower < upper, may reach outside the domain; their
    total mass (m,), >= 0, spread uniformly over the box; their labels (m, q)."""

    lower: np.ndarray
    upper: np.ndarray
    mass: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        for name, ndim in (("lower", 2), ("upper", 2), ("mass", 1), ("label", 2)):
            array = np.asarray(getattr(self, name), dtype=np.float64)
            if array.ndim != ndim or not np.all(np.isfinite(array)):
                raise ValueError(
                    f"{name}: expected a finite {ndim}-D array, got shape {array.shape}"
                )
            object.__setattr__(self, name, array)
        m = len(self.mass)
        if not (self.lower.shape == self.upper.shape and len(self.lower) == len(self.label) == m):
            raise ValueError(
                f"inconsistent shapes: lower {self.lower.shape}, upper "
                f"{self.upper.shape}, mass {self.mass.shape}, label "
                f"{self.label.shape}"
            )
        if not np.all(self.lower < self.upper):
            raise ValueError("every box needs lower < upper")
        if np.any(self.mass < 0):
            raise ValueError("masses must be >= 0")

    @property
    def n_features(self) -> int:
        return self.lower.shape[1]

    @staticmethod
    def concat(*parts: Boxes) -> Boxes:
        """All items of ``parts`` (same p and q) in one set."""
        if not parts:
            raise ValueError("need at least one Boxes")
        return Boxes(
            *(
                np.concatenate([getattr(b, name) for b in parts])
                for name in ("lower", "upper", "mass", "label")
            )
        )


def data_boxes(
    x: np.ndarray, y: np.ndarray, radius: float, weight: float | np.ndarray = 1.0
) -> Boxes:
    """Points ``x`` (n, p) with labels ``y`` (n, q) smoothed by a box kernel of ``radius`` > 0:
    boxes [x - r, x + r] of mass ``weight`` (a scalar or per point)."""
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"the kernel radius must be finite and > 0, got {radius}")
    x = np.asarray(x, dtype=np.float64)
    mass = np.broadcast_to(np.asarray(weight, dtype=np.float64), (len(x),))
    return Boxes(x - radius, x + radius, mass.copy(), y)


def tree_boxes(tree: KDDT, weight: float) -> Boxes:
    """The leaves of ``tree`` as items: box, label = leaf value, density ``weight`` (so mass =
    weight * volume); leaves of zero volume are left out."""
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"weight must be finite and >= 0, got {weight}")
    lower, upper, value = tree.leaf_boxes()
    keep = np.all(lower < upper, axis=1)
    volume = np.prod(upper[keep] - lower[keep], axis=1)
    return Boxes(lower[keep], upper[keep], weight * volume, value[keep])


def _masses(
    items: Boxes, index: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, mass) of items ``index`` clipped to the box [lower, upper] ((p,), or one
    row per item)."""
    start = np.maximum(items.lower[index], lower)
    end = np.minimum(items.upper[index], upper)
    fraction = (end - start) / (items.upper[index] - items.lower[index])
    return start, end, items.mass[index] * np.prod(fraction, axis=1)


def _best_split(
    start: np.ndarray,
    end: np.ndarray,
    mass: np.ndarray,
    label: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
) -> tuple[float, int, float]:
    """(gain, feature, threshold) of the best split of a node with box [lower, upper] holding
    items clipped to [start, end] (m, p) with ``mass`` (m,); gain 0 if none helps.

    Features are searched in blocks that keep the (2m, features, q) label sums near
    ``_BLOCK_FLOATS``; ties go to the lowest feature, then the lowest threshold.
    """
    m, p = start.shape
    block = max(1, _BLOCK_FLOATS // (2 * m * label.shape[1]))
    best = (0.0, -1, 0.0)
    for first in range(0, p, block):
        f = slice(first, first + block)
        gain, feature, threshold = _best_split_block(
            start[:, f], end[:, f], mass, label, lower[f], upper[f]
        )
        if gain > best[0]:
            best = (gain, first + feature, threshold)
    return best


def _best_split_block(
    start: np.ndarray,
    end: np.ndarray,
    mass: np.ndarray,
    label: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
) -> tuple[float, int, float]:
    """``_best_split`` over all features of the arrays given, vectorised across them.

    Along feature f, the mass of item b left of t is mass_b * clip((t - start_b) / (end_b -
    start_b), 0, 1), so W_L(t) and S_L(t) are piecewise linear with breakpoints at the starts
    and ends (W_R, S_R = totals minus them). Between two breakpoints (W_L, S_L, W_R, S_R) is
    affine in t, and ||S||^2/W of an affine (S, W) with W > 0 is convex (a perspective of a
    convex quadratic), so the score ||S_L||^2/W_L + ||S_R||^2/W_R is convex there and its
    maximum over the interval is at one of its ends: the breakpoints inside the node's range are
    the only candidates. Per feature: sort the 2m breakpoints, then integrate the slopes (mass
    per unit length, and its label-weighted sum) between them with cumulative sums.
    """
    m, p = start.shape
    position = np.concatenate([start, end])
    order = np.argsort(position, axis=0, kind="stable")
    position = np.take_along_axis(position, order, axis=0)
    item = order % m
    density = mass[:, np.newaxis] / (end - start)  # mass per unit length along each feature
    slope = np.where(order < m, 1.0, -1.0) * density[item, np.arange(p)]  # (2m, p)
    step = np.diff(position, axis=0)
    w_left = np.zeros((2 * m, p))
    np.cumsum(np.cumsum(slope, axis=0)[:-1] * step, axis=0, out=w_left[1:])
    slope_y = np.cumsum(slope[:, :, np.newaxis] * label[item], axis=0)  # (2m, p, q)
    s_left = np.zeros_like(slope_y)
    np.cumsum(slope_y[:-1] * step[:, :, np.newaxis], axis=0, out=s_left[1:])
    w_total, s_total = w_left[-1], s_left[-1]
    w_right, s_right = w_total - w_left, s_total - s_left
    valid = (
        (position > lower)
        & (position < upper)
        & (w_left > SIDE_TOL * w_total)
        & (w_right > SIDE_TOL * w_total)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        score = (
            np.einsum("kpq,kpq->kp", s_left, s_left) / w_left
            + np.einsum("kpq,kpq->kp", s_right, s_right) / w_right
        )
    score = np.where(valid, score, -np.inf)
    f, k = np.unravel_index(np.argmax(score.T), score.T.shape)  # ties: lowest feature first
    if valid[k, f]:
        base = s_total[f] @ s_total[f] / w_total[f]
        gain = score[k, f] - base
        if gain > GAIN_TOL * base:
            return float(gain), int(f), float(position[k, f])
    return 0.0, -1, 0.0


@dataclass
class _Node:
    """A node while growing: its box, the items overlapping it, value and best split."""

    lower: np.ndarray
    upper: np.ndarray
    items: np.ndarray
    value: np.ndarray
    gain: float = 0.0
    feature: int = -1
    threshold: float = 0.0


def _make_node(
    items: Boxes,
    index: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    fallback: np.ndarray,
    search: bool,
) -> _Node:
    """The node of box [lower, upper] over the items ``index`` that may overlap it; its value is
    the mean label of their mass (``fallback`` if it has none); ``search``: find its best split."""
    start, end, mass = _masses(items, index, lower, upper)
    keep = (mass > 0) & np.all(end > start, axis=1)  # an even number of negative widths is > 0
    index, start, end, mass = index[keep], start[keep], end[keep], mass[keep]
    total = mass.sum()
    value = mass @ items.label[index] / total if total > 0 else fallback
    node = _Node(lower, upper, index, value)
    if search and len(index) > 1:
        node.gain, node.feature, node.threshold = _best_split(
            start, end, mass, items.label[index], lower, upper
        )
    return node


def fit_kddt(items: Boxes, lower: np.ndarray, upper: np.ndarray, max_leaves: int) -> KDDT:
    """The KDDT on [lower, upper] grown best-first on ``items``' smoothed squared error.

    Always splits the leaf whose best split reduces the error most, until ``max_leaves`` leaves
    or no split reduces it (beyond ``GAIN_TOL``). Deterministic. Without any mass in the domain
    the tree is the constant 0.
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    if not (isinstance(max_leaves, (int, np.integer)) and max_leaves >= 1):
        raise ValueError(f"max_leaves must be an int >= 1, got {max_leaves}")
    if lower.shape != (items.n_features,) or upper.shape != lower.shape:
        raise ValueError(
            f"domain box: expected shape ({items.n_features},), got {lower.shape}, {upper.shape}"
        )
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
        raise ValueError("the domain box needs finite lower < upper in every feature")
    q = items.label.shape[1]
    nodes = [
        _make_node(items, np.arange(len(items.mass)), lower, upper, np.zeros(q), max_leaves > 1)
    ]
    children: dict[int, tuple[int, int]] = {}
    heap = [(-nodes[0].gain, 0)]
    n_leaves = 1
    while heap and n_leaves < max_leaves:
        gain, at = heapq.heappop(heap)
        if gain >= 0:  # the largest reduction left is none
            break
        node = nodes[at]
        n_leaves += 1
        f, t = node.feature, node.threshold
        left_upper, right_lower = node.upper.copy(), node.lower.copy()
        left_upper[f] = right_lower[f] = t
        start = np.maximum(items.lower[node.items, f], node.lower[f])
        end = np.minimum(items.upper[node.items, f], node.upper[f])
        search = n_leaves < max_leaves
        for box_lower, box_upper, side in (
            (node.lower, left_upper, start < t),
            (right_lower, node.upper, end > t),
        ):
            nodes.append(
                _make_node(items, node.items[side], box_lower, box_upper, node.value, search)
            )
            heapq.heappush(heap, (-nodes[-1].gain, len(nodes) - 1))
        children[at] = (len(nodes) - 2, len(nodes) - 1)
    return KDDT(_tree_arrays(nodes, children), lower, upper)


def _tree_arrays(nodes: list[_Node], children: dict[int, tuple[int, int]]) -> TreeArrays:
    n = len(nodes)
    left = np.full(n, LEAF, dtype=np.int32)
    right = np.full(n, LEAF, dtype=np.int32)
    feature = np.full(n, LEAF_FEATURE, dtype=np.int32)
    threshold = np.full(n, float(LEAF_FEATURE))
    for at, (lc, rc) in children.items():
        left[at], right[at] = lc, rc
        feature[at], threshold[at] = nodes[at].feature, nodes[at].threshold
    value = np.array([node.value for node in nodes], dtype=np.float64)
    return TreeArrays(left, right, feature, threshold, value, n_features=len(nodes[0].lower))


def smoothed_error(tree: KDDT, items: Boxes) -> float:
    """The objective: sum over items b and leaves N of mass_b(N) ||v_N - y_b||^2, exact."""
    leaf, item = overlapping_leaves(tree, items.lower, items.upper)
    node_lower, node_upper = tree.node_boxes
    total = 0.0
    for begin in range(0, len(leaf), _CHUNK):
        at, index = leaf[begin : begin + _CHUNK], item[begin : begin + _CHUNK]
        mass = _masses(items, index, node_lower[at], node_upper[at])[2]
        diff = tree.tree.value[at] - items.label[index]
        total += float(mass @ np.einsum("kq,kq->k", diff, diff))
    return total
