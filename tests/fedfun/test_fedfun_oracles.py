"""FedFun's local steps and the baselines' (oracles.fsr_network, oracles.decentralized), and
Theorem 2's contraction checked exactly on a discretised function space."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional

from functions.networks import NetworkSpec, build
from oracles.decentralized import (
    adam_train,
    average_parameters,
    diagonal_fisher,
    distill,
    momentum_sgd_train,
    psr_train,
)
from oracles.fsr_network import Anchor, fsr_train, monte_carlo_distance, penalty_weights
from oracles.graphs import make_graph


def _network(sizes: tuple[int, ...], seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build(NetworkSpec(sizes, "tanh"))


def _target(z: torch.Tensor) -> torch.Tensor:
    """A smooth 2-D -> 2-D function to learn."""
    return torch.stack([torch.sin(3 * z[:, 0]), z[:, 0] * z[:, 1]], 1)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (a) FSR's local step


def test_fsr_train_without_anchors_fits_the_data_and_is_deterministic():
    x = torch.rand(300, 2, generator=_generator(1))
    y = functional.one_hot((x.sum(1) > 1).long(), 2).float()
    model = _network((2, 16, 2))
    with torch.no_grad():
        before = float(((model(x) - y) ** 2).mean())
    twin = _network((2, 16, 2))
    after = fsr_train(model, x, y, [], steps=150, radius=0.02, lr=1e-2, generator=_generator())
    fsr_train(twin, x, y, [], steps=150, radius=0.02, lr=1e-2, generator=_generator())
    assert after < 0.5 * before
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters()))


def test_fsr_train_pulls_the_model_to_a_heavy_anchor():
    x = torch.rand(50, 2, generator=_generator(1)) * 0.2  # data on a corner only
    model = _network((2, 16, 16, 2))
    distance_before = monte_carlo_distance(model, _target, 2, 4000, _generator(5))
    fsr_train(
        model,
        x,
        _target(x),
        [Anchor(50.0, _target)],
        steps=400,
        radius=0.0,
        lr=1e-2,
        generator=_generator(),
    )
    distance_after = monte_carlo_distance(model, _target, 2, 4000, _generator(5))
    assert distance_after < 0.05 * distance_before


def test_fsr_train_refuses_a_misshapen_anchor():
    x = torch.rand(10, 2)
    with pytest.raises(ValueError, match="anchor returned shape"):
        fsr_train(
            _network((2, 4, 2)),
            x,
            _target(x),
            [Anchor(1.0, lambda z: z[:, :1])],
            steps=1,
            radius=0.0,
        )
    with pytest.raises(ValueError, match="anchor weight"):
        Anchor(-1.0, _target)


# (b) Theorem 2 on a discretised function space: piecewise constant functions on G cells of
# [0, 1], so every operator is pointwise and every step has a closed form.

GRID, NODES, RADIUS, LAM = 200, 4, 0.05, 1.0


def _smoothed_risks(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(A, a) of R_i[h] = sum_j int k(z, x_j) (h(z) - y_j)^2 dz = 1/2 <h, A_i h> + <a_i, h> +
    const (section 5.1) with a box kernel, as (NODES, GRID) pointwise values. Node i's data lie
    in [i/4, (i+1)/4] (heterogeneous), so only together do the kernels cover the domain."""
    rng = np.random.default_rng(seed)
    cells = np.linspace(0, 1, GRID + 1)
    mass, moment = np.zeros((NODES, GRID)), np.zeros((NODES, GRID))
    for i in range(NODES):
        xs = rng.uniform(i / NODES, (i + 1) / NODES, 20)
        for x, y in zip(xs, np.sin(2 * np.pi * xs) + 0.5 * i):
            lo, hi = max(x - RADIUS, 0.0), min(x + RADIUS, 1.0)  # the kernel integrates to 1
            overlap = np.clip(np.minimum(cells[1:], hi) - np.maximum(cells[:-1], lo), 0, None)
            density = overlap * GRID / (hi - lo)  # mean of k(., x) over each cell
            mass[i] += density
            moment[i] += density * y
    return 2 * mass, -2 * moment


