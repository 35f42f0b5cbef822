"""FedFW client maths (oracles/frank_wolfe.py) and the server mirror (oracles/fedfw_mirror.py).

The convergence problem: binary logistic regression with an intercept, parameters [w (10,), b (1,)],
on 3 clients whose features are shifted in different coordinates and whose labels use different
offsets (non-IID). D is the l1 ball of radius 2 applied per tensor (scope "per-tensor"); it binds
(||w*||_1 = 2). F* comes from 2,000 FISTA iterations of projected gradient, checked by its FW gap.
"""

import numpy as np
import pytest

from oracles.douglas_rachford import project_params
from oracles.fedfw_mirror import ConsensusMirror
from oracles.frank_wolfe import FWClientState, apply_step, fedfw_client_step, fw_direction, fw_gap
from oracles.lmo import make_constraint
from oracles.schedules import make_schedule
from tasks.errors import ConfigError
from tests.logreg_problem import DATA, DIM, L1_BALL, N_CLIENTS, N_SAMPLES, grad, loss


def objective(x) -> float:
    return float(np.mean([loss(x, *d) for d in DATA]))


def zeros():
    return [np.zeros(DIM), np.zeros(1)]


@pytest.fixture(scope="module")
def optimum():
    """x* and F* by FISTA on the product of l1 balls."""

    def full_grad(x):
        return [sum(parts) / N_CLIENTS for parts in zip(*(grad(x, *d) for d in DATA))]

    smooth = 0.25 * max(
        np.linalg.norm(np.c_[f, np.ones(N_SAMPLES)], 2) ** 2 / N_SAMPLES for f, _ in DATA
    )
    x, y, k = zeros(), zeros(), 1.0
    for _ in range(2000):
        x_next = project_params(L1_BALL, [a - g / smooth for a, g in zip(y, full_grad(y))])
        k_next = (1 + np.sqrt(1 + 4 * k * k)) / 2
        y = [a + (k - 1) / k_next * (a - b) for a, b in zip(x_next, x)]
        x, k = x_next, k_next
    gap = fw_gap([grad(x, *d) for d in DATA], x, L1_BALL, "per-tensor", N_CLIENTS)
    assert abs(gap) < 1e-9, "the reference optimum must be first-order stationary"
    assert np.abs(x[0]).sum() == pytest.approx(2.0), "the constraint must bind"
    return x, objective(x)


def run_fedfw(
    variant, schedule, rounds, *, batch=None, participation=1.0, constraints=None, seed=1
):
    """Algorithm 1 on DATA: the objective F(x_bar^t) after every round, the mirror and states."""
    rng = np.random.default_rng(seed)
    constraints = constraints or [L1_BALL] * N_CLIENTS
    mirror = ConsensusMirror(zeros(), range(N_CLIENTS))
    states = [FWClientState(x=zeros()) for _ in range(N_CLIENTS)]
    values = []
    for t in range(1, rounds + 1):
        x_bar = mirror.x_bar
        points = {}
        for i, (features, labels) in enumerate(DATA):
            if participation < 1 and rng.random() >= participation:
                continue
            if batch:
                rows = rng.choice(N_SAMPLES, batch, replace=False)
                features, labels = features[rows], labels[rows]
            g = grad(states[i].x, features, labels)
            points[i], states[i] = fedfw_client_step(
                variant, states[i], x_bar, g, t, schedule, N_CLIENTS, constraints[i]
            )
        values.append(objective(mirror.apply(points, schedule.eta(t))))
    return values, mirror, states


# --- Appendix A: the counterexample -------------------------------------------------------------


