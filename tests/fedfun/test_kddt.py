"""KDDTs (FedFun section 5.4): exact function-space inner products, the codec, and the fit."""

from itertools import pairwise

import numpy as np
import pytest

import oracles.kddt
from functions.errors import DecodeError
from functions.kddt import (
    KDDT,
    decode_kddt,
    encode_kddt,
    inner_product,
    norm_squared,
    squared_distance,
)
from functions.trees import TreeArrays
from oracles.kddt import Boxes, data_boxes, fit_kddt, smoothed_error, tree_boxes
from tests.helpers import tree_from_constant

UNIT2 = (np.zeros(2), np.ones(2))


def make_tree(nodes, lower, upper):
    """A KDDT from rows (left, right, feature, threshold, value) in node order."""
    left, right, feature, threshold, value = zip(*nodes)
    tree = TreeArrays(
        np.array(left, np.int32),
        np.array(right, np.int32),
        np.array(feature, np.int32),
        np.array(threshold, np.float64),
        np.array(value, np.float64),
        n_features=len(lower),
    )
    return KDDT(tree, np.array(lower, np.float64), np.array(upper, np.float64))


LEAF = (-1, -1, -2, -2.0)
# 1-D on [0, 1]: a = 1 on [0, .3], 2 after; b = 3 on [0, .6], -1 after.
A1 = make_tree([(1, 2, 0, 0.3, [0.0]), (*LEAF, [1.0]), (*LEAF, [2.0])], [0.0], [1.0])
B1 = make_tree([(1, 2, 0, 0.6, [0.0]), (*LEAF, [3.0]), (*LEAF, [-1.0])], [0.0], [1.0])
# 2-D on [0, 2] x [0, 1]: a = (1, 0) for x0 <= 1, else (0, 1) for x1 <= .5, else (1, 1);
# b = (2, 0) for x1 <= .25, else (0, 3).
A2 = make_tree(
    [
        (1, 2, 0, 1.0, [0, 0]),
        (*LEAF, [1, 0]),
        (3, 4, 1, 0.5, [0, 0]),
        (*LEAF, [0, 1]),
        (*LEAF, [1, 1]),
    ],
    [0.0, 0.0],
    [2.0, 1.0],
)
B2 = make_tree([(1, 2, 1, 0.25, [0, 0]), (*LEAF, [2, 0]), (*LEAF, [0, 3])], [0.0, 0.0], [2.0, 1.0])
# 1-D with a threshold outside its node's box: the leaf (0.5, 0.7] inside [0, 0.5] is empty.
EMPTY_LEAF = make_tree(
    [(1, 2, 0, 0.5, [0.0]), (3, 4, 0, 0.7, [0.0]), (*LEAF, [4.0]), (*LEAF, [1.0]), (*LEAF, [9.0])],
    [0.0],
    [1.0],
)


def blobs(rng, n, p, q):
    """Points in the unit cube, one-hot labels from a random linear rule."""
    x = rng.uniform(0.1, 0.9, size=(n, p))
    y = np.eye(q)[np.argmax((x - 0.5) @ rng.normal(size=(p, q)), axis=1)]
    return x, y


# -- inner products ---------------------------------------------------------------------------
def test_inner_product_by_hand():
    assert inner_product(A1, B1) == pytest.approx(0.3 * 3 + 0.3 * 2 * 3 - 0.4 * 2)
    assert inner_product(A2, B2) == pytest.approx(0.25 * 2 + 0.25 * 3 + 0.5 * 3)
    assert inner_product(B2, A2) == pytest.approx(inner_product(A2, B2))
    assert norm_squared(A2) == pytest.approx(1 * 1 + 0.5 * 1 + 0.5 * 2)
    assert inner_product(A2, A2) == pytest.approx(norm_squared(A2))
    assert norm_squared(B2) == pytest.approx(0.5 * 4 + 1.5 * 9)
    assert inner_product(EMPTY_LEAF, A1) == pytest.approx(0.3 * 1 + 0.2 * 2 + 0.5 * 4 * 2)


def test_squared_distance():
    for a, b in ((A1, B1), (A2, B2), (EMPTY_LEAF, B1)):
        assert squared_distance(a, a) == 0.0
        expected = norm_squared(a) + norm_squared(b) - 2 * inner_product(a, b)
        assert squared_distance(a, b) == pytest.approx(expected)
        assert squared_distance(b, a) == pytest.approx(expected)


def test_inner_product_needs_same_domain():
    other = make_tree([(*LEAF, [1.0])], [0.0], [2.0])
    with pytest.raises(ValueError, match="domain"):
        inner_product(A1, other)


@pytest.mark.parametrize("p", [2, 3])
def test_inner_product_matches_monte_carlo(p):
    rng = np.random.default_rng(p)
    lower, upper = np.full(p, -0.5), np.full(p, 1.5)
    trees = []
    for _ in range(2):
        x, y = blobs(rng, 150, p, 3)
        trees.append(fit_kddt(data_boxes(x * 2 - 0.5, y, 0.2), lower, upper, 25))
    a, b = trees
    z = rng.uniform(lower, upper, size=(200_000, p))
    volume = 2.0**p
    for f, g in ((a, b), (a, a)):
        products = volume * np.einsum("nq,nq->n", f.predict(z), g.predict(z))
        error = 5 * products.std() / np.sqrt(len(z))
        assert abs(inner_product(f, g) - products.mean()) < error
    assert squared_distance(a, b) == pytest.approx(
        norm_squared(a) + norm_squared(b) - 2 * inner_product(a, b)
    )


