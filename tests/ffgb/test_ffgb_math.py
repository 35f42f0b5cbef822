"""FFGB's maths without Flower: client procedures, step sizes, oracles, Lipschitz extension."""

from __future__ import annotations

import numpy as np
import pytest

from functions.networks import NetworkSpec
from oracles import weak_learning
from oracles.boosting import (
    AVERAGE,
    DESCENT,
    EXPERIMENT,
    THEOREM,
    Clipping,
    Fitted,
    StepSizes,
    ffgb_increment,
    ffgb_l_increment,
    round_coefficients,
)
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from oracles.lipschitz import KINDS, MIDPOINT, UPPER, LipschitzExtension, data_lipschitz_constant
from oracles.weak_learning import (
    OracleSettings,
    boosting_oracle,
    clip_learner,
    fit_least_squares,
    fit_sobolev,
    fit_sup_norm,
    fit_tree,
    input_jacobian,
    lipschitz_oracle,
)

RNG = np.random.default_rng(0)
N_POINTS, N_FEATURES, N_CLASSES = 60, 5, 3
X = RNG.normal(size=(N_POINTS, N_FEATURES)).astype(np.float32)
CE = PointwiseLoss(CROSS_ENTROPY, N_CLASSES)


class Lookup:
    """An interpolating learner (gamma = 1): returns its target at the points it was fitted on."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.array(values)

    def predict(self, x: np.ndarray) -> np.ndarray:
        assert len(x) == len(self.values)
        return self.values


def interpolate(target: np.ndarray, k: int) -> Fitted:
    return Fitted(Lookup(target), np.array(target))


def test_step_sizes_follow_the_experiments_and_the_theorems():
    experiment = StepSizes(EXPERIMENT, local_steps=3, eta0=10.0)
    assert experiment.etas(0) == [10 / 2, 10 / 3, 10 / 4]
    assert experiment.eta(t=2, k=1) == 10 / (3 * 2 + 1 + 1)
    theorem = StepSizes(THEOREM, local_steps=2, mu=0.5, constant=4.0)
    assert theorem.eta(t=1, k=2) == 4 / (0.5 * (2 + 2 + 1))
    with pytest.raises(ValueError):
        StepSizes(THEOREM, local_steps=2, mu=0.0)


@pytest.mark.parametrize("form,mu", [(DESCENT, 0.0), (DESCENT, 0.3), (AVERAGE, 0.0)])
def test_round_coefficients_unroll_the_local_recursion(form, mu):
    etas = [0.5, 0.25, 0.2, 0.1]
    g0, steps = RNG.normal(size=(7, 2)), [RNG.normal(size=(7, 2)) for _ in etas]
    g = g0.copy()
    for eta, v in zip(etas, steps):
        g = (1 - eta * mu) * g - eta * v if form == DESCENT else (1 - eta) * g + eta * v
    scale, weights = round_coefficients(etas, mu, form)
    assert np.allclose(g, scale * g0 + sum(w * v for w, v in zip(weights, steps)), rtol=1e-12)


def _labels_per_client(n_clients: int) -> list[np.ndarray]:
    """Semi-heterogeneous data: the same points, different labels on every client."""
    return [RNG.integers(0, N_CLASSES, N_POINTS) for _ in range(n_clients)]


@pytest.mark.parametrize("local_steps", [1, 3])
def test_ffgb_with_an_interpolating_oracle_is_functional_gradient_descent(local_steps):
    """gamma = 1, same points on every client: FFGB is (local) functional gradient descent on
    the points, with FedAvg-style averaging; with K = 1 it is exactly FGD on the global risk."""
    labels, mu, t_rounds = _labels_per_client(3), 0.1, 5
    schedule = StepSizes(EXPERIMENT, local_steps, eta0=2.0)
    f = np.zeros((N_POINTS, N_CLASSES))
    reference = f.copy()
    for t in range(t_rounds):
        outs = [ffgb_increment(f, y, CE, schedule.etas(t), mu, interpolate) for y in labels]
        f = np.mean([o.scale * f + o.own_values for o in outs], axis=0)
        locals_ = []
        for y in labels:
            g = reference.copy()
            for eta in schedule.etas(t):
                g = g - eta * (CE.gradient(g, y) + mu * g)
            locals_.append(g)
        reference = np.mean(locals_, axis=0)
    assert np.allclose(f, reference, rtol=1e-10, atol=1e-12)
    assert all(o.oracle_error == 0.0 for o in outs)


def test_k1_ffgb_with_an_interpolating_oracle_descends_the_global_risk():
    labels, eta = _labels_per_client(4), 0.5
    f = np.zeros((N_POINTS, N_CLASSES))
    risk = [np.mean([CE.values(f, y).mean() for y in labels])]
    for t in range(10):
        outs = [ffgb_increment(f, y, CE, [eta], 0.0, interpolate) for y in labels]
        expected = f - eta * np.mean([CE.gradient(f, y) for y in labels], axis=0)
        f = np.mean([o.scale * f + o.own_values for o in outs], axis=0)
        assert np.allclose(f, expected, rtol=1e-12)
        risk.append(np.mean([CE.values(f, y).mean() for y in labels]))
    assert all(b < a for a, b in zip(risk, risk[1:]))


class Recorder:
    """Wraps an oracle and keeps the targets it was asked to fit."""

    def __init__(self, fit) -> None:
        self.fit, self.targets, self.learners = fit, [], []

    def __call__(self, target: np.ndarray, k: int) -> Fitted:
        self.targets.append(np.array(target))
        fitted = self.fit(target, k)
        self.learners.append(fitted.learner)
        return fitted


def test_the_residual_is_aligned_with_the_points_for_k_2_and_more():
    """Regression test for the authors' bug (their oracle shuffled the data and returned the
    residual in the shuffled order): with a real minibatch oracle, every target is the gradient
    at g_k plus the residual computed from the learner's predictions at the same points."""
    y = RNG.integers(0, N_CLASSES, N_POINTS)
    spec = NetworkSpec((N_FEATURES, 16, 16, N_CLASSES), "leaky_relu")
    settings = OracleSettings(steps=60, lr=0.01, batch_size=16)
    recorder = Recorder(boosting_oracle(spec, X, settings, False, 3, lambda k: k))
    etas = [1.0, 0.5, 0.3]
    increment = ffgb_increment(np.zeros((N_POINTS, N_CLASSES)), y, CE, etas, 0.0, recorder)
    g, residual = np.zeros((N_POINTS, N_CLASSES)), np.zeros((N_POINTS, N_CLASSES))
    for k, (eta, learner) in enumerate(zip(etas, recorder.learners)):
        expected = residual + CE.gradient(g, y)
        assert np.allclose(recorder.targets[k], expected, rtol=1e-12, atol=1e-12)
        h = learner.predict(X)
        residual, g = expected - h, g - eta * h
    _, weights = round_coefficients(etas, 0.0, DESCENT)
    own = sum(w * h.predict(X) for w, h in zip(weights, recorder.learners))
    assert np.allclose(increment.own_values, own, rtol=1e-12)


