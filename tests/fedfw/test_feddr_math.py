"""FedDR with g = indicator of D, and the projected-average server step (oracles/douglas_rachford).

Convergence is certified without a reference solver: for convex F and x in D,
F(x) - F* <= gap(x) = max_{u in D} <grad F(x), x - u> (eq. 11 of the FedFW paper), so a small FW gap
at the consensus point bounds its objective gap.
"""

import numpy as np
import pytest

from oracles.douglas_rachford import (
    DRClientState,
    FedDRServer,
    feddr_aggregate,
    feddr_client_init,
    feddr_client_step,
    project_params,
    projected_average,
)
from oracles.frank_wolfe import fw_gap
from oracles.lmo import make_constraint
from tasks.errors import ConfigError
from tests.logreg_problem import DATA, DIM, L1_BALL, N_CLIENTS, N_SAMPLES, grad

SMOOTHNESS = 0.25 * max(
    np.linalg.norm(np.c_[f, np.ones(N_SAMPLES)], 2) ** 2 / N_SAMPLES for f, _ in DATA
)


def gap_at(x) -> float:
    return fw_gap([grad(x, *d) for d in DATA], x, L1_BALL, "per-tensor", N_CLIENTS)


def run_feddr(rounds, participation=1.0, seed=0, alpha=1.0, eta=1.0, local_steps=5):
    rng = np.random.default_rng(seed)
    x0 = [np.zeros(DIM), np.zeros(1)]
    server = FedDRServer(x0, range(N_CLIENTS))
    states = [feddr_client_init(x0) for _ in range(N_CLIENTS)]
    x_bar = x0
    lr = 1 / (SMOOTHNESS + 1 / eta)  # the inner problem is (L + 1/eta)-smooth
    for _ in range(rounds):
        received = {}
        for i in range(N_CLIENTS):
            if participation < 1 and rng.random() >= participation:
                continue
            states[i] = feddr_client_step(
                states[i], x_bar, lambda z, i=i: grad(z, *DATA[i]), alpha, eta, local_steps, lr
            )
            received[i] = states[i].x_hat
        x_bar = server.aggregate(received, L1_BALL)
    return x_bar


def test_feddr_converges_on_l1_logistic_regression():
    """alpha = 1, eta = 1, 5 inner gradient steps: FW gap < 1e-4 after 200 rounds (measured 2.5e-5;
    gap(0) > 0.5), hence F(x_bar) - F* < 1e-4."""
    x0 = [np.zeros(DIM), np.zeros(1)]
    assert gap_at(x0) > 0.5
    x_bar = run_feddr(200)
    assert all(L1_BALL.contains(a) for a in x_bar)
    assert np.abs(x_bar[0]).sum() == pytest.approx(2.0, abs=1e-6)  # the optimum is on the boundary
    assert 0 <= gap_at(x_bar) < 1e-4


def test_feddr_partial_participation_keeps_last_x_hat():
    """Each client joins with probability 0.5; the server averages the last x_hat of all clients.
    FW gap < 1e-3 after 300 rounds (measured 1.8e-4)."""
    x_bar = run_feddr(300, participation=0.5)
    assert 0 <= gap_at(x_bar) < 1e-3


def test_client_step_matches_the_exact_prox_on_a_quadratic():
    """f(z) = ||z - c||^2 / 2 has prox_{eta f}(y) = (y + eta c) / (1 + eta): the steps reach it."""
    c = [np.array([1.0, -2.0]), np.array([[0.5]])]
    state = DRClientState(
        x=[np.array([0.0, 1.0]), np.array([[2.0]])],
        y=[np.array([1.0, 1.0]), np.array([[0.0]])],
        x_hat=[np.zeros(2), np.zeros((1, 1))],
    )
    x_bar = [np.array([2.0, 0.0]), np.array([[1.0]])]
    alpha, eta = 0.5, 2.0
    new = feddr_client_step(
        state, x_bar, lambda z: [zk - ck for zk, ck in zip(z, c)], alpha, eta, 200, 0.3
    )
    y = [np.array([1.0 + 0.5 * 2.0, 1.0 + 0.5 * -1.0]), np.array([[0.5 * -1.0]])]
    for k in range(2):
        np.testing.assert_allclose(new.y[k], y[k])
        np.testing.assert_allclose(new.x[k], (y[k] + eta * c[k]) / (1 + eta), atol=1e-10)
        np.testing.assert_allclose(new.x_hat[k], 2 * new.x[k] - new.y[k])
    np.testing.assert_array_equal(state.y[0], [1.0, 1.0])  # the input state is untouched