def test_leaf_boxes_partition_the_domain():
    rng = np.random.default_rng(0)
    x, y = blobs(rng, 200, 3, 2)
    fitted = fit_kddt(data_boxes(x, y, 0.1), np.zeros(3), np.ones(3), 30)
    for tree in (A1, A2, B2, EMPTY_LEAF, fitted):
        lower, upper, values = tree.leaf_boxes()
        assert len(values) == tree.n_leaves
        assert np.all(lower <= upper)
        assert np.prod(upper - lower, axis=1).sum() == pytest.approx(tree.volume())
        z = rng.uniform(tree.lower, tree.upper, size=(1000, tree.n_features))
        leaf = np.searchsorted(np.flatnonzero(tree.is_leaf), tree.apply(z))
        assert np.all((lower[leaf] <= z) & (z <= upper[leaf]))
        np.testing.assert_array_equal(tree.predict(z), values[leaf])


# -- fitting ----------------------------------------------------------------------------------
def test_fit_reduces_error_and_is_deterministic():
    rng = np.random.default_rng(1)
    x, y = blobs(rng, 300, 2, 3)
    items = data_boxes(x, y, 0.1)
    errors = [smoothed_error(fit_kddt(items, *UNIT2, n), items) for n in (1, 2, 5, 10, 40)]
    mean = y.mean(axis=0)
    constant = tree_from_constant(*UNIT2, mean)
    assert errors[0] == pytest.approx(smoothed_error(constant, items))
    assert errors[1] < errors[0]
    assert all(later <= earlier * (1 + 1e-12) for earlier, later in pairwise(errors))
    assert errors[-1] < 0.5 * errors[0]
    first, second = (fit_kddt(items, *UNIT2, 40) for _ in range(2))
    for name in ("children_left", "children_right", "feature", "threshold", "value"):
        np.testing.assert_array_equal(getattr(first.tree, name), getattr(second.tree, name))


def test_split_search_in_feature_blocks_gives_the_same_tree(monkeypatch):
    rng = np.random.default_rng(5)
    x, y = blobs(rng, 100, 5, 3)
    items = data_boxes(x, y, 0.1)
    whole = fit_kddt(items, np.zeros(5), np.ones(5), 12)
    monkeypatch.setattr(oracles.kddt, "_BLOCK_FLOATS", 1)  # one feature at a time
    blocked = fit_kddt(items, np.zeros(5), np.ones(5), 12)
    for name in ("children_left", "children_right", "feature", "threshold", "value"):
        np.testing.assert_array_equal(getattr(whole.tree, name), getattr(blocked.tree, name))


def test_single_leaf_value_is_mass_weighted_mean():
    # Two items, one half outside the domain: only its inside half (mass 0.5 * 2) counts.
    items = Boxes(
        np.array([[0.2], [-0.5]]),
        np.array([[0.4], [0.5]]),
        np.array([1.0, 2.0]),
        np.array([[1.0, 0.0], [0.0, 1.0]]),
    )
    tree = fit_kddt(items, np.zeros(1), np.ones(1), 1)
    np.testing.assert_allclose(tree.tree.value[0], [0.5, 0.5])
    assert smoothed_error(tree, items) == pytest.approx(1 * 0.5 + 1 * 0.5)


def test_fit_without_mass_is_zero():
    outside = data_boxes(np.full((3, 2), 5.0), np.ones((3, 2)), 0.5)  # all outside the domain
    for items in (outside, Boxes(np.zeros((0, 2)), np.ones((0, 2)), np.zeros(0), np.zeros((0, 2)))):
        tree = fit_kddt(items, *UNIT2, 10)
        assert tree.n_leaves == 1
        np.testing.assert_array_equal(tree.tree.value, [[0.0, 0.0]])
        assert smoothed_error(tree, items) == 0.0


def test_split_is_optimal_in_one_dimension():
    rng = np.random.default_rng(2)
    x = rng.uniform(0.1, 0.9, size=(40, 1))
    y = (x[:, :1] > 0.55) + 0.3 * rng.normal(size=(40, 1))
    extra = Boxes(
        np.array([[0.0], [0.3]]),
        np.array([[0.5], [0.8]]),
        np.array([3.0, 2.0]),
        np.array([[1.0], [-0.5]]),
    )
    items = Boxes.concat(data_boxes(x, y, 0.07), extra)
    tree = fit_kddt(items, np.zeros(1), np.ones(1), 2)
    assert tree.n_leaves == 2

    def error(t):  # independent: masses left of t by clipping, optimal leaf values
        lo, hi = np.clip(items.lower[:, 0], 0, 1), np.clip(items.upper[:, 0], 0, 1)
        density = items.mass / (items.upper[:, 0] - items.lower[:, 0])
        w_left = density * np.clip(np.minimum(hi, t) - lo, 0, None)
        w_right = density * (hi - lo) - w_left
        label = items.label[:, 0]
        return (
            np.sum((w_left + w_right) * label**2)
            - (w_left @ label) ** 2 / w_left.sum()
            - (w_right @ label) ** 2 / w_right.sum()
        )

    chosen = smoothed_error(tree, items)
    assert chosen == pytest.approx(error(tree.tree.threshold[0]), rel=1e-12)
    assert chosen <= min(error(t) for t in np.linspace(0.001, 0.8, 2001)) * (1 + 1e-12)