def test_residuals_reduce_the_accumulated_oracle_error():
    """A weak oracle that gets only half of its target (gamma = 0.5): without the residual the
    increment misses half of every gradient; with it the misses are fed back."""
    y = RNG.integers(0, N_CLASSES, N_POINTS)

    def half(target: np.ndarray, k: int) -> Fitted:
        return Fitted(Lookup(0.5 * target), 0.5 * target)

    etas = [0.1] * 8
    exact = ffgb_increment(np.zeros((N_POINTS, N_CLASSES)), y, CE, etas, 0.0, interpolate)
    errors = {}
    for residual in (True, False):
        out = ffgb_increment(np.zeros((N_POINTS, N_CLASSES)), y, CE, etas, 0.0, half, residual)
        errors[residual] = np.linalg.norm(out.own_values - exact.own_values)
    assert errors[True] < 0.5 * errors[False]


def test_ffgb_c_clips_the_learners_and_the_residual():
    y = RNG.integers(0, N_CLASSES, N_POINTS)
    clipping = Clipping(grad_bound=1.0, gamma=0.8)  # G1 = 0.25, G2 = 1.5

    def wild(target: np.ndarray, k: int) -> Fitted:
        values = 10.0 * target
        return Fitted(Lookup(values), values)

    seen = []

    def tracking(target: np.ndarray, k: int) -> Fitted:
        seen.append(np.array(target))
        return wild(target, k)

    def clip(learner, bound):
        return Lookup(np.clip(learner.values, -bound, bound))

    out = ffgb_increment(
        np.zeros((N_POINTS, N_CLASSES)), y, CE, [0.5, 0.5, 0.5], 0.0, tracking, True, clipping, clip
    )
    assert all(np.abs(h.values).max() <= clipping.learner_bound for h in out.learners)
    assert np.abs(out.learners[0].values).max() == pytest.approx(clipping.learner_bound)
    for target in seen[1:]:  # residual (clipped to G1) + gradient (bounded by 1)
        assert np.abs(target).max() <= clipping.residual_bound + 1.0 + 1e-12


