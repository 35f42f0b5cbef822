"""The attacks of ``benchmarks.privacy``: what a curious server reconstructs about a site from the
replies it receives and what it decided itself (the agreed schema, the bin edges, the base score,
FedFun's domain box, the run config).

Each attack is a pure function over one reply's arrays (or JSON) and returns what it recovered in
the numbers the site trained on (standardised values, float32 as they travelled); ``decoded``
maps them back to the site's own units, and ``recovered`` and ``labelled_rows`` score them
against the site's file. An attack meeting a record it does not recognise (other names, shapes or
dtypes: a masked vector of secure aggregation, a sealed model of relay encryption) recovers
nothing; it never raises on a reply.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from functions.bins import BinLayout
from functions.ensembles import unpack_delta
from functions.errors import DecodeError
from functions.sealed_learners import SealedLearner
from functions.trees import LEAF
from oracles.hist_xgboost import LOGISTIC, SOFTMAX, SQUARED, column_sketch

F32 = np.float32
MAX_DIGITS = 9  # decimals tried when a value is mapped back to the site's units
INTEGRAL = 1e-3  # how far from a whole number a recovered row count may be (float rounding)
ONE_HOT = 1e-9  # how far from a one-hot vector a pure KDDT leaf's value may be
Arrays = Mapping[str, np.ndarray]


# -- from what travelled back to a site's own values ---------------------------------------------
def shortest_decimals(
    observed: np.ndarray, approx: np.ndarray, forward: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """For each observed float32, the number with the fewest decimals (up to ``MAX_DIGITS``)
    that the node's own map ``forward`` sends to it exactly; NaN where none is found. A site's
    table holds few decimals and the map loses less than one of them, so this is the value in
    the site's file whenever the observation is one."""
    observed = np.asarray(observed, F32)
    approx = np.asarray(approx, np.float64)
    out = np.full(observed.shape, np.nan)
    todo = np.isfinite(approx)
    for digits in range(MAX_DIGITS + 1):
        step = 10.0**-digits
        nearest = np.round(approx, digits)
        for shift in (0, -1, 1):
            candidate = np.round(nearest + shift * step, digits)
            hit = todo & (forward(candidate) == observed)
            out[hit] = candidate[hit]
            todo &= ~hit
        if not todo.any():
            break
    return out