def _relaxed_optimum(big_a: np.ndarray, a: np.ndarray, lap: np.ndarray, lam: float) -> np.ndarray:
    """The solution of (4): (A + lam L) h = -a, solved cell by cell."""
    return np.stack(
        [np.linalg.solve(np.diag(big_a[:, c]) + lam * lap, -a[:, c]) for c in range(GRID)], 1
    )


def _anchored_step(big_a, a, h, adjacency, w_own, w_nbr):
    """argmin_h R_i[h] + w_own ||h - h_i||^2 + w_nbr sum_{j in N(i)} ||h - h_j||^2, all i."""
    degrees = adjacency.sum(1, keepdims=True)
    return (-a + 2 * w_own * h + 2 * w_nbr * adjacency @ h) / (
        big_a + 2 * w_own + 2 * w_nbr * degrees
    )


def _distance(h: np.ndarray, g: np.ndarray) -> float:
    return math.sqrt(((h - g) ** 2).sum() / GRID)  # the L2([0, 1]) norm on the grid


@pytest.mark.parametrize("step,optimum_lam", [("prox-grad", LAM), ("jacobi", 2 * LAM)])
def test_theorem_2_contraction_on_the_smoothed_squared_error(step, optimum_lam):
    big_a, a = _smoothed_risks()
    graph = make_graph("ring", NODES, seed=0)
    lap = graph.laplacian()
    adjacency = np.diag(np.diag(lap)) - lap
    gamma = 0.9 / (LAM * graph.spectral_norm())  # Assumption 3
    # c: the spectral gap of A + lam L, the smallest eigenvalue over the cells' n x n blocks
    gap = min(np.linalg.eigvalsh(np.diag(big_a[:, c]) + LAM * lap)[0] for c in range(GRID))
    bound = 1 / math.sqrt(1 + gamma * gap)
    optimum = _relaxed_optimum(big_a, a, lap, optimum_lam)
    h = np.where(big_a > 0, -a / np.where(big_a > 0, big_a, 1.0), 0.0)  # h^0 = argmin R_i
    w_own, w_nbr = penalty_weights(step, gamma, LAM, 2)
    distances = [_distance(h, optimum)]
    for _ in range(40):
        h = _anchored_step(big_a, a, h, adjacency, w_own, w_nbr)
        distances.append(_distance(h, optimum))
    ratios = np.array(distances[1:]) / np.array(distances[:-1])
    print(
        f"{step}: c={gap:.4f}, bound={bound:.4f}, max factor={ratios.max():.4f}, "
        f"mean factor={(distances[-1] / distances[0]) ** (1 / 40):.4f}"
    )
    assert gap > 0 and ratios.max() < 1
    assert distances[-1] < 1e-2 * distances[0]
    if step == "prox-grad":
        assert np.all(ratios <= bound + 1e-12)


# (c) penalty weights


def test_penalty_weights_of_both_forms():
    assert penalty_weights("jacobi", 0.25, 3.0, 2) == (2.0, 3.0)
    w_own, w_nbr = penalty_weights("prox-grad", 0.1, 2.0, 3)
    assert math.isclose(w_own, (1 - 0.6) / 0.2) and w_nbr == 1.0
    assert math.isclose(w_own + 3 * w_nbr, 1 / (2 * 0.1))  # the proximal term's curvature
    with pytest.raises(ValueError, match="gamma \\* lam \\* degree < 1"):
        penalty_weights("prox-grad", 0.5, 1.0, 2)
    with pytest.raises(ValueError, match="unknown step"):
        penalty_weights("newton", 0.1, 1.0, 2)
    with pytest.raises(ValueError, match="gamma"):
        penalty_weights("jacobi", 0.0, 1.0, 2)


# (d) averaging