def test_ffgb_l_with_an_exact_oracle_moves_the_function_to_the_data():
    """FFGB.L's oracle approximates u_i (here exactly): every round pulls f to u_i = y on the
    points; the sign of the oracle's argument is the corrected one (u_i - Delta)."""
    y = RNG.normal(size=(N_POINTS, 1))

    def exact(target: np.ndarray, multiple: float, previous: list) -> Fitted:
        return Fitted(Lookup(target), np.array(target))

    schedule = StepSizes(EXPERIMENT, 3, eta0=1.0)
    f = np.zeros_like(y)
    gaps = [np.abs(f - y).max()]
    for t in range(6):
        out = ffgb_l_increment(y, schedule.etas(t), exact)
        assert all(np.allclose(h.values, y) for h in out.learners)  # h_k = u_i every step
        f = out.scale * f + out.own_values
        gaps.append(np.abs(f - y).max())
    assert all(b < a for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 0.5 * gaps[0]


def test_ffgb_l_residual_corrects_a_biased_oracle():
    """An oracle that returns 80% of its target: with error feedback the learners average to
    u_i; without it they stay at 80%."""
    y = RNG.normal(size=(N_POINTS, 1))

    def biased(target: np.ndarray, multiple: float, previous: list) -> Fitted:
        return Fitted(Lookup(0.8 * target), 0.8 * target)

    etas = [0.1] * 10
    with_residual = ffgb_l_increment(y, etas, biased, residual=True)
    without = ffgb_l_increment(y, etas, biased, residual=False)
    mean = lambda out: np.mean([h.values for h in out.learners], axis=0)  # noqa: E731
    assert np.abs(mean(with_residual) - y).max() < 0.05 * np.abs(y).max()
    assert np.allclose(mean(without), 0.8 * y)


# -- oracles -------------------------------------------------------------------------------------


def _target() -> np.ndarray:
    w = RNG.normal(size=(N_FEATURES, N_CLASSES))
    return np.tanh(X.astype(np.float64) @ w)


def _rel_error(fitted: Fitted, target: np.ndarray, ord_=None) -> float:
    if ord_ == np.inf:
        return np.abs(fitted.values - target).max() / np.abs(target).max()
    return np.linalg.norm(fitted.values - target) / np.linalg.norm(target)


SPEC = NetworkSpec((N_FEATURES, 32, 32, N_CLASSES), "leaky_relu")
QUICK = OracleSettings(steps=300, lr=0.01, batch_size=32)


@pytest.mark.parametrize("fast", [True, False])
def test_wo2_satisfies_the_weak_learning_assumption(fast):
    target = _target()
    fitted = fit_least_squares(SPEC, X, target, QUICK, seed=1, fast=fast)
    assert _rel_error(fitted, target) < 0.5  # ||h - phi|| <= (1 - gamma) ||phi||, gamma > 0.5
    assert np.array_equal(fitted.values, fitted.learner.predict(X))


def test_the_fast_mlp_path_is_adam_on_the_least_squares_loss():
    target = _target()
    settings = OracleSettings(steps=40, lr=0.01, batch_size=16)
    fast = fit_least_squares(SPEC, X, target, settings, seed=2, fast=True)
    slow = fit_least_squares(SPEC, X, target, settings, seed=2, fast=False)
    assert np.allclose(fast.values, slow.values, rtol=1e-4, atol=1e-5)
    for a, b in zip(fast.learner.parameters(), slow.learner.parameters()):
        assert np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1.0, 8.0])
