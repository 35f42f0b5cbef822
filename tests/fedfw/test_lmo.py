"""LMOs are exact argmins over D, land in D, and projections satisfy the projection inequality."""

import itertools
import warnings

import numpy as np
import pytest

from oracles.lmo import CONSTRAINT_NAMES, Constraint, lmo_per_tensor, make_constraint, smallest_set
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
    [
        ("l1", [[R, 0], [0, 0]]),
        ("l2", [[R, 0], [0, 0]]),
        ("box", [[R, R], [R, R]]),
        ("simplex", [[R, 0], [0, 0]]),
        ("nuclear", [[R, 0], [0, 0]]),
    ],
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


# -- l2 ball: no overflow or underflow of the squares; ordinary inputs keep their exact bits -----

HUGE_GRADIENTS = [
    np.array([1e308, -1e308, 5e307, 1e308]),
    np.array([[-1e308, 1e308], [1e308, 3e307]]),
    np.array([1e200, -2e200, 3e200]),  # squares overflow, entries are ordinary
]
TINY_GRADIENTS = [
    np.array([1e-320, -3e-320, 2e-320]),
    np.array([[0.0, 5e-320], [-1e-320, 0.0]]),
    np.array([5e-324, 0.0, -5e-324]),  # the smallest subnormals
]
HUGE_IDS = ["1e308", "1e308-matrix", "1e200"]
TINY_IDS = ["1e-320", "1e-320-matrix", "5e-324"]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """cos(a, b) computed on copies scaled to max-abs 1 (so huge or tiny inputs are safe)."""
    a = a.ravel() / np.abs(a).max()
    b = b.ravel() / np.abs(b).max()
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _safe_l2(x: np.ndarray) -> float:
    """||x||_2 as max|x| * ||x / max|x|||_2 (Python floats: inf, never a warning)."""
    scale = float(np.abs(x).max())
    return scale * float(np.linalg.norm(x.ravel() / scale))


@pytest.mark.parametrize("g", HUGE_GRADIENTS + TINY_GRADIENTS, ids=HUGE_IDS + TINY_IDS)
def test_l2_lmo_is_finite_on_the_sphere_and_along_minus_g_for_extreme_magnitudes(g):
    c = Constraint("l2", R)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = c.lmo(g)
    assert s.shape == g.shape and s.dtype == np.float64
    assert np.all(np.isfinite(s))
    assert np.linalg.norm(s) == pytest.approx(R, rel=1e-9)
    assert _cosine(s, -g) == pytest.approx(1.0, abs=1e-12)
    assert c.contains(s)
    # not the zero-gradient fallback r*e_0 (g is nonzero)
    fallback = np.zeros(g.size)
    fallback[0] = R
    assert not np.array_equal(s.ravel(), fallback)


def test_l2_lmo_of_exactly_zero_still_gives_r_e0():
    s = Constraint("l2", R).lmo(np.zeros(3))
    np.testing.assert_array_equal(s, [R, 0.0, 0.0])


@pytest.mark.parametrize("x", HUGE_GRADIENTS, ids=HUGE_IDS)
def test_l2_projection_of_overflowing_points_is_finite_on_the_sphere_along_x(x):
    c = Constraint("l2", R)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = c.project(x)
        norm = c.norm(x)
    assert p.shape == x.shape and np.all(np.isfinite(p))
    assert np.linalg.norm(p) == pytest.approx(R, rel=1e-9)
    assert _cosine(p, x) == pytest.approx(1.0, abs=1e-12)
    assert not np.isnan(norm)
    assert norm == _safe_l2(x) or (np.isinf(norm) and np.isinf(_safe_l2(x)))
    assert norm > R


