"""LMOs are exact argmins over D, land in D, and projections satisfy the projection inequality."""

import itertools

import numpy as np
import pytest

from oracles.lmo import CONSTRAINT_NAMES, Constraint, lmo_per_tensor, make_constraint
from tasks.errors import ConfigError

R = 10.0
SEEDS = (0, 1, 2)
SHAPES = ((7,), (3, 4), (10, 6))


def sample_in_domain(
    kind: str, shape: tuple[int, ...], rng: np.random.Generator, count: int
) -> list[np.ndarray]:
    """Random points of D, mostly on its boundary, where linear functions are extremal."""
    points = []
    for _ in range(count):
        x = rng.standard_normal(shape)
        scale = rng.uniform(0.5, 1.0)
        if kind == "l1":
            points.append(R * scale * x / np.abs(x).sum())
        elif kind == "l2":
            points.append(R * x / np.linalg.norm(x))
        elif kind == "box":
            points.append(rng.uniform(-R, R, shape))
        elif kind == "simplex":
            points.append(R * rng.dirichlet(np.ones(x.size)).reshape(shape))
        else:
            m = x.reshape(1, -1) if x.ndim < 2 else x
            u, v = rng.standard_normal(m.shape[0]), rng.standard_normal(m.shape[1])
            rank_one = -R * np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))
            points.append(rank_one.reshape(shape))
            points.append((R * scale * m / np.linalg.norm(m, "nuc")).reshape(shape))
    return points