def test_the_fast_mlp_path_is_adam_on_the_smooth_sup_loss(p):
    target = _target()
    settings = OracleSettings(steps=40, lr=0.01, batch_size=16, sup_p=p)
    fast = fit_sup_norm(SPEC, X, target, settings, seed=2, fast=True)
    slow = fit_sup_norm(SPEC, X, target, settings, seed=2, fast=False)
    assert np.allclose(fast.values, slow.values, rtol=1e-4, atol=1e-5)
    for a, b in zip(fast.learner.parameters(), slow.learner.parameters()):
        assert np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_wo_infinity_reduces_the_sup_norm_error():
    target = _target()
    fitted = fit_sup_norm(SPEC, X, target, QUICK, seed=3)
    assert _rel_error(fitted, target, np.inf) < 0.6


def test_trees_fit_and_clipping_bounds_every_learner_kind():
    target = _target()
    fitted = fit_tree(X, target, depth=6, seed=0)
    assert _rel_error(fitted, target) < 0.5 and fitted.learner.value.dtype == np.float32
    for learner in (fitted.learner, fit_least_squares(SPEC, X, 5 * target, QUICK, 4).learner):
        clipped = clip_learner(learner, 0.3)
        out = clipped.predict(X)
        assert np.abs(out).max() <= 0.3 + 1e-7
        assert np.allclose(out, np.clip(learner.predict(X), -0.3, 0.3), atol=1e-6)


def test_wo_lip_fits_values_and_input_gradients():
    x = RNG.uniform(-1, 1, size=(80, 2)).astype(np.float32)
    y = (np.sin(2 * x[:, :1]) + x[:, 1:] ** 2).astype(np.float64)
    spec = NetworkSpec((2, 32, 32, 1), "tanh")
    z = RNG.uniform(-1, 1, size=(200, 2))
    jac = np.stack([2 * np.cos(2 * z[:, 0]), 2 * z[:, 1]], axis=1)[:, None, :]
    settings = OracleSettings(steps=400, lr=0.01, batch_size=0, sobolev_weight=1.0)
    fitted = fit_sobolev(spec, x, y, z, jac, settings, seed=0)
    assert _rel_error(fitted, y) < 0.3
    fitted_jac = input_jacobian(fitted.learner, z).numpy()
    assert np.linalg.norm(fitted_jac - jac) / np.linalg.norm(jac) < 0.5


def test_the_lipschitz_oracle_targets_a_multiple_of_u_minus_the_previous_learners(monkeypatch):
    """WO-lip is asked for a u - sum(previous): values as given, Jacobian a J_u - sum J_h at
    points drawn once in the node's bounding box."""
    x = RNG.uniform(-1, 1, size=(40, 2)).astype(np.float32)
    y = np.abs(x[:, :1]).astype(np.float64)
    extension = LipschitzExtension.of(x, y, data_lipschitz_constant(x, y))
    spec = NetworkSpec((2, 8, 8, 1), "tanh")
    calls = []

    def recording(spec, x, target, points, jacobian, settings, seed, device):
        calls.append((points, jacobian))
        return fit_least_squares(spec, x, target, settings, seed, device=device)

    monkeypatch.setattr(weak_learning, "fit_sobolev", recording)
    settings = OracleSettings(steps=5, sobolev_samples=64)
    fit = lipschitz_oracle(spec, x, extension, settings, lambda k: k)
    first = fit(y, 1.0, [])
    fit(2 * y - first.values, 2.0, [first.learner])
    points = calls[0][0]
    assert points.shape == (64, 2) and np.array_equal(points, calls[1][0])
    assert np.all((points >= x.min(0)) & (points <= x.max(0)))
    assert np.allclose(calls[0][1], extension.jacobian(points))
    wanted = 2 * extension.jacobian(points) - input_jacobian(first.learner, points).numpy()
    assert np.allclose(calls[1][1], wanted, atol=1e-6)