def test_l2_norm_of_huge_and_subnormal_vectors():
    c = Constraint("l2", R)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = c.norm(np.array([3e-320, 4e-320]))
        fits = c.norm(np.array([1e308, 1e308]))  # sqrt(2) * 1e308 is a float64
        too_big = c.norm(np.array([1e308, 1e308, 1e308, 1e308]))  # 2e308 is not
    assert tiny == pytest.approx(5e-320, rel=1e-3)  # subnormals carry ~12 bits
    assert fits == pytest.approx(np.sqrt(2.0) * 1e308, rel=1e-12)
    assert not np.isnan(too_big) and too_big > 1e308
    assert c.norm(np.zeros(4)) == 0.0
    # projection of a huge point whose norm is still finite takes the plain formula's branch
    p = c.project(np.array([1e308, 1e308]))
    np.testing.assert_allclose(p, [R / np.sqrt(2.0)] * 2, rtol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_l2_lmo_and_projection_keep_the_plain_formulas_bits(shape, seed):
    rng = np.random.default_rng(seed)
    c = Constraint("l2", R)
    for scale in (1e-3, 1.0, 1e3):
        g = scale * rng.standard_normal(shape)
        assert np.array_equal(c.lmo(g), -R * g / np.linalg.norm(g))
        x = 3 * R * rng.standard_normal(shape)  # outside the ball
        assert np.linalg.norm(x) > R
        assert np.array_equal(c.project(x), x * (R / np.linalg.norm(x)))
        assert c.norm(x) == float(np.linalg.norm(x))
        inside = x / (2 * np.linalg.norm(x)) * R
        assert np.array_equal(c.project(inside), inside)


# -- l1 ball and simplex: entries far larger than the radius ----------------------------------

HUGE_POINTS = [
    np.array([3e30, -1e30, 2.0, -5.0]),  # a diverging FedDR's average, in the l1 grid
    np.array([1e300, 1e300 - 1e285, -4e299]),
    np.array([[7e17, 7e17 + 256.0], [1.0, -7e17]]),  # two within float64's step of each other
]


@pytest.mark.parametrize("kind", ["l1", "simplex"])
@pytest.mark.parametrize("x", HUGE_POINTS, ids=["1e30", "1e300", "7e17"])
def test_l1_and_simplex_projections_of_huge_points_land_on_the_boundary(kind, x):
    c = Constraint(kind, R)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = c.project(x)
    assert p.shape == x.shape and np.all(np.isfinite(p))
    assert np.abs(p).sum() == pytest.approx(R, rel=1e-12)
    assert c.contains(p)
    target = np.abs(x) if kind == "l1" else x
    # all of the radius goes to the largest entries (float64 cannot tell them apart by R)
    largest = target == target.max()
    assert np.abs(p)[~largest].sum() == 0.0
    if kind == "l1":
        assert np.all(np.sign(p[p != 0]) == np.sign(x[p != 0]))


@pytest.mark.parametrize("kind", ["l1", "simplex"])
@pytest.mark.parametrize("seed", SEEDS)
def test_l1_and_simplex_projections_agree_with_the_textbook_formula(kind, seed):
    rng = np.random.default_rng(seed)
    x = 3 * R * rng.standard_normal(50)
    y = np.abs(x) if kind == "l1" else x
    mu = np.sort(y)[::-1]
    cumsum = np.cumsum(mu) - R
    rho = np.nonzero(mu - cumsum / np.arange(1, y.size + 1) > 0)[0][-1]
    textbook = np.maximum(y - cumsum[rho] / (rho + 1), 0.0)
    expected = np.sign(x) * textbook if kind == "l1" else textbook
    np.testing.assert_allclose(Constraint(kind, R).project(x), expected, rtol=0, atol=1e-12 * R)


# -- smallest_set: the one node set inside all the others -----------------------------------


def _ball_points(
    kind: str, radius: float, n: int, rng: np.random.Generator, count: int
) -> list[np.ndarray]:
    """Extreme points and scaled random points of a ball of ``radius`` in R^n."""
    points = []
    for _ in range(count):
        x = rng.standard_normal(n)
        if kind == "l1":
            point = np.zeros(n)
            point[rng.integers(n)] = radius * rng.choice((-1.0, 1.0))
            points += [point, radius * rng.uniform() * x / np.abs(x).sum()]
        elif kind == "l2":
            points += [radius * x / np.linalg.norm(x)]
        else:  # box
            points += [radius * rng.choice((-1.0, 1.0), n), rng.uniform(-radius, radius, n)]
    return points[:count]


def test_smallest_set_same_kind_takes_the_smallest_radius():
    sets = [Constraint("l2", 5.0), Constraint("l2", 3.0), Constraint("l2", 7.0)]
    assert smallest_set(sets, [(60, 10), (10,)], "per-tensor") == Constraint("l2", 3.0)
    sets = [Constraint("l1", 10.0), Constraint("l1", 2.0)]
    assert smallest_set(sets, [(4,)], "global") == Constraint("l1", 2.0)
    sets = [Constraint("box", 1.0), Constraint("box", 0.5), Constraint("box", 1.0)]
    assert smallest_set(sets, [(3, 4)], "per-tensor") == Constraint("box", 0.5)


def test_smallest_set_of_identical_sets_is_that_set():
    for kind in CONSTRAINT_NAMES:
        c = Constraint(kind, 4.0)
        assert smallest_set([c, Constraint(kind, 4.0), c], [(3, 4)], "per-tensor") == c
        assert smallest_set([c], [(3, 4)], "per-tensor") == c


def test_smallest_set_l1_lies_inside_l2_of_the_same_radius():
    sets = [Constraint("l2", R), Constraint("l1", R), Constraint("l2", R)]
    assert smallest_set(sets, [(60, 10), (10,)], "per-tensor") == Constraint("l1", R)
    assert smallest_set(sets, [(60, 10), (10,)], "global") == Constraint("l1", R)


def test_smallest_set_l2_inside_l1_needs_sqrt_n():
    l1_2, l2_1, l1_19 = Constraint("l1", 2.0), Constraint("l2", 1.0), Constraint("l1", 1.9)
    assert smallest_set([l1_2, l2_1], [(4,)], "per-tensor") == l2_1
    assert smallest_set([l2_1, l1_2], [(2, 2)], "per-tensor") == l2_1
    assert smallest_set([l1_19, l2_1], [(4,)], "per-tensor") is None
    # the answer holds per tensor: on 100 elements the l2 ball of radius 1 needs l1 radius 10
    assert smallest_set([l1_2, l2_1], [(4,), (100,)], "per-tensor") is None
    assert smallest_set([l1_2, l2_1], [(4,), (3,)], "per-tensor") == l2_1
    # "global" measures the whole model: 4 + 3 = 7 elements, sqrt(7) > 2
    assert smallest_set([l1_2, l2_1], [(4,), (3,)], "global") is None
    assert smallest_set([l1_2, l2_1], [(2,), (2,)], "global") == l2_1
    assert smallest_set([Constraint("l1", 10.0), l2_1], [(4,), (100,)], "per-tensor") == l2_1


def test_smallest_set_box_inside_l2_needs_r_sqrt_n():
    box, l2 = Constraint("box", 1.0), Constraint("l2", 2.0)
    assert smallest_set([l2, box], [(4,)], "per-tensor") == box  # sqrt(4) * 1 <= 2
    assert smallest_set([l2, box], [(5,)], "per-tensor") is None  # sqrt(5) > 2
    assert smallest_set([l2, box], [(2, 2), (3,)], "global") is None
    # the l2 ball lies inside a box of its radius
    assert smallest_set([Constraint("box", 2.0), l2], [(100,)], "per-tensor") == l2
    # l1 (radius 10) and box (radius 1) on a 60x10 MCLR weight: neither contains the other
    assert smallest_set([Constraint("l1", 10.0), box], [(60, 10), (10,)], "per-tensor") is None


def test_smallest_set_refuses_the_simplex_unless_identical():
    simplex = Constraint("simplex", 1.0)
    for other in (
        Constraint("l2", 10.0),
        Constraint("l1", 1.0),
        Constraint("simplex", 2.0),
        Constraint("box", 1.0),
    ):
        assert smallest_set([simplex, other], [(4,)], "per-tensor") is None
        assert smallest_set([other, simplex], [(4,)], "global") is None
    assert smallest_set([simplex, simplex], [(4,)], "per-tensor") == simplex


def test_smallest_set_nuclear_uses_the_matrix_shape():
    nuc, l2 = Constraint("nuclear", 2.0), Constraint("l2", 1.0)
    assert smallest_set([Constraint("l2", 2.0), nuc], [(3, 4)], "per-tensor") == nuc
    # ||X||_* <= sqrt(rank) ||X||_F: the l2 ball of radius 1 fits in nuclear(2) for rank <= 4
    assert smallest_set([nuc, l2], [(4, 6)], "per-tensor") == l2
    assert smallest_set([nuc, l2], [(5, 6)], "per-tensor") is None
    assert smallest_set([nuc, l2], [(6,)], "per-tensor") == l2  # a bias is a 1 x n matrix


@pytest.mark.parametrize(
    ("inner", "outer", "n"),
    [
        (Constraint("l2", 1.0), Constraint("l1", 2.0), 4),
        (Constraint("l1", R), Constraint("l2", R), 600),
        (Constraint("box", 1.0), Constraint("l2", 2.0), 4),
        (Constraint("l2", 1.0), Constraint("box", 1.0), 50),
        (Constraint("l1", 3.0), Constraint("box", 3.0), 7),
    ],
)
def test_a_set_smallest_set_picks_is_really_inside_the_other(inner, outer, n):
    assert smallest_set([outer, inner], [(n,)], "per-tensor") == inner
    rng = np.random.default_rng(7)
    points = _ball_points(inner.kind, inner.radius, n, rng, 1000)
    assert len(points) == 1000
    assert all(inner.contains(p) for p in points)
    assert all(outer.contains(p) for p in points)


def test_when_smallest_set_says_none_neither_ball_contains_the_other():
    l1, l2 = Constraint("l1", 1.9), Constraint("l2", 1.0)
    assert smallest_set([l1, l2], [(4,)], "per-tensor") is None
    assert not l1.contains(np.full(4, 0.5))  # in l2(1): l2 norm 1, l1 norm 2
    assert not l2.contains(np.array([1.9, 0.0, 0.0, 0.0]))  # in l1(1.9)
    box = Constraint("box", 1.0)
    big_l1 = Constraint("l1", 10.0)
    assert not big_l1.contains(np.ones(600))  # a vertex of the box
    assert not box.contains(10.0 * np.eye(600)[0])  # a vertex of the l1 ball
