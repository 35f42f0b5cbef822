"""FFGB's histogram tree fitter: XGBoost's tree shape, exact leaf means, the project's codec."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("xgboost")
import xgboost as xgb

from functions.trees import TreeSpec, decode_tree, encode_tree
from oracles import weak_learning
from oracles.hist_trees import HistTreeFitter
from oracles.weak_learning import (
    CART,
    HIST,
    HIST_FROM_ROWS,
    boosting_oracle,
    fit_tree,
    tree_fitter_for,
)


def points(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Gaussian features, the first one rounded so that many rows tie on a split value."""
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    x[:, 0] = np.round(x[:, 0])
    return x


def smooth_target(x: np.ndarray, outputs: int, seed: int = 1) -> np.ndarray:
    noise = np.random.default_rng(seed).normal(scale=0.1, size=(len(x), outputs))
    return np.tanh(2 * x[:, :outputs]) + noise


@pytest.mark.parametrize(("n", "d", "outputs", "depth"), [(300, 4, 3, 3), (1500, 12, 1, 5)])
def test_the_tree_predicts_as_xgboost_does_with_exact_leaf_means(n, d, outputs, depth):
    x = points(n, d)
    target = smooth_target(x, outputs)
    fitter = HistTreeFitter(x, depth)
    fitted = fitter.fit(target)
    tree = fitted.learner
    assert tree.depth <= depth and tree.n_outputs == outputs
    booster = xgb.train(fitter.params, fitter.matrix, num_boost_round=1)
    theirs = booster.predict(xgb.DMatrix(x)).reshape(n, outputs)
    assert np.allclose(fitted.values, theirs, rtol=0, atol=1e-6)  # same shape, same routing
    leaf = tree.apply(x)
    for node in np.unique(leaf):
        mean = target[leaf == node].mean(axis=0)
        assert np.array_equal(tree.value[node], mean.astype(np.float32))


def test_the_fit_is_as_good_as_cart_and_travels_in_the_project_codec():
    x = points(4000, 10)
    target = smooth_target(x, 2)
    hist = HistTreeFitter(x, 4).fit(target)
    cart = fit_tree(x, target, 4, 0)
    hist_error = ((hist.values - target) ** 2).mean()
    cart_error = ((cart.values - target) ** 2).mean()
    assert hist_error <= 1.02 * cart_error  # 256 bins of 4,000 points: within 2 %
    decoded = decode_tree(encode_tree(hist.learner), "", n_features=10, n_outputs=2, max_nodes=31)
    assert np.array_equal(decoded.predict(x), hist.learner.predict(x))


def test_the_binning_is_shared_by_a_round_s_fits():
    x = points(500, 5)
    fit = boosting_oracle(
        TreeSpec(5, 2), x, weak_learning.OracleSettings(), False, 3, lambda k: k, tree_fitter=HIST
    )
    first, second = fit(smooth_target(x, 2), 0), fit(-smooth_target(x, 2), 1)
    assert np.allclose(first.values, -second.values, atol=1e-6)  # same bins, mirrored target


def test_auto_picks_hist_from_the_measured_row_count_and_hist_needs_xgboost(monkeypatch):
    assert tree_fitter_for("auto", HIST_FROM_ROWS - 1) == CART
    assert tree_fitter_for("auto", HIST_FROM_ROWS) == HIST
    assert tree_fitter_for(CART, 10 * HIST_FROM_ROWS) == CART
    monkeypatch.setattr(weak_learning, "available", lambda: False)
    assert tree_fitter_for("auto", 10 * HIST_FROM_ROWS) == CART
    with pytest.raises(ImportError, match="ffgb.tree-fitter='hist' needs the xgboost"):
        tree_fitter_for(HIST, 10)