def vertices(kind: str, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Every vertex of the polytopes l1, box (small n) and simplex."""
    n = int(np.prod(shape))
    eye = np.eye(n)
    if kind == "l1":
        return [sign * R * e.reshape(shape) for e in eye for sign in (1, -1)]
    if kind == "simplex":
        return [R * e.reshape(shape) for e in eye]
    return [R * np.array(p).reshape(shape) for p in itertools.product((1.0, -1.0), repeat=n)]


def assert_not_beaten(g: np.ndarray, s: np.ndarray, others: list[np.ndarray]) -> None:
    """<g, s> <= <g, v> for every v, up to 1e-9 of the largest possible |<g, x>| over D."""
    value = float(np.vdot(g, s))
    tol = 1e-9 * R * np.abs(g).sum()
    worst = min(float(np.vdot(g, v)) for v in others)
    assert value <= worst + tol, (value, worst)


@pytest.mark.parametrize("kind", ["l1", "box", "simplex"])
@pytest.mark.parametrize("shape", SHAPES[:2])
@pytest.mark.parametrize("seed", SEEDS)
def test_lmo_beats_every_vertex(kind, shape, seed):
    g = np.random.default_rng(seed).standard_normal(shape)
    c = Constraint(kind, R)
    assert_not_beaten(g, c.lmo(g), vertices(kind, shape))


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_lmo_beats_sampled_points_and_lies_in_domain(kind, shape, seed):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(shape)
    c = Constraint(kind, R)
    s = c.lmo(g)
    assert s.shape == g.shape and s.dtype == np.float64
    assert c.contains(s)
    assert_not_beaten(g, s, sample_in_domain(kind, shape, rng, 200))


@pytest.mark.parametrize("shape", [(200, 300), (300, 200), (40, 1000), (33, 34), (10, 60)])
def test_nuclear_matches_full_svd(shape):
    g = np.random.default_rng(3).standard_normal(shape)
    u, sv, vt = np.linalg.svd(g, full_matrices=False)
    s = Constraint("nuclear", R).lmo(g)
    assert np.vdot(g, s) == pytest.approx(-R * sv[0], rel=1e-9)
    np.testing.assert_allclose(s, -R * np.outer(u[:, 0], vt[0]), atol=1e-6 * R)
    np.testing.assert_array_equal(s, Constraint("nuclear", R).lmo(g))  # deterministic


def test_nuclear_on_zero_sum_rows_softmax_like_gradient():
    """Rows summing to zero (softmax gradients) must not defeat the iterative solver."""
    g = np.random.default_rng(4).standard_normal((64, 100))
    g -= g.mean(axis=0)
    sv = np.linalg.svd(g, compute_uv=False)
    assert np.vdot(g, Constraint("nuclear", R).lmo(g)) == pytest.approx(-R * sv[0], rel=1e-9)


def test_closed_forms_and_tie_breaking():
    g = np.array([1.0, -3.0, 3.0, 0.0])
    np.testing.assert_array_equal(Constraint("l1", R).lmo(g), [0, R, 0, 0])  # tie -> lowest index
    np.testing.assert_array_equal(Constraint("box", R).lmo(g), [-R, R, -R, R])  # zero -> +r
    np.testing.assert_array_equal(Constraint("simplex", R).lmo(g), [0, R, 0, 0])
    np.testing.assert_allclose(Constraint("l2", R).lmo(g), -R * g / np.linalg.norm(g))
    np.testing.assert_allclose(Constraint("nuclear", R).lmo(g), Constraint("l2", R).lmo(g))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("l1", [[R, 0], [0, 0]]), ("l2", [[R, 0], [0, 0]]), ("box", [[R, R], [R, R]]),
     ("simplex", [[R, 0], [0, 0]]), ("nuclear", [[R, 0], [0, 0]])],
)
def test_zero_gradient_gives_documented_point(kind, expected):
    s = Constraint(kind, R).lmo(np.zeros((2, 2), dtype=np.float32))
    assert s.dtype == np.float32
    np.testing.assert_array_equal(s, expected)


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_gradient_raises(kind, bad):
    g = np.ones((3, 3))
    g[1, 2] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        Constraint(kind, R).lmo(g)


def test_empty_and_high_rank_inputs_are_refused():
    with pytest.raises(ValueError, match="empty"):
        Constraint("l1", R).lmo(np.zeros(0))
    with pytest.raises(ConfigError, match="at most 2 dimensions"):
        Constraint("nuclear", R).lmo(np.ones((2, 3, 4)))


def test_integer_gradient_gives_float64():
    assert Constraint("l2", R).lmo(np.array([1, 2, 3])).dtype == np.float64


def test_make_constraint_validates():
    assert make_constraint("l1", 10) == Constraint("l1", 10.0)
    with pytest.raises(ConfigError, match="fedfw.constraint='l3'.*l1, l2, box, nuclear, simplex"):
        make_constraint("l3", 1.0)
    for radius in (0, -1.0, float("nan"), float("inf"), "ten"):
        with pytest.raises(ConfigError, match="fedfw.radius"):
            make_constraint("l2", radius)


def model_grads(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((10, 6)), rng.standard_normal(10).astype(np.float32)]


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
def test_per_tensor_scope_is_one_ball_per_tensor(kind):
    grads = model_grads(0)
    c = Constraint(kind, R)
    points = lmo_per_tensor(c, grads)
    for g, s in zip(grads, points):
        np.testing.assert_array_equal(s, c.lmo(g))
        assert s.dtype == g.dtype and c.contains(s)


@pytest.mark.parametrize("kind", ["l1", "l2", "box", "simplex"])
@pytest.mark.parametrize("seed", SEEDS)
def test_global_scope_is_one_ball_over_the_model(kind, seed):
    grads = model_grads(seed)
    c = Constraint(kind, R)
    points = lmo_per_tensor(c, grads, scope="global")
    assert [(p.shape, p.dtype) for p in points] == [(g.shape, g.dtype) for g in grads]
    flat_g = np.concatenate([g.ravel() for g in grads]).astype(np.float64)
    flat_s = np.concatenate([p.ravel() for p in points]).astype(np.float64)
    assert c.contains(flat_s, rtol=1e-6)
    rng = np.random.default_rng(seed)
    assert_not_beaten(flat_g, flat_s, sample_in_domain(kind, flat_g.shape, rng, 200))
    if kind in ("l1", "simplex"):
        assert np.count_nonzero(flat_s) == 1
    if kind == "box":  # the box is separable: global and per-tensor agree
        for p, q in zip(points, lmo_per_tensor(c, grads)):
            np.testing.assert_array_equal(p, q)


def test_scope_validation():
    with pytest.raises(ConfigError, match="fedfw.scope"):
        lmo_per_tensor(Constraint("l1", R), model_grads(0), scope="layer")
    with pytest.raises(ConfigError, match="per-tensor"):
        lmo_per_tensor(Constraint("nuclear", R), model_grads(0), scope="global")
    assert lmo_per_tensor(Constraint("l2", R), [], scope="global") == []


def test_norms_and_membership():
    x = np.array([[3.0, -4.0], [0.0, 0.0]])
    assert Constraint("l1", R).norm(x) == 7.0
    assert Constraint("l2", R).norm(x) == 5.0
    assert Constraint("box", R).norm(x) == 4.0
    assert Constraint("nuclear", R).norm(x) == pytest.approx(5.0)
    assert Constraint("simplex", R).norm(x) == float("inf")
    simplex = Constraint("simplex", R)
    assert simplex.contains(np.array([4.0, 6.0])) and not simplex.contains(np.array([4.0, 5.0]))
    assert not simplex.contains(np.array([-1.0, 11.0]))
    assert not Constraint("l2", R).contains(np.array([np.nan]))
    assert Constraint("l2", R).contains(np.array([R * (1 + 1e-7)]))
    assert not Constraint("l2", R).contains(np.array([R * 1.01]))


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_projection_is_the_euclidean_projection(kind, shape, scale):
    rng = np.random.default_rng(5)
    c = Constraint(kind, R)
    x = scale * R * rng.standard_normal(shape)
    p = c.project(x)
    assert p.shape == x.shape and c.contains(p)
    np.testing.assert_allclose(c.project(p), p, atol=1e-9 * R)
    if c.contains(x):
        np.testing.assert_allclose(p, x, atol=1e-9 * R)
    zs = sample_in_domain(kind, shape, rng, 100)
    zs += [c.lmo(rng.standard_normal(shape)) for _ in range(20)]
    for z in zs:
        assert np.vdot(x - p, z - p) <= 1e-9 * R * (np.abs(x).sum() + R)