def test_average_parameters_uniform_and_fisher_weighted():
    first = [np.array([[1.0, 2.0]]), np.array([0.0])]
    second = [np.array([[3.0, 6.0]]), np.array([4.0])]
    uniform = average_parameters([first, second])
    assert np.allclose(uniform[0], [[2.0, 4.0]]) and np.allclose(uniform[1], [2.0])
    fishers = [[np.array([[1.0, 0.0]]), np.array([0.0])], [np.array([[3.0, 2.0]]), np.array([0.0])]]
    weighted = average_parameters([first, second], fishers)
    assert np.allclose(weighted[0], [[(1 + 9) / 4, 6.0]])
    assert np.allclose(weighted[1], [2.0])  # zero Fisher everywhere: the uniform average
    assert np.allclose(average_parameters([first, second], [1.0, 3.0])[1], [3.0])
    with pytest.raises(ValueError, match="non-negative"):
        average_parameters([first, second], [1.0, -1.0])
    with pytest.raises(ValueError, match="shapes differ"):
        average_parameters([first, [np.zeros(2), np.zeros(1)]])


# (e) the baselines' local steps


def _blobs(n: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    """Two separable classes in [0, 1]^2."""
    generator = _generator(3)
    y = torch.randint(0, 2, (n,), generator=generator)
    x = 0.25 + 0.5 * y[:, None].float() + 0.1 * torch.randn(n, 2, generator=generator)
    return x, y


def _cross_entropy(model, x, y) -> float:
    with torch.no_grad():
        return float(functional.cross_entropy(model(x), y))


@pytest.mark.parametrize("train", [adam_train, momentum_sgd_train])
def test_local_passes_reduce_the_loss(train):
    x, y = _blobs()
    model = _network((2, 8, 2))
    before = _cross_entropy(model, x, y)
    lr = 1e-2 if train is adam_train else 0.05
    train(model, x, y, steps=100, batch_size=50, lr=lr, generator=_generator())
    assert _cross_entropy(model, x, y) < 0.3 * before


def test_psr_with_a_huge_penalty_stays_at_the_neighbours_mean():
    x, y = _blobs()
    model = _network((2, 8, 2))
    start = [p.detach().numpy().astype(np.float64) for p in model.parameters()]
    rng = np.random.default_rng(0)
    neighbours = [[s + rng.normal(scale=0.3, size=s.shape) for s in start] for _ in range(2)]
    mean = average_parameters(neighbours)

    def gap(params) -> float:
        return math.sqrt(sum(((np.asarray(p) - m) ** 2).sum() for p, m in zip(params, mean)))

    psr_train(model, x, y, neighbours, lam=1e3, steps=300, lr=1e-2, generator=_generator())
    assert gap([p.detach().numpy() for p in model.parameters()]) < 0.05 * gap(start)
    with pytest.raises(ValueError, match="do not match"):
        psr_train(model, x, y, [start[:1]], lam=1.0, steps=1)


def test_distillation_reduces_the_kl_to_the_teachers():
    teachers = [_network((2, 8, 3), seed=s) for s in (1, 2)]
    student = _network((2, 8, 3), seed=3)
    z = torch.rand(2000, 2, generator=_generator(9))

    def kl() -> float:
        with torch.no_grad():
            target = torch.stack([t(z) for t in teachers]).mean(0).softmax(1)
            return float(
                functional.kl_div(student(z).log_softmax(1), target, reduction="batchmean")
            )

    before = kl()
    distill(student, teachers, 2, steps=150, samples=500, lr=1e-2, generator=_generator())
    assert kl() < 0.2 * before


def test_diagonal_fisher_is_the_mean_squared_per_example_gradient():
    x, y = _blobs(30)
    model = _network((2, 8, 2))
    fisher = diagonal_fisher(model, x, y, batch_size=7, max_samples=20)
    assert [f.shape for f in fisher] == [tuple(p.shape) for p in model.parameters()]
    assert all(np.all(f >= 0) for f in fisher)
    expected = [np.zeros(f.shape) for f in fisher]
    for i in range(20):
        model.zero_grad()
        functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for e, p in zip(expected, model.parameters()):
            e += p.grad.numpy().astype(np.float64) ** 2 / 20
    assert all(np.allclose(f, e, rtol=1e-4, atol=1e-10) for f, e in zip(fisher, expected))
