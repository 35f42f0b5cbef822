"""Tree node values from the rows that reach them: least-squares means and Newton values, and
FFGB's step with Newton leaves and the constant schedule, and what `auto` picks for them."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

from functions.trees import from_sklearn
from oracles.boosting import CONSTANT, DESCENT, StepSizes, ffgb_increment, round_coefficients
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from oracles.tree_leaves import NEWTON_L2, mean_values, newton_values
from oracles.weak_learning import fit_tree, newton_leaf_step
from run_config.common import RunSettings
from run_config.ffgb import ffgb_settings
from testing.inprocess_grid import run_config

RNG = np.random.default_rng(3)
X = RNG.normal(size=(400, 5)).astype(np.float32)
LABELS = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1)


def test_mean_values_are_cart_s_node_values():
    target = RNG.normal(size=(len(X), 3))
    sk = from_sklearn(
        DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, target), value_dtype=np.float32
    )
    assert np.array_equal(mean_values(sk, X, target).value, sk.value)


def test_newton_values_are_gradient_sums_over_hessian_sums_plus_l2():
    loss = PointwiseLoss(CROSS_ENTROPY, 3)
    f = RNG.normal(size=(len(X), 3))
    gradient, hessian = loss.gradient(f, LABELS), loss.hessian_diagonal(f)
    tree = fit_tree(X, gradient, 3, 0).learner
    newton = newton_values(tree, X, gradient, hessian)
    leaf = tree.apply(X)
    for node in np.unique(leaf):
        rows = leaf == node
        expected = gradient[rows].sum(0) / (hessian[rows].sum(0) + NEWTON_L2)
        assert np.array_equal(newton.value[node], expected.astype(np.float32))
    square = newton_values(tree, X, gradient, PointwiseLoss(SQUARE, 0).hessian_diagonal(f))
    counts = np.bincount(leaf, minlength=tree.n_nodes)[:, None]
    mean = mean_values(tree, X, gradient).value.astype(np.float64)
    assert np.allclose(
        square.value[np.unique(leaf)],
        (mean * counts / (counts + NEWTON_L2))[np.unique(leaf)],
        atol=1e-6,
    )


def test_ffgb_steps_with_newton_leaves_and_keeps_the_least_squares_residual():
    loss = PointwiseLoss(CROSS_ENTROPY, 3)
    etas = StepSizes(CONSTANT, 2, eta0=0.3).etas(7)
    assert etas == [0.3, 0.3]
    fits = []

    def fit(target, k):
        fits.append((target, fit_tree(X, target, 3, k)))
        return fits[-1][1]

    increment = ffgb_increment(
        np.zeros((len(X), 3)), LABELS, loss, etas, 0.0, fit, leaf_step=newton_leaf_step(X, loss)
    )
    first_target, first = fits[0]
    newton = newton_leaf_step(X, loss)(first, first_target, np.zeros((len(X), 3)))
    assert np.array_equal(increment.learners[0].value, newton.learner.value)
    g = -0.3 * newton.values  # g_2 from g_1 = 0
    second_target = fits[1][0]
    residual = first_target - first.values  # the least-squares fit's error, not Newton's
    assert np.allclose(second_target, residual + loss.gradient(g, LABELS))
    assert increment.weights == round_coefficients(etas, 0.0, DESCENT)[1] == [-0.3, -0.3]


def test_newton_leaves_lower_the_training_loss_faster_than_means_at_a_small_step():
    """The point of the option: at XGBoost's shrinkage 0.3, 10 steps of depth-2 trees reach a
    lower cross-entropy with Newton leaves than with the least-squares means."""
    loss = PointwiseLoss(CROSS_ENTROPY, 3)
    etas = StepSizes(CONSTANT, 10, eta0=0.3).etas(0)

    def final_loss(leaf_step):
        def fit(target, k):
            return fit_tree(X, target, 2, k)

        step = ffgb_increment(
            np.zeros((len(X), 3)), LABELS, loss, etas, 0.0, fit, leaf_step=leaf_step
        )
        return loss.values(step.own_values, LABELS).mean()

    assert final_loss(newton_leaf_step(X, loss)) < 0.9 * final_loss(None)


@pytest.mark.parametrize("t", [0, 3, 50])
def test_the_constant_schedule_steps_eta0_every_round(t):
    assert StepSizes(CONSTANT, 4, eta0=0.1).etas(t) == [0.1] * 4


@pytest.mark.parametrize(
    ("overrides", "leaves", "schedule", "eta0"),
    [
        ({"ffgb.learner": "tree"}, "newton", "constant", 0.3),  # auto: measured best for trees
        ({"ffgb.learner": "tree", "algorithm": "ffgb-c"}, "mean", "experiment", 10.0),
        ({}, "mean", "experiment", 10.0),  # networks: the paper's
        ({"ffgb.learner": "tree", "ffgb.tree-leaves": "mean"}, "mean", "experiment", 10.0),
        ({"ffgb.learner": "tree", "ffgb.schedule": "experiment"}, "newton", "experiment", 10.0),
        ({"ffgb.learner": "tree", "ffgb.eta0": 0.5}, "newton", "constant", 0.5),
    ],
)
def test_auto_leaves_and_schedule_resolve_as_documented(overrides, leaves, schedule, eta0):
    settings = ffgb_settings(RunSettings.from_run_config(run_config(**overrides)))
    assert (settings.tree_leaves, settings.steps.kind, settings.steps.eta0) == (
        leaves,
        schedule,
        eta0,
    )