def test_appendix_a_naive_local_fw_is_stuck_but_fedfw_converges():
    """min_{x in [-1,1]} (1/2)[(x-3)^2 + (x+1)^2], f_1 = (x-3)^2, f_2 = (x+1)^2, x* = 1.

    Procedure (20) (local FW step from x_bar, then averaging) never leaves x_bar = 0. FedFW with
    the convex schedule (lambda0 = 1) reaches |x_bar - 1| < 0.07 after 1,000 rounds and < 0.05
    after 2,000 (measured 0.060 and 0.043), i.e. F(x_bar) - F* = (x_bar - 1)^2 < 2.5e-3.
    """
    box = make_constraint("box", 1.0)
    grads = [lambda x: [2 * (x[0] - 3)], lambda x: [2 * (x[0] + 1)]]
    schedule = make_schedule("convex", lambda0=1.0, num_rounds=2000)

    x_bar = [np.zeros(1)]
    for t in range(1, 201):
        eta = schedule.eta(t)
        local = [apply_step(x_bar, [box.lmo(g(x_bar)[0])], eta) for g in grads]
        x_bar = [(local[0][0] + local[1][0]) / 2]
        assert x_bar[0][0] == 0.0

    mirror = ConsensusMirror([np.zeros(1)], [0, 1])
    states = [FWClientState(x=[np.zeros(1)]) for _ in range(2)]
    trace = {}
    for t in range(1, 2001):
        x_bar = mirror.x_bar
        points = {}
        for i in range(2):
            points[i], states[i] = fedfw_client_step(
                "fedfw", states[i], x_bar, grads[i](states[i].x), t, schedule, 2, box
            )
        trace[t] = mirror.apply(points, schedule.eta(t))[0][0]
        assert -1.0 <= trace[t] <= 1.0
    assert abs(trace[1000] - 1) < 0.07
    assert abs(trace[2000] - 1) < 0.05
    assert (trace[2000] - 1) ** 2 < 2.5e-3
    assert abs(trace[2000] - 1) < 0.5 * abs(trace[200] - 1)  # still improving, O(1/sqrt(t))-like


# --- convergence on l1-constrained logistic regression -----------------------------------------


def test_fedfw_converges_to_the_constrained_optimum(optimum):
    """FedFW, convex schedule, lambda0 = 0.03: F(x_bar) - F* < 3e-3 after 500 rounds
    (F(0) - F* = 0.255; measured 4.7e-4)."""
    x_star, f_star = optimum
    values, mirror, _ = run_fedfw("fedfw", make_schedule("convex", 0.03, 500), 500)
    assert values[49] - f_star > 3e-3
    assert 0 <= values[-1] - f_star < 3e-3
    assert all(L1_BALL.contains(a) for a in mirror.x_bar)  # x_bar is a convex combination: feasible
    assert mirror.consensus_distance() < 0.05


def test_fedfw_plus_converges(optimum):
    """FedFW+ (augmented Lagrangian), lambda0 = 0.01: gap < 1e-3 at 500 rounds (measured 2.3e-4)."""
    _, f_star = optimum
    values, _, states = run_fedfw("fedfw-plus", make_schedule("convex", 0.01, 500), 500)
    assert 0 <= values[-1] - f_star < 1e-3
    assert (
        np.abs(sum(s.y[0] for s in states)).max() < 1e-9
    )  # the duals sum to 0: sum_i (x_i - x_bar) = 0


def test_fedfw_sto_minibatch_makes_progress(optimum):
    """FedFW-sto, stochastic schedule, lambda0 = 0.03, minibatches of 20 of 100 samples: the mean
    gap over rounds 901-1000 is < 2e-2 (measured 3e-3; F(0) - F* = 0.255)."""
    _, f_star = optimum
    values, _, _ = run_fedfw("fedfw-sto", make_schedule("stochastic", 0.03, 1000), 1000, batch=20)
    assert 0 <= np.mean(values[-100:]) - f_star < 2e-2


def test_fedfw_partial_participation_converges(optimum):
    """Each client joins with probability 0.5 (section 4.2 schedule): gap < 5e-3 after 1,000 rounds
    (measured 4.5e-4)."""
    _, f_star = optimum
    schedule = make_schedule("convex", 0.03, 1000, participation=0.5)
    values, mirror, states = run_fedfw("fedfw", schedule, 1000, participation=0.5)
    assert 0 <= values[-1] - f_star < 5e-3
    client_mean = [np.mean([s.x[k] for s in states], axis=0) for k in range(2)]
    for a, b in zip(client_mean, mirror.x_bar):
        np.testing.assert_allclose(a, b, atol=1e-12)  # the mirror tracks the clients exactly


def test_split_constraints_section_4_3(optimum):
    """Client 0 uses D (l1 ball), clients 1-2 the larger l2 ball of the same radius; the
    intersection is D. FedFW+ reaches ||x_bar - x*|| < 0.05 in 1,000 rounds (measured 0.018).
    x_bar itself need not lie in D before consensus; we only require it close."""
    x_star, _ = optimum
    l2_ball = make_constraint("l2", 2.0)
    _, mirror, _ = run_fedfw(
        "fedfw-plus",
        make_schedule("convex", 0.03, 1000),
        1000,
        constraints=[L1_BALL, l2_ball, l2_ball],
    )
    x_bar = mirror.x_bar
    assert np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(x_bar, x_star))) < 0.05
    assert np.abs(x_bar[0]).sum() < 2.02


# --- one step, by hand --------------------------------------------------------------------------