@dataclass(frozen=True)
class Standardised:
    """One numeric column as the agreed schema hands it to the nodes: float32 of
    (raw - mean) / std (``tasks.site_schema.transform``)."""

    mean: float
    std: float

    def forward(self, raw: np.ndarray) -> np.ndarray:
        return ((np.asarray(raw, np.float64) - self.mean) / self.std).astype(F32)

    def approx(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(z, np.float64) * self.std + self.mean


@dataclass(frozen=True)
class InCube:
    """A standardised column as FedFun's KDDTs see it: mapped into the unit cube by the agreed
    box [lower, upper] widened by ``delta`` (``oracles.domain.UnitCube``), float32."""

    column: Standardised
    lower: float
    upper: float
    delta: float

    def forward(self, raw: np.ndarray) -> np.ndarray:
        z = self.column.forward(raw)
        width = self.upper - self.lower
        scaled = (z - self.lower) / width if width > 0 else np.full(z.shape, 0.5)
        return ((scaled + self.delta) / (1.0 + 2.0 * self.delta)).astype(F32)

    def approx(self, cube: np.ndarray) -> np.ndarray:
        scaled = np.asarray(cube, np.float64) * (1.0 + 2.0 * self.delta) - self.delta
        return self.column.approx(scaled * (self.upper - self.lower) + self.lower)


def decoded(observed: np.ndarray, column: Standardised | InCube) -> np.ndarray:
    """Observed float32 values of ``column`` in the site's own units (NaN: not decodable)."""
    observed = np.asarray(observed, F32)
    return shortest_decimals(observed, column.approx(observed), column.forward)


# -- scoring ----------------------------------------------------------------------------------
def recovered(claims: Sequence[Sequence[float]], truth: np.ndarray) -> int:
    """How many of ``truth``'s values (a multiset; NaN: missing) the claims recover. A claim is
    one value, or alternatives of which the server knows one is a row's (a KDDT threshold); it
    recovers at most one value, the first alternative still unclaimed, and each value of
    ``truth`` is recovered at most as often as it occurs."""
    left = Counter(float(v) for v in np.asarray(truth, np.float64) if not math.isnan(v))
    found = 0
    for alternatives in claims:
        for value in alternatives:
            if left[float(value)] > 0:
                left[float(value)] -= 1
                found += 1
                break
    return found


@dataclass(frozen=True)
class Labelled:
    """A claim that ``rows`` rows of the site have the value ``value`` in column ``feature`` and
    the label ``label`` (class index, or the target). Claims of one ``part`` (one level of one
    tree) count disjoint rows and add up; claims of different parts may count the same rows."""

    feature: int
    value: float
    label: float
    rows: int
    part: tuple = ()


def combined(claims: Sequence[Labelled]) -> dict[tuple[int, float, float], int]:
    """Rows per (feature, value, label): summed within a part, the largest over parts (the
    parts are different cuts of the same rows)."""
    per_part: dict[tuple[int, float, float], Counter] = {}
    for claim in claims:
        key = (claim.feature, float(claim.value), float(claim.label))
        per_part.setdefault(key, Counter())[claim.part] += claim.rows
    return {key: max(parts.values()) for key, parts in per_part.items()}


def labelled_rows(
    claims: Sequence[tuple[Sequence[tuple[int, float, float]], int]],
    x: np.ndarray,
    y: np.ndarray,
) -> int:
    """How many rows of the site (``x`` (rows, columns) in its units, NaN missing; ``y`` its
    labels) the claims give a label together with an exact value of. A claim is alternatives
    (column, value, label), of which one is true, and how many rows it covers: it takes the first
    alternative some row fits and marks that many of the fitting rows, those already marked
    first, so that the figure never counts a row it cannot be sure of."""
    marked = np.zeros(len(y), bool)
    for alternatives, rows in claims:
        for column, value, label in alternatives:
            fitting = np.flatnonzero((x[:, column] == value) & (y == label))
            if fitting.size:
                order = fitting[np.argsort(~marked[fitting], kind="stable")]
                marked[order[: min(rows, fitting.size)]] = True
                break
    return int(marked.sum())


# -- fedxgb-hist's sketch ---------------------------------------------------------------------
@dataclass(frozen=True)
class SketchColumn:
    """One column of a node's sketch: its values at every rank the sketch holds, and whether
    that is every rank (then they are the column, with multiplicity)."""

    values: np.ndarray
    complete: bool


@lru_cache(maxsize=256)
def _ranks(count: int, size: int) -> np.ndarray:
    """The rank (1-based) of the value at each quantile level of ``column_sketch``: the same
    selection applied to the ranks themselves."""
    ranks = np.arange(1, count + 1, dtype=np.float64)[:, None]
    return column_sketch(ranks, size)[0][0].astype(np.int64)


def sketch_columns(arrays: Arrays) -> list[SketchColumn]:
    """Every column's values at the ranks a ``query.sketch`` reply holds (``points`` (d, size),
    ``counts`` (d,), ``rows``); [] for any other record."""
    if set(arrays) != {"points", "counts", "rows"}:
        return []
    points, counts = np.asarray(arrays["points"]), np.asarray(arrays["counts"])
    if points.ndim != 2 or points.dtype.kind != "f" or counts.shape != (len(points),):
        return []
    if counts.dtype.kind not in "iu" or np.any(counts < 0):
        return []
    columns = []
    for row, count in zip(points, counts):
        if count == 0:
            columns.append(SketchColumn(np.zeros(0), True))
            continue
        ranks, first = np.unique(_ranks(int(count), points.shape[1]), return_index=True)
        columns.append(SketchColumn(row[first], len(ranks) == count))
    return columns


# -- fedxgb-hist's histograms -----------------------------------------------------------------
@dataclass(frozen=True)
class Histograms:
    """A ``histograms`` reply read: per occupied slot its open leaf, feature, bin and sums."""

    leaf: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    grad: np.ndarray
    count: np.ndarray


def read_histograms(arrays: Arrays, layout: BinLayout, leaves: int) -> Histograms | None:
    """The occupied slots of a reply's histograms of ``leaves`` open leaves (``index``,
    ``grad``, ``hess``, ``count``: ``functions.histograms.histogram_record``); None for any
    other record."""
    if set(arrays) != {"index", "grad", "hess", "count"}:
        return None
    index, grad, count = (np.asarray(arrays[k]) for k in ("index", "grad", "count"))
    n = len(index)
    if any(a.ndim != 1 or len(a) != n for a in (index, grad, count, np.asarray(arrays["hess"]))):
        return None
    if index.dtype.kind not in "iu" or count.dtype.kind not in "iu" or grad.dtype.kind != "f":
        return None
    index = index.astype(np.int64)
    if n and (index.min() < 0 or index.max() >= leaves * layout.num_slots):
        return None
    leaf, slot = np.divmod(index, layout.num_slots)
    feature = np.searchsorted(layout.offsets, slot, side="right") - 1
    return Histograms(leaf, feature, slot - layout.offsets[feature], grad, count.astype(np.int64))


def single_row_slots(arrays: Arrays, layout: BinLayout, leaves: int) -> int:
    """Slots of the first open leaf that count one row: at the root every tree's leaf holds the
    same rows, so this is the root's single-row slots over all features."""
    read = read_histograms(arrays, layout, leaves)
    return 0 if read is None else int(np.sum((read.leaf == 0) & (read.count == 1)))


def class_rows(count: int, grad: float, start: float | None) -> int | None:
    """Rows of a slot in class k from the sum of its rows' gradients p_k - 1[y = k]: exact
    when every row's p_k is ``start`` (the base score's, before any tree), else known only when
    the bounds 0 < p_k < 1 leave one whole number; None when not determined."""
    if start is not None:
        rows = count * start - grad
        nearest = round(rows)
        return nearest if abs(rows - nearest) < INTEGRAL and 0 <= nearest <= count else None
    low, high = max(0, math.floor(-grad) + 1), min(count, math.ceil(count - grad) - 1)
    return low if low == high else None


def slot_values(
    layout: BinLayout,
    feature: int,
    bins: np.ndarray,
    column: SketchColumn | None,
    merged: bool,
) -> dict[int, float]:
    """The exact value of each listed slot of ``feature`` (its occupied ``bins`` in one leaf)
    whose bins hold a single value of the node's column (known from a complete sketch). With
    ``merged`` (``fedxgb-hist.min-bin-count``) a slot holds the rows of the bins after the
    previous listed one, and the last listed slot those after it too."""
    if column is None or not column.complete or not len(bins):
        return {}
    distinct = np.unique(column.values.astype(F32))
    where = np.searchsorted(layout.edges[feature], distinct, side="right")
    listed = np.unique(bins)
    if merged:
        at = np.minimum(np.searchsorted(listed, where, side="left"), len(listed) - 1)
        where = listed[at]
    values: dict[int, float] = {}
    for b in listed:
        inside = distinct[where == b]
        if len(inside) == 1:
            values[int(b)] = float(inside[0])
    return values


def histogram_labels(
    arrays: Arrays,
    layout: BinLayout,
    leaves: Sequence[tuple[int, int]],
    objective: str,
    start: float | None,
    sketch: Sequence[SketchColumn],
    merged: bool,
    part: tuple = (),
) -> list[Labelled]:
    """Rows whose label a level's histograms give with an exact feature value: a slot whose rows
    are all of one class (from its gradient sum, ``class_rows``), or for squared error a
    single-row slot (its gradient is start - y), at a value known exactly (``slot_values``).
    ``leaves``: the open (tree, node) pairs the level asked for; ``start``: every row's
    prediction (probability, or margin for squared error) when all rows share it, else None."""
    read = read_histograms(arrays, layout, len(leaves))
    if read is None:
        return []
    claims = []
    for m, (tree, _) in enumerate(leaves):
        for f in np.unique(read.feature[read.leaf == m]):
            here = np.flatnonzero((read.leaf == m) & (read.feature == f))
            column = sketch[f] if f < len(sketch) else None
            values = slot_values(layout, int(f), read.bin[here], column, merged)
            for i in here:
                value = values.get(int(read.bin[i]))
                label = _slot_label(objective, tree, int(read.count[i]), float(read.grad[i]), start)
                if value is not None and label is not None:
                    rows = int(read.count[i])
                    claims.append(Labelled(int(f), value, label, rows, (*part, tree)))
    return claims


def _slot_label(
    objective: str, tree: int, count: int, grad: float, start: float | None
) -> float | None:
    """The label every row of a slot has, when its sums tell it."""
    if objective == SQUARED:
        return float(F32(start - grad)) if count == 1 and start is not None else None
    rows = class_rows(count, grad, start)
    if rows == count:
        return float(1 if objective == LOGISTIC else tree)
    if rows == 0 and objective == LOGISTIC:
        return 0.0
    return None


def objective_of(classes: int) -> str:
    """XGBoost's objective for a schema's classes (``fedxgb-hist``, ``FedXgbHistSettings``)."""
    return SQUARED if classes == 0 else LOGISTIC if classes == 2 else SOFTMAX


def layout_of(arrays: Arrays) -> BinLayout | None:
    """The agreed bin edges of a ``layout`` record the server sent (``edges``, ``sizes``)."""
    if set(arrays) != {"edges", "sizes"}:
        return None
    sizes = np.asarray(arrays["sizes"]).astype(np.int64)
    return BinLayout(tuple(np.split(np.asarray(arrays["edges"], F32), np.cumsum(sizes)[:-1])))


# -- XGBoost JSON trees (fedxgb-bagging) ------------------------------------------------------
def xgboost_trees(model: object) -> list[dict]:
    """The trees of an XGBoost JSON model; [] for anything else."""
    try:
        trees = model["learner"]["gradient_booster"]["model"]["trees"]
    except (KeyError, TypeError):
        return []
    return trees if isinstance(trees, list) and all(isinstance(t, dict) for t in trees) else []


def xgboost_conditions(model: object) -> dict[int, set[float]]:
    """Each feature's split conditions: XGBoost's ``hist`` splits at its own cut points, which
    for fewer distinct values than ``max_bin`` are the node's values themselves."""
    found: dict[int, set[float]] = {}
    for tree in xgboost_trees(model):
        try:
            left = np.asarray(tree["left_children"], np.int64)
            index = np.asarray(tree["split_indices"], np.int64)
            condition = np.asarray(tree["split_conditions"], np.float64).astype(F32)
        except (KeyError, TypeError, ValueError):
            continue
        if not len(left) == len(index) == len(condition):
            continue
        for f, c in zip(index[left >= 0], condition[left >= 0]):
            found.setdefault(int(f), set()).add(float(c))
    return found


def xgboost_single_row_leaves(model: object, hessian: float) -> int:
    """Leaves holding one row, when every row's hessian is ``hessian`` (squared error always;
    a classification's first iteration): their ``sum_hessian`` counts the rows."""
    single = 0
    for tree in xgboost_trees(model):
        try:
            left = np.asarray(tree["left_children"], np.int64)
            rows = np.asarray(tree["sum_hessian"], np.float64) / hessian
        except (KeyError, TypeError, ValueError):
            continue
        if len(left) == len(rows):
            single += int(np.sum((left < 0) & (np.abs(rows - 1) < INTEGRAL)))
    return single


# -- FFGB's trees with Newton leaves ----------------------------------------------------------
def newton_rows(
    children_left: np.ndarray, children_right: np.ndarray, value: np.ndarray, p0: float, rows: int
) -> np.ndarray:
    """Rows of every node of a softmax tree fitted where every row's probabilities are ``p0``
    (FFGB's first learner of round 1, f = 0), from its Newton values (n p0 - n_k) / (n h + 1),
    h = p0 (1 - p0): for each leaf the whole n that make every n_k whole in [0, n] (several n
    give the same values), kept only where the leaves add up to the node's ``rows`` at the
    root; 0 where more than one n is left, or none."""
    value = np.asarray(value, np.float64)
    left, right = np.asarray(children_left), np.asarray(children_right)
    if value.ndim != 2 or len(value) != len(left) or len(right) != len(left) or rows < 1:
        return np.zeros(0, np.int64)
    order = _preorder(left, right)
    if order is None:
        return np.zeros(0, np.int64)
    n = np.arange(rows + 1, dtype=np.float64)[:, None, None]
    per_class = n * p0 - value[None] * (n * p0 * (1 - p0) + 1)
    whole = np.abs(per_class - np.round(per_class)) < INTEGRAL
    inside = (per_class > -INTEGRAL) & (per_class < n + INTEGRAL)
    fits = np.all(whole & inside, axis=2).T  # (nodes, rows + 1): node i may hold n rows
    fits[left >= 0] = True  # only leaves' values travel (``functions.forest``)
    fits[:, 0] = False
    fits[0] = np.arange(rows + 1) == rows
    inner = [i for i in order if left[i] >= 0]
    changed = True
    while changed:
        before = fits.copy()
        for i in inner:
            _add_up(fits, i, int(left[i]), int(right[i]))
        changed = not np.array_equal(before, fits)
    counts = np.argmax(fits, axis=1)
    return np.where(fits.sum(axis=1) == 1, counts, 0)


def _add_up(fits: np.ndarray, parent: int, a: int, b: int) -> None:
    """Keep, in place, only the row counts of a parent and its two children that add up."""
    size = fits.shape[1]
    total = np.add.outer(np.arange(size), np.arange(size))  # (n_a, n_b) -> n_a + n_b
    joint = fits[a][:, None] & fits[b][None, :] & (total < size)
    joint &= fits[parent][np.minimum(total, size - 1)]
    fits[a] = joint.any(axis=1)
    fits[b] = joint.any(axis=0)
    fits[parent] = np.bincount(total[joint], minlength=size)[:size] > 0


def single_row_tree_leaves(
    children_left: np.ndarray, children_right: np.ndarray, value: np.ndarray, p0: float, rows: int
) -> int:
    """Leaves of a Newton-valued softmax tree (``newton_rows``) that hold one row."""
    counts = newton_rows(children_left, children_right, value, p0, rows)
    if len(counts) != len(children_left):
        return 0
    return int(np.sum((np.asarray(children_left) == LEAF) & (counts == 1)))


# -- FedFun's KDDTs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class KddtSplit:
    """A KDDT split on ``feature``: a breakpoint of a smoothed row's box, so that row's value
    (cube coordinates) is ``right`` (its box starts there, it lies right) or ``left`` (its box
    ends there); with the class every leaf on that side holds, when they all hold one."""

    feature: int
    right: float
    left: float
    right_label: float | None
    left_label: float | None


KDDT_FIELDS = ("children_left", "children_right", "feature", "threshold", "value")


def kddt_arrays(arrays: Arrays, prefix: str) -> tuple[np.ndarray, ...] | None:
    """The KDDT under ``prefix`` in a reply's arrays (``functions.kddt``), its ``KDDT_FIELDS``
    in order; None for any other record (a sealed model, ``relay-encryption``, has no arrays)."""
    try:
        fields = tuple(np.asarray(arrays[prefix + name]) for name in KDDT_FIELDS)
    except KeyError:
        return None
    if any(a.ndim == 0 or len(a) != len(fields[0]) for a in fields) or fields[-1].ndim != 2:
        return None
    return fields


def kddt_splits(
    arrays: Arrays, prefix: str, radius: float, classification: bool
) -> list[KddtSplit]:
    """The splits of the KDDT under ``prefix`` in a reply's arrays (``kddt_arrays``), each
    read as ``KddtSplit``; [] for any other record. ``radius``: the box kernel's, in cube units
    (``UnitCube.radius``)."""
    tree = kddt_arrays(arrays, prefix)
    if tree is None:
        return []
    left, right, feature, threshold, value = tree
    n = len(left)
    pure = _pure_subtrees(left, right, value) if classification else np.full(n, np.nan)
    splits = []
    for i in np.flatnonzero(left >= 0):
        t = float(threshold[i])
        labels = [None if np.isnan(pure[c]) else float(pure[c]) for c in (right[i], left[i])]
        splits.append(
            KddtSplit(int(feature[i]), float(F32(t + radius)), float(F32(t - radius)), *labels)
        )
    return splits


def _pure_subtrees(left: np.ndarray, right: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Per node, the class whose one-hot vector every leaf below it holds (NaN: none). A leaf's
    value is the mass-weighted mean of the one-hot labels (and of other leaves' values) it
    overlaps, so it is one-hot only if every row overlapping it has that class."""
    n = len(left)
    hot = np.argmax(value, axis=1)
    one_hot = np.all(np.abs(value - np.eye(value.shape[1])[hot]) < ONE_HOT, axis=1)
    pure = np.where(one_hot, hot, -1).astype(np.float64)
    order = _preorder(left, right)
    if order is None:
        return np.full(n, np.nan)
    for node in reversed(order):  # children before their parents
        if left[node] >= 0:
            a, b = pure[left[node]], pure[right[node]]
            pure[node] = a if a == b else -1
    return np.where(pure < 0, np.nan, pure)


def _preorder(left: np.ndarray, right: np.ndarray) -> list[int] | None:
    """Nodes reachable from the root, parents first; None when the arrays are not a tree."""
    order, stack, n = [], [0], len(left)
    while stack:
        node = stack.pop()
        if not 0 <= node < n or len(order) > n:
            return None
        order.append(node)
        if left[node] >= 0:
            stack += [int(right[node]), int(left[node])]
    return order


# -- facts: the schema agreement's and FedFun's bounds ----------------------------------------
def facts_values(facts: object) -> dict[str, list[float]]:
    """The values a site's ``query.facts`` reply states that could be a row's
    (``tasks.site_facts.site_facts``), claimed as such: each numeric column's range ends, and
    its magnitude when the column has an odd number of present values and one sign (an exact
    median |value| would be a row's); {} for anything else."""
    try:
        ranges, scales = facts["ranges"], facts["scales"]
        rows, missing = int(facts["rows"]), facts["missing"]
        found = {}
        for name, bounds in ranges.items():
            if bounds is None:
                continue
            low, high = float(bounds[0]), float(bounds[1])
            values = sorted({low, high})
            median, present = scales.get(name), rows - int(missing[name])
            if median is not None and present % 2 == 1 and (low >= 0 or high <= 0):
                values.append(float(median) if low >= 0 else -float(median))
            found[name] = values
        return found
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return {}


def bounds_values(arrays: Arrays) -> list[tuple[float, float]]:
    """Each feature's range ends as a ``query.bounds`` reply states them (``lower``, ``upper``:
    the node's range widened to powers of two, FedFun's agreed box their union), claimed as row
    values; [] for any other record."""
    if set(arrays) != {"lower", "upper"}:
        return []
    lower, upper = np.asarray(arrays["lower"]), np.asarray(arrays["upper"])
    if lower.shape != upper.shape or lower.ndim != 1 or lower.dtype.kind != "f":
        return []
    return list(zip(lower.astype(F32).tolist(), upper.astype(F32).tolist()))


def first_trees(config: Mapping[str, object], arrays: Arrays) -> list:
    """The learners of an FFGB ``delta`` reply (``functions.ensembles``) that the server can
    read, as it decodes them; [] when it does not decode. A sealed learner (``relay-encryption``)
    is ciphertext: none."""
    try:
        learners = unpack_delta(config, arrays).learners
    except (DecodeError, TypeError, ValueError):
        return []
    return [h for h in learners if not isinstance(h, SealedLearner)]


# -- a network's vector -----------------------------------------------------------------------
def plain_vector(arrays: Arrays) -> bool:
    """Whether a reply's record, under the name its family sends a node's vector by (a model's
    weights, FedFW's encoded extreme points, FedDR's x_hat_i), holds that vector in the clear:
    at least one array, every one of numbers and none empty. Gradient inversion
    (``benchmarks.privacy_dlg``) starts from it. Sent into a secure sum, the vector travels
    masked under the sum's own record, and the family's record is absent."""
    values = [np.asarray(a) for a in arrays.values()]
    return bool(values) and all(a.dtype.kind in "biuf" and a.size > 0 for a in values)
