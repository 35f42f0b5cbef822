"""Step size eta_t, penalty lambda_t and averaging weight rho_t of FedFW (Algorithm 1).

The round counter t starts at 1, as in the paper. Formulas:

- ``convex`` (Theorem 1; section 4.2 for participation p):
  eta_t = 2 / (p(t-1) + 2), lambda_t = lambda0 * sqrt(p(t-1) + 2).
  At p = 1 these are the theorem's 2/(t+1) and lambda0*sqrt(t+1).
- ``nonconvex`` (Theorem 2; section 4.2): constant over the T = num_rounds rounds,
  eta = T^(-2/3), lambda = lambda0 * T^(1/3) at p = 1, and eta = (pT+1)^(-2/3),
  lambda = lambda0 * (pT+1)^(1/3) for p < 1. The paper's two formulas disagree at p = 1
  (T versus T+1); each is used where the paper states it.
- ``stochastic`` (Theorem 3): eta_t = 9/(t+8), lambda_t = lambda0*sqrt(t+8), rho_t = 4/(t+7)^(2/3).
  The paper gives no partial-participation version; our choice is the convex case's shift, t
  replaced by tau = p(t-1) + 1 (equal to t at p = 1, and eta_1 = rho_1 = 1 for every p).
- ``constant``: eta_t = eta_constant and lambda_t = lambda_constant (figure 3 uses lambda = 1e-3).

rho_t is 1 for every kind but ``stochastic``: FedFW-sto then uses the fresh gradient alone.
"""

import math
from dataclasses import dataclass

from tasks.errors import ConfigError

SCHEDULE_NAMES = ("convex", "nonconvex", "stochastic", "constant")


@dataclass(frozen=True)
class FWSchedule:
    """The per-round constants of FedFW; validated on construction (raises ``ConfigError``)."""

    kind: str
    lambda0: float
    num_rounds: int
    participation: float = 1.0
    eta_constant: float = 0.1
    lambda_constant: float = 1e-3

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_NAMES:
            raise ConfigError.choice("fedfw.schedule", self.kind, SCHEDULE_NAMES)
        if not (math.isfinite(self.lambda0) and self.lambda0 >= 0):
            raise ConfigError.bound("fedfw.lambda0", self.lambda0, "finite and >= 0")
        rounds = self.num_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError.bound("num-server-rounds", self.num_rounds, "an integer >= 1")
        if not (0 < self.participation <= 1):
            raise ConfigError.bound("fedfw.participation", self.participation, "in (0, 1]")
        if not (0 < self.eta_constant <= 1):
            raise ConfigError.bound("fedfw.eta-constant", self.eta_constant, "in (0, 1]")
        if not (math.isfinite(self.lambda_constant) and self.lambda_constant >= 0):
            raise ConfigError.bound(
                "fedfw.lambda-constant", self.lambda_constant, "finite and >= 0"
            )

    def eta(self, t: int) -> float:
        """FW step size eta_t in (0, 1] for round t >= 1."""
        _check_round(t)
        if self.kind == "convex":
            return 2.0 / (self._shifted(t) + 1.0)
        if self.kind == "nonconvex":
            return self._horizon() ** (-2.0 / 3.0)
        if self.kind == "stochastic":
            return 9.0 / (self._shifted(t) + 8.0)
        return self.eta_constant

    def lam(self, t: int) -> float:
        """Consensus penalty lambda_t for round t >= 1."""
        _check_round(t)
        if self.kind == "convex":
            return self.lambda0 * math.sqrt(self._shifted(t) + 1.0)
        if self.kind == "nonconvex":
            return self.lambda0 * self._horizon() ** (1.0 / 3.0)
        if self.kind == "stochastic":
            return self.lambda0 * math.sqrt(self._shifted(t) + 8.0)
        return self.lambda_constant

    def rho(self, t: int) -> float:
        """FedFW-sto averaging weight rho_t in (0, 1] (eq. 15); 1 outside ``stochastic``."""
        _check_round(t)
        if self.kind == "stochastic":
            # min: in floating point 8 ** (2/3) is 3.9999999999999996, which would give rho_1 > 1.
            return min(1.0, 4.0 / (self._shifted(t) + 7.0) ** (2.0 / 3.0))
        return 1.0

    def _shifted(self, t: int) -> float:
        """tau = p(t-1) + 1: the expected number of updates a client has made by round t."""
        return self.participation * (t - 1) + 1.0

    def _horizon(self) -> float:
        """T at full participation, pT + 1 otherwise (Theorem 2 / section 4.2)."""
        if self.participation == 1.0:
            return float(self.num_rounds)
        return self.participation * self.num_rounds + 1.0


def make_schedule(
    kind: str,
    lambda0: float,
    num_rounds: int,
    participation: float = 1.0,
    eta_constant: float = 0.1,
    lambda_constant: float = 1e-3,
) -> FWSchedule:
    """Build a validated schedule from run-config values, coercing numeric strings/ints."""
    return FWSchedule(
        kind=str(kind),
        lambda0=_as_float("fedfw.lambda0", lambda0),
        num_rounds=_as_int("num-server-rounds", num_rounds),
        participation=_as_float("fedfw.participation", participation),
        eta_constant=_as_float("fedfw.eta-constant", eta_constant),
        lambda_constant=_as_float("fedfw.lambda-constant", lambda_constant),
    )


def _check_round(t: int) -> None:
    if t < 1:
        raise ValueError(f"round counter t={t} must be >= 1 (the paper counts from 1)")


def _as_float(key: str, value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError.bound(key, value, "a number") from None


def _as_int(key: str, value: object) -> int:
    number = _as_float(key, value)
    if isinstance(value, bool) or not number.is_integer():
        raise ConfigError.bound(key, value, "an integer >= 1")
    return int(number)