def _state():
    return FWClientState(x=[np.array([1.0, -1.0]), np.array([0.5])])


X_BAR = [np.array([0.0, 1.0]), np.array([0.5])]
GRAD = [np.array([3.0, -6.0]), np.array([9.0])]


def test_fedfw_direction_formula():
    schedule = make_schedule("convex", lambda0=0.5, num_rounds=10)  # lambda_3 = 0.5 * 2 = 1
    g, state = fw_direction("fedfw", _state(), X_BAR, GRAD, 3, schedule, 3)
    np.testing.assert_allclose(g[0], [1.0 + 1.0, -2.0 - 2.0])
    np.testing.assert_allclose(g[1], [3.0])
    assert state.y is None and state.d is None


def test_fedfw_plus_dual_update_uses_lambda0():
    schedule = make_schedule("convex", lambda0=0.5, num_rounds=10)
    start = FWClientState(x=_state().x, y=[np.array([1.0, 1.0]), np.array([1.0])])
    g, state = fw_direction("fedfw-plus", start, X_BAR, GRAD, 3, schedule, 3)
    np.testing.assert_allclose(state.y[0], [1.0 + 0.5, 1.0 - 1.0])
    np.testing.assert_allclose(g[0], [2.0 + 1.5, -4.0 + 0.0])
    np.testing.assert_allclose(start.y[0], [1.0, 1.0])  # input untouched
    g0, state0 = fw_direction("fedfw-plus", _state(), X_BAR, GRAD, 3, schedule, 3)  # y^1 = 0
    np.testing.assert_allclose(state0.y[0], [0.5, -1.0])


def test_fedfw_sto_estimator():
    schedule = make_schedule("stochastic", lambda0=0.0, num_rounds=10)
    g, state = fw_direction("fedfw-sto", _state(), X_BAR, GRAD, 1, schedule, 3)
    np.testing.assert_allclose(state.d[0], [1.0, -2.0])  # rho_1 = 1: d^2 = grad / n
    rho = schedule.rho(2)
    assert 0 < rho < 1
    g, state = fw_direction(
        "fedfw-sto", state, X_BAR, [np.array([6.0, 0.0]), np.zeros(1)], 2, schedule, 3
    )
    np.testing.assert_allclose(state.d[0], [(1 - rho) * 1.0 + rho * 2.0, (1 - rho) * -2.0])
    np.testing.assert_allclose(g[0], state.d[0])  # lambda0 = 0


def test_client_step_is_pure_and_lands_on_the_fw_point():
    schedule = make_schedule("convex", lambda0=0.5, num_rounds=10)
    start = _state()
    before = [a.copy() for a in start.x]
    s, pending = fedfw_client_step("fedfw", start, X_BAR, GRAD, 3, schedule, 3, L1_BALL)
    np.testing.assert_allclose(s[0], [0.0, 2.0])  # argmax |g| is -4 at index 1
    np.testing.assert_allclose(s[1], [-2.0])
    eta = schedule.eta(3)
    np.testing.assert_allclose(pending.x[0], (1 - eta) * before[0] + eta * s[0])
    for a, b in zip(start.x, before):
        np.testing.assert_array_equal(a, b)  # a rejected step leaves the client as it was


def test_bad_inputs_are_refused():
    schedule = make_schedule("convex", 0.5, 10)
    with pytest.raises(ConfigError, match="fedfw-pro"):
        fw_direction("fedfw-pro", _state(), X_BAR, GRAD, 1, schedule, 3)
    with pytest.raises(ValueError, match="shapes"):
        fw_direction("fedfw", _state(), X_BAR[:1], GRAD, 1, schedule, 3)
    with pytest.raises(ValueError, match="eta"):
        apply_step(X_BAR, X_BAR, 1.5)


# --- the FW gap ---------------------------------------------------------------------------------


def test_fw_gap_nonnegative_on_feasible_points_and_zero_at_interior_optimum():
    """f_i = ||x - c_i||^2 / 2 with mean(c) inside the l2 ball: x* = mean(c), gap(x*) = 0."""
    rng = np.random.default_rng(3)
    centres = [[rng.normal(size=(3, 2)) * 0.2, rng.normal(size=4) * 0.2] for _ in range(4)]
    ball = make_constraint("l2", 5.0)
    x_star = [np.mean([c[k] for c in centres], axis=0) for k in range(2)]

    def grads_at(x):
        return [[x[k] - c[k] for k in range(2)] for c in centres]

    assert abs(fw_gap(grads_at(x_star), x_star, ball, "per-tensor", 4)) < 1e-12
    for _ in range(50):
        x = [ball.project(rng.normal(size=(3, 2)) * 3), ball.project(rng.normal(size=4) * 3)]
        for scope in ("per-tensor", "global"):
            gap = fw_gap(grads_at(x), x, ball, scope, 4)
            assert gap >= -1e-12
            assert gap > 1e-3  # x != x*, and x* is interior: the gap is positive
    with pytest.raises(ValueError, match="all 4 clients"):
        fw_gap(grads_at(x_star)[:3], x_star, ball, "per-tensor", 4)