# -- Lipschitz extension ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_lipschitz_extension_interpolates_and_is_lipschitz(kind):
    x = RNG.normal(size=(50, 3))
    y = np.stack([np.sin(x[:, 0]), np.abs(x[:, 1])], axis=1)
    lipschitz = data_lipschitz_constant(x, y)
    assert 0 < lipschitz <= 1.0 + 1e-9  # sin and |.| are 1-Lipschitz
    u = LipschitzExtension.of(x, y, lipschitz, kind)
    assert np.allclose(u.values(x), y)
    a, b = RNG.normal(size=(300, 3)) * 2, RNG.normal(size=(300, 3)) * 2
    gaps = np.abs(u.values(a) - u.values(b)).max(axis=1)
    assert np.all(gaps <= lipschitz * np.linalg.norm(a - b, axis=1) + 1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_the_lipschitz_extension_jacobian_matches_finite_differences(kind):
    x = RNG.normal(size=(30, 3))
    y = RNG.normal(size=(30, 2))
    u = LipschitzExtension.of(x, y, 2.0, kind)
    z = RNG.normal(size=(20, 3)) * 1.5
    step = 1e-6
    numeric = np.stack(
        [(u.values(z + step * e) - u.values(z - step * e)) / (2 * step) for e in np.eye(3)], axis=2
    )
    assert np.allclose(u.jacobian(z), numeric, atol=1e-4)
    norms = np.linalg.norm(u.jacobian(z), axis=2)
    assert np.allclose(norms, 2.0) if kind == UPPER else np.all(norms <= 2.0 + 1e-9)


def test_the_midpoint_extension_is_the_mean_of_the_extreme_interpolants():
    x, y = RNG.normal(size=(30, 2)), RNG.normal(size=(30, 1))
    z, lipschitz = RNG.normal(size=(100, 2)) * 3, data_lipschitz_constant(x, y)
    upper = LipschitzExtension.of(x, y, lipschitz).values(z)
    mid = LipschitzExtension.of(x, y, lipschitz, MIDPOINT).values(z)
    dist = np.linalg.norm(z[:, None, :] - x[None, :, :], axis=2)
    lower = (y[None, :, 0] - lipschitz * dist).max(axis=1, keepdims=True)
    assert np.allclose(mid, (upper + lower) / 2) and np.all(lower <= upper + 1e-12)
    with pytest.raises(ValueError, match="unknown extension"):
        LipschitzExtension.of(x, y, 1.0, "lower")


def test_square_and_cross_entropy_gradients_are_the_pointwise_derivatives():
    f = RNG.normal(size=(10, 4))
    y = RNG.integers(0, 4, 10)
    for loss in (PointwiseLoss(CROSS_ENTROPY, 4), PointwiseLoss(SQUARE, 4)):
        step = 1e-6
        numeric = np.stack(
            [
                (loss.values(f + step * e, y) - loss.values(f - step * e, y)) / (2 * step)
                for e in np.eye(4)
            ],
            axis=1,
        )
        scale = 2.0 if loss.kind == SQUARE else 1.0  # the square loss reports ||f - y||^2
        assert np.allclose(scale * loss.gradient(f, y), numeric, atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3, 7, 10])
def test_the_cross_entropy_is_scipy_s_log_softmax_bit_for_bit(classes):
    """The loss a node reports, computed column by column, equals scipy's ``log_softmax`` at
    the labels bit for bit (large, tiny, infinite and missing outputs included)."""
    from scipy.special import log_softmax

    rng = np.random.default_rng(classes)
    f = rng.normal(size=(4_000, classes)) * rng.choice([1e-3, 1.0, 30.0, 1e3], size=(4_000, 1))
    f[0, 0], f[1, 0], f[2, -1] = np.inf, -np.inf, np.nan
    y = rng.integers(0, classes, len(f))
    with np.errstate(all="ignore"):
        expected = -log_softmax(f, axis=1)[np.arange(len(f)), y]
        got = PointwiseLoss(CROSS_ENTROPY, classes).values(f, y)
    np.testing.assert_array_equal(got, expected)
