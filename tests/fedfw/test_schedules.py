"""FedFW step-size, penalty and averaging schedules (FedFW paper, Theorems 1-3 and section 4.2)."""

import math

import pytest

from oracles.schedules import SCHEDULE_NAMES, make_schedule
from tasks.errors import ConfigError


def test_convex_matches_theorem_1():
    s = make_schedule("convex", lambda0=0.5, num_rounds=100)
    assert s.eta(1) == 1.0
    assert s.eta(3) == pytest.approx(2 / 4)
    assert s.eta(99) == pytest.approx(2 / 100)
    assert s.lam(3) == pytest.approx(0.5 * math.sqrt(4))
    assert s.lam(99) == pytest.approx(0.5 * 10)
    assert s.rho(7) == 1.0


def test_convex_partial_participation_section_4_2():
    s = make_schedule("convex", lambda0=2.0, num_rounds=100, participation=0.25)
    for t in (1, 5, 41):
        assert s.eta(t) == pytest.approx(2 / (0.25 * (t - 1) + 2))
        assert s.lam(t) == pytest.approx(2.0 * math.sqrt(0.25 * (t - 1) + 2))
    assert s.eta(1) == 1.0  # the first step lands on an extreme point, for every p


@pytest.mark.parametrize(
    ("kind", "eta", "lam", "rho"),
    [
        ("convex", lambda t: 2 / (t + 1), lambda t: math.sqrt(t + 1), lambda t: 1.0),
        (
            "stochastic",
            lambda t: 9 / (t + 8),
            lambda t: math.sqrt(t + 8),
            lambda t: 4 / (t + 7) ** (2 / 3),
        ),
    ],
)
def test_partial_formulas_equal_the_theorems_at_p_1(kind, eta, lam, rho):
    full = make_schedule(kind, lambda0=0.3, num_rounds=50, participation=1.0)
    almost = make_schedule(kind, lambda0=0.3, num_rounds=50, participation=1 - 1e-12)
    for t in range(1, 60):
        assert full.eta(t) == pytest.approx(eta(t), rel=1e-12)
        assert full.lam(t) == pytest.approx(0.3 * lam(t), rel=1e-12)
        assert full.rho(t) == pytest.approx(min(1.0, rho(t)), rel=1e-12)
        assert almost.eta(t) == pytest.approx(full.eta(t), rel=1e-9)
        assert almost.lam(t) == pytest.approx(full.lam(t), rel=1e-9)


def test_nonconvex_theorem_2_and_partial():
    s = make_schedule("nonconvex", lambda0=0.1, num_rounds=1000)
    assert s.eta(1) == s.eta(1000) == pytest.approx(1000 ** (-2 / 3))  # = 0.01
    assert s.lam(17) == pytest.approx(0.1 * 10)
    p = make_schedule("nonconvex", lambda0=0.1, num_rounds=1000, participation=0.5)
    assert p.eta(3) == pytest.approx(501 ** (-2 / 3))
    assert p.lam(3) == pytest.approx(0.1 * 501 ** (1 / 3))


def test_stochastic_theorem_3():
    s = make_schedule("stochastic", lambda0=1.5, num_rounds=10)
    assert s.eta(1) == 1.0 and s.rho(1) == 1.0  # 9/9 and 4/8^(2/3)
    assert s.eta(10) == pytest.approx(9 / 18)
    assert s.lam(8) == pytest.approx(1.5 * 4)
    assert s.rho(20) == pytest.approx(4 / 27 ** (2 / 3))
    # partial participation (our choice, no formula in the paper): t -> p(t-1)+1
    p = make_schedule("stochastic", lambda0=1.5, num_rounds=10, participation=0.5)
    assert p.eta(3) == pytest.approx(9 / (2 + 8))
    assert p.rho(3) == pytest.approx(4 / 9 ** (2 / 3))
    assert p.lam(3) == pytest.approx(1.5 * math.sqrt(10))


@pytest.mark.parametrize("kind", SCHEDULE_NAMES)
@pytest.mark.parametrize("participation", [1.0, 0.3])
def test_ranges_over_many_rounds(kind, participation):
    s = make_schedule(kind, lambda0=0.7, num_rounds=500, participation=participation)
    for t in range(1, 2001):
        assert 0 < s.eta(t) <= 1
        assert 0 < s.rho(t) <= 1
        assert s.lam(t) >= 0
    if kind in ("convex", "stochastic"):
        etas = [s.eta(t) for t in range(1, 100)]
        lams = [s.lam(t) for t in range(1, 100)]
        assert etas == sorted(etas, reverse=True) and lams == sorted(lams)


def test_constant_uses_given_values():
    s = make_schedule(
        "constant", lambda0=0.0, num_rounds=3, eta_constant=0.05, lambda_constant=1e-3
    )
    assert (s.eta(1), s.eta(3), s.lam(2), s.rho(2)) == (0.05, 0.05, 1e-3, 1.0)


def test_make_schedule_coerces_run_config_strings():
    s = make_schedule("convex", "0.5", "10", "1")
    assert (s.lambda0, s.num_rounds, s.participation) == (0.5, 10, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"kind": "linear"}, "fedfw.schedule"),
        ({"lambda0": -0.1}, "fedfw.lambda0"),
        ({"lambda0": float("nan")}, "fedfw.lambda0"),
        ({"lambda0": "abc"}, "fedfw.lambda0"),
        ({"num_rounds": 0}, "num-server-rounds"),
        ({"num_rounds": 2.5}, "num-server-rounds"),
        ({"participation": 0.0}, "fedfw.participation"),
        ({"participation": 1.5}, "fedfw.participation"),
        ({"eta_constant": 0.0}, "fedfw.eta-constant"),
        ({"eta_constant": 1.01}, "fedfw.eta-constant"),
        ({"lambda_constant": -1.0}, "fedfw.lambda-constant"),
    ],
)
def test_validation_names_the_key(kwargs, key):
    args = {"kind": "convex", "lambda0": 0.1, "num_rounds": 10} | kwargs
    with pytest.raises(ConfigError, match=key):
        make_schedule(**args)


def test_round_counter_starts_at_one():
    s = make_schedule("convex", 0.1, 10)
    with pytest.raises(ValueError, match="t=0"):
        s.eta(0)