def test_regularisation_pulls_trees_together():
    rng = np.random.default_rng(3)
    (xa, ya), (xb, yb) = blobs(rng, 200, 2, 2), blobs(rng, 200, 2, 2)
    data_a, data_b = data_boxes(xa, ya, 0.1), data_boxes(xb, yb, 0.1)
    a, b = fit_kddt(data_a, *UNIT2, 20), fit_kddt(data_b, *UNIT2, 20)
    before = squared_distance(a, b)
    assert before > 0

    def refit(data, other, weight):
        return fit_kddt(Boxes.concat(data, tree_boxes(other, weight)), *UNIT2, 20)

    # Tree density about the data's: each tree moves half-way, so they end up much closer.
    a2, b2 = refit(data_a, b, 200.0), refit(data_b, a, 200.0)
    assert squared_distance(a2, b2) < 0.5 * before
    assert squared_distance(a2, b) < before and squared_distance(b2, a) < before
    # A much heavier neighbour: the refit is nearly the neighbour itself.
    assert squared_distance(refit(data_a, b, 1e4), b) < 0.01 * before


def test_input_checks():
    with pytest.raises(ValueError, match="radius"):
        data_boxes(np.zeros((2, 1)), np.zeros((2, 1)), 0.0)
    with pytest.raises(ValueError, match="lower < upper"):
        make_tree([(*LEAF, [1.0])], [1.0], [1.0])
    with pytest.raises(ValueError, match="float64"):
        KDDT(A1.tree, np.zeros(1, np.float32), np.ones(1))
    assert tree_boxes(A1, 0.0).mass.sum() == 0.0
    assert len(tree_boxes(EMPTY_LEAF, 1.0).mass) == 2  # the empty leaf is left out


# -- codec ------------------------------------------------------------------------------------
def test_codec_round_trip():
    rng = np.random.default_rng(4)
    x, y = blobs(rng, 100, 3, 4)
    tree = fit_kddt(data_boxes(x, y, 0.1), np.zeros(3), np.ones(3), 15)
    arrays = encode_kddt(tree, "t/")
    assert set(arrays) == {
        "t/" + k
        for k in (
            "children_left",
            "children_right",
            "feature",
            "threshold",
            "value",
            "lower",
            "upper",
        )
    }
    back = decode_kddt(arrays, "t/", 3, 4, max_nodes=100)
    for name in ("children_left", "children_right", "feature", "threshold", "value"):
        np.testing.assert_array_equal(getattr(back.tree, name), getattr(tree.tree, name))
    np.testing.assert_array_equal(back.lower, tree.lower)
    np.testing.assert_array_equal(back.upper, tree.upper)
    assert squared_distance(back, tree) == 0.0


def _changed(key, value):
    arrays = encode_kddt(A2)
    if value is None:
        del arrays[key]
    else:
        arrays[key] = value
    return arrays


@pytest.mark.parametrize(
    "arrays, n_outputs, max_nodes",
    [
        (_changed("lower", None), 2, 10),  # missing key
        ({**encode_kddt(A2), "extra": np.zeros(1)}, 2, 10),  # unknown key
        (_changed("lower", np.array([np.nan, 0.0])), 2, 10),
        (_changed("upper", np.array([2.0, np.inf])), 2, 10),
        (_changed("upper", np.array([2.0, 0.0])), 2, 10),  # lower >= upper
        (_changed("lower", np.zeros(3)), 2, 10),  # wrong shape
        (_changed("lower", np.zeros(2, np.float32)), 2, 10),  # wrong dtype
        (_changed("threshold", A2.tree.threshold.astype(np.float32)), 2, 10),
        (_changed("feature", A2.tree.feature.astype(np.int64)), 2, 10),
        (_changed("value", np.full((5, 2), np.nan)), 2, 10),
        (_changed("children_left", np.array([1, -1, 0, -1, -1], np.int32)), 2, 10),  # cycle
        (_changed("children_right", np.array([7, -1, 4, -1, -1], np.int32)), 2, 10),  # bad child
        (encode_kddt(A2), 2, 4),  # too many nodes
        (encode_kddt(A2), 3, 10),  # wrong n_outputs
        ([1, 2], 2, 10),  # not a mapping
    ],
)
def test_codec_rejects_malformed(arrays, n_outputs, max_nodes):
    with pytest.raises(DecodeError):
        decode_kddt(arrays, "", 2, n_outputs, max_nodes)