def test_fw_gap_matches_the_definition_on_the_box():
    """On a box, max_u <G, x - u> = <G, x> + r ||G||_1 in closed form."""
    box = make_constraint("box", 0.5)
    x = [np.array([0.1, -0.4, 0.5])]
    grads = [[np.array([1.0, -2.0, 0.0])], [np.array([3.0, 0.0, -1.0])]]
    full = np.array([2.0, -1.0, -0.5])
    assert fw_gap(grads, x, box, "per-tensor", 2) == pytest.approx(
        full @ x[0] + 0.5 * np.abs(full).sum()
    )


# --- the server mirror --------------------------------------------------------------------------


def _random_params(rng):
    return [rng.normal(size=(4, 3)), rng.normal(size=5)]


def test_mirror_full_participation_identity():
    """All clients step: x_bar^{t+1} = (1 - eta) x_bar^t + eta mean_i s_i (Algorithm 1)."""
    rng = np.random.default_rng(0)
    mirror = ConsensusMirror(_random_params(rng), range(5))
    mirror.apply({i: _random_params(rng) for i in range(5)}, 0.7)  # spread the x_i apart
    before = mirror.x_bar
    points = {i: _random_params(rng) for i in range(5)}
    after = mirror.apply(points, 0.3)
    for k in range(2):
        mean_s = np.mean([points[i][k] for i in range(5)], axis=0)
        np.testing.assert_allclose(after[k], 0.7 * before[k] + 0.3 * mean_s, atol=1e-12)


def test_mirror_incremental_mean_after_many_partial_rounds():
    rng = np.random.default_rng(1)
    ids = [3, 7, 11, 20, 42, 99]
    mirror = ConsensusMirror(_random_params(rng), ids)
    shadow = {cid: [a.copy() for a in mirror.x_bar] for cid in ids}
    for t in range(1, 2001):
        chosen = [cid for cid in ids if rng.random() < 0.4]
        points = {cid: [a * 10 for a in _random_params(rng)] for cid in chosen}
        eta = 2 / (t + 1)
        mirror.apply(points, eta)
        for cid, s in points.items():
            shadow[cid] = [(1 - eta) * a + eta * b for a, b in zip(shadow[cid], s)]
    recomputed = [np.mean([shadow[cid][k] for cid in ids], axis=0) for k in range(2)]
    for a, b in zip(mirror.x_bar, recomputed):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)
    distances = [
        np.sqrt(sum(np.sum((x - b) ** 2) for x, b in zip(shadow[cid], recomputed))) for cid in ids
    ]
    assert mirror.consensus_distance() == pytest.approx(np.mean(distances), rel=1e-9)


def test_mirror_leaves_non_participants_unchanged():
    rng = np.random.default_rng(2)
    start = _random_params(rng)
    mirror = ConsensusMirror(start, range(3))
    s = _random_params(rng)
    x_bar = mirror.apply({1: s}, 0.5)
    # x_0 = x_2 = start, x_1 = start + delta with delta = (s - start)/2, so x_bar = start + delta/3
    for k in range(2):
        np.testing.assert_allclose(x_bar[k], start[k] + (s[k] - start[k]) / 6, atol=1e-12)
    # clients 0 and 2 are |delta|/3 from x_bar, client 1 is 2|delta|/3: the mean is 4|delta|/9
    delta = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(s, start))) / 2
    assert mirror.consensus_distance() == pytest.approx(4 * delta / 9, rel=1e-9)


def test_mirror_refuses_unknown_clients_and_bad_shapes_atomically():
    rng = np.random.default_rng(3)
    mirror = ConsensusMirror(_random_params(rng), [0, 1])
    before = mirror.x_bar
    with pytest.raises(KeyError):
        mirror.apply({5: _random_params(rng)}, 0.5)
    with pytest.raises(ValueError, match="shapes"):
        mirror.apply({0: _random_params(rng), 1: [np.zeros(3)]}, 0.5)
    for a, b in zip(mirror.x_bar, before):
        np.testing.assert_array_equal(a, b)