def test_one_inner_step_is_warm_started_at_x():
    state = feddr_client_init([np.array([1.0])])
    new = feddr_client_step(state, [np.array([3.0])], lambda z: [2 * z[0]], 1.0, 0.5, 1, 0.1)
    # y = 1 + (3 - 1) = 3; z = 1 - 0.1 * (2*1 + (1 - 3)/0.5) = 1.2; x_hat = 2*1.2 - 3
    np.testing.assert_allclose(new.y[0], [3.0])
    np.testing.assert_allclose(new.x[0], [1.2])
    np.testing.assert_allclose(new.x_hat[0], [-0.6])


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"alpha": 2.0}, "feddr.alpha"),
        ({"alpha": 0.0}, "feddr.alpha"),
        ({"eta": 0.0}, "feddr.eta"),
        ({"local_steps": 0}, "feddr.local-steps"),
        ({"lr": -1.0}, "feddr.lr"),
    ],
)
def test_client_step_validates(kwargs, key):
    args = {"alpha": 1.0, "eta": 1.0, "local_steps": 1, "lr": 0.1} | kwargs
    with pytest.raises(ConfigError, match=key):
        feddr_client_step(feddr_client_init([np.zeros(2)]), [np.zeros(2)], lambda z: z, **args)


def test_server_averages_over_all_clients_and_projects():
    box = make_constraint("box", 1.0)
    server = FedDRServer([np.zeros(2)], [10, 20, 30])
    x_bar = server.aggregate({10: [np.array([3.0, 0.3])]}, box)
    np.testing.assert_allclose(x_bar[0], [1.0, 0.1])  # mean (1, 0.1); 1 is on the box edge
    x_bar = server.aggregate({20: [np.array([3.0, -0.6])]}, box)  # client 10's x_hat is kept
    np.testing.assert_allclose(x_bar[0], [1.0, -0.1])
    with pytest.raises(KeyError):
        server.aggregate({40: [np.zeros(2)]}, box)
    with pytest.raises(ValueError, match="shapes"):
        server.aggregate({10: [np.zeros(3)]}, box)


def test_projected_average_weights_and_scopes():
    ball = make_constraint("l1", 1.0)
    models = [[np.array([4.0, 0.0]), np.array([0.2])], [np.array([0.0, 0.0]), np.array([0.4])]]
    per_tensor = projected_average(models, [3, 1], ball, "per-tensor")
    np.testing.assert_allclose(per_tensor[0], [1.0, 0.0])  # mean (3, 0) projected onto the l1 ball
    np.testing.assert_allclose(per_tensor[1], [0.25])
    whole = projected_average(models, [3, 1], ball, "global")  # one l1 ball over (3, 0, 0.25)
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in whole]), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(
        feddr_aggregate(models, ball, "per-tensor")[1], ball.project(np.array([0.3]))
    )
    with pytest.raises(ValueError, match="weight"):
        projected_average(models, [1.0], ball)
    with pytest.raises(ValueError, match="weights"):
        projected_average(models, [0.0, 0.0], ball)


def test_project_params_global_is_the_projection_of_the_flattened_model():
    rng = np.random.default_rng(0)
    model = [rng.normal(size=(3, 4)) * 3, rng.normal(size=5) * 3]
    for kind in ("l1", "l2", "box"):
        ball = make_constraint(kind, 1.5)
        flat = np.concatenate([a.ravel() for a in project_params(ball, model, "global")])
        np.testing.assert_allclose(flat, ball.project(np.concatenate([a.ravel() for a in model])))
        assert all(ball.contains(a) for a in project_params(ball, model, "per-tensor"))
    with pytest.raises(ConfigError, match="nuclear"):
        project_params(make_constraint("nuclear", 1.0), model, "global")
    with pytest.raises(ConfigError, match="fedfw.scope"):
        project_params(make_constraint("l1", 1.0), model, "layerwise")
