"""One client's round of FFGB, FFGB.C and FFGB.L (Algorithms 2, 5 and 4 of the FFGB paper), on the
values of the functions at the node's own points.

A round starts from f^t (g^1 = f^t) and takes K restricted functional-gradient steps, each with a
weak learner fitted by an oracle; what the node sends is the increment
g^{K+1} = scale * f^t + sum_k w_k h_k, i.e. its K learners with their weights and one scale, which
``round_coefficients`` gives from the step sizes alone (client and server compute them with the
same code, so the server can check a reply against the schedule exactly).

- FFGB (Algorithm 2): h_k = WO(Delta_{k-1} + grad R_i[g_k]); g_{k+1} = g_k - eta_k (h_k + mu g_k);
  Delta_k = Delta_{k-1} + grad R_i[g_k] - h_k (the residual; ``residual=False`` keeps it 0).
- FFGB.C (Algorithm 5, the corrected Algorithm 3): the step uses Pi_{G2}(h_k), the residual is
  clipped to G1 and computed with the unclipped h_k; the learner that travels is Pi_{G2}(h_k).
- FFGB.L (Algorithm 4, square loss): g_{k+1} = (1 - eta_k) g_k + eta_k h_k where h_k approximates
  the Lipschitz extension u_i of the node's data (eq. 17) with error feedback:
  h_k = WO_lip(u_i - Delta_{k-1}), Delta_k = Delta_{k-1} - u_i + h_k. The paper prints the oracle's
  argument as Delta_{k-1} - u_i; with line 5 (descent direction g - h, so h must approximate +u_i)
  and line 6 (Delta_k = h_k - (u_i - Delta_{k-1}), the error of h_k as an approximation of
  u_i - Delta_{k-1}) only u_i - Delta_{k-1} is consistent: the printed sign is a typo. It also
  returns g^{K+1} (the printed g^{K,t} would drop the last learner). Unrolled,
  u_i - Delta_{k-1} = k u_i - sum_{j<k} h_j, which is how the oracle is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from oracles.functional_losses import PointwiseLoss

EXPERIMENT = "experiment"
THEOREM = "theorem"
CONSTANT = "constant"  # ours, not the paper's: XGBoost's fixed shrinkage
SCHEDULES = (EXPERIMENT, THEOREM, CONSTANT)
DESCENT = "descent"  # g <- (1 - eta mu) g - eta h   (FFGB, FFGB.C)
AVERAGE = "average"  # g <- (1 - eta) g + eta h      (FFGB.L)


@dataclass(frozen=True)
class StepSizes:
    """eta_{k,t} for round t (0-based) and local step k (1-based), K local steps.

    ``experiment``: eta0 / (K t + k + 1), as in section 4 of the paper.
    ``theorem``: c / (mu (K t + k + 1)), with c = 2 for FFGB (Theorem 3.1) and 4 for FFGB.C and
    FFGB.L (Theorems 3.2, 3.3); mu is the strong-convexity modulus (FFGB.L: 1, the square loss).
    ``constant``: eta0 at every step, the fixed shrinkage of XGBoost (not the paper's: its
    theorems need decreasing steps; an ablation, benchmarks/README.md).
    """

    kind: str
    local_steps: int
    eta0: float = 1.0
    mu: float = 0.0
    constant: float = 2.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULES or self.local_steps < 1:
            raise ValueError(f"unknown schedule {self.kind!r} or K={self.local_steps} < 1")
        if self.kind == THEOREM and self.mu <= 0:
            raise ValueError("the theorem schedule needs mu > 0")

    def eta(self, t: int, k: int) -> float:
        denominator = self.local_steps * t + k + 1
        if self.kind == EXPERIMENT:
            return self.eta0 / denominator
        if self.kind == CONSTANT:
            return self.eta0
        return self.constant / (self.mu * denominator)

    def etas(self, t: int) -> list[float]:
        """The K step sizes of round t."""
        return [self.eta(t, k) for k in range(1, self.local_steps + 1)]


def round_coefficients(etas: Sequence[float], mu: float, form: str) -> tuple[float, list[float]]:
    """(scale, weights) with g^{K+1} = scale * g^1 + sum_k weights[k] * v_k, where v_k is what
    step k adds (h_k, or Pi_{G2}(h_k) for FFGB.C)."""
    scale, weights = 1.0, []
    for eta in etas:
        shrink = 1.0 - eta * mu if form == DESCENT else 1.0 - eta
        scale *= shrink
        weights = [w * shrink for w in weights] + [-eta if form == DESCENT else eta]
    return scale, weights


@dataclass(frozen=True)
class Fitted:
    """An oracle's answer: the learner as it travels, and its values on the node's points."""

    learner: object
    values: np.ndarray  # (n, c) float64


@dataclass(frozen=True)
class Increment:
    """What a node sends: g^{K+1} = scale * f^t + sum_k weights[k] * learners[k]; and
    ``own_values`` = sum_k weights[k] * learners[k](x) on its points (kept, not sent)."""

    learners: list
    weights: list[float]
    scale: float
    own_values: np.ndarray
    oracle_error: float  # RMS over points and outputs of target - fit at the last step


@dataclass(frozen=True)
class Clipping:
    """FFGB.C's constants (Theorem 3.2): G1 = (1 - gamma) G / gamma bounds the residual,
    G2 = (2 - gamma) G / gamma the learners (G bounds the functional gradients, gamma is the
    oracle's constant of eq. 13)."""

    grad_bound: float
    gamma: float

    @property
    def residual_bound(self) -> float:
        return (1.0 - self.gamma) * self.grad_bound / self.gamma

    @property
    def learner_bound(self) -> float:
        return (2.0 - self.gamma) * self.grad_bound / self.gamma


Fit = Callable[[np.ndarray, int], Fitted]  # target values (n, c), local step k -> learner
# (least-squares fit, target, g_k) -> the learner to step with (Newton leaf values)
LeafStep = Callable[[Fitted, np.ndarray, np.ndarray], Fitted]


def _weighted_sum(weights: Sequence[float], values: Sequence[np.ndarray]) -> np.ndarray:
    out = np.zeros_like(values[0])
    for weight, value in zip(weights, values):
        out += weight * value
    return out


def ffgb_increment(
    f: np.ndarray,
    y: np.ndarray,
    loss: PointwiseLoss,
    etas: Sequence[float],
    mu: float,
    fit: Fit,
    residual: bool = True,
    clipping: Clipping | None = None,
    clip_learner: Callable[[object, float], object] | None = None,
    leaf_step: LeafStep | None = None,
) -> Increment:
    """Algorithm 2 (FFGB), or Algorithm 5 (FFGB.C) with ``clipping`` and ``clip_learner``
    (which turns a learner into its output-clipped version, the one that travels).

    ``leaf_step`` (ours, not the paper's) turns the oracle's least-squares fit into the learner
    the node steps with (second-order leaf values); the residual stays the least-squares fit's
    error, what the learner's shape could not represent of the target."""
    g = np.array(f, dtype=np.float64)
    delta = np.zeros_like(g)
    learners, steps = [], []
    for k, eta in enumerate(etas, start=1):
        gradient = loss.gradient(g, y)
        target = delta + gradient if residual else gradient
        fitted = fit(target, k)
        stepped = fitted if leaf_step is None else leaf_step(fitted, target, g)
        if clipping is None:
            learner, step = stepped.learner, stepped.values
        else:
            bound = clipping.learner_bound
            learner, step = (
                clip_learner(stepped.learner, bound),
                np.clip(stepped.values, -bound, bound),
            )
        g = (1.0 - eta * mu) * g - eta * step
        error = target - fitted.values
        if residual:
            delta = (
                error
                if clipping is None
                else np.clip(error, -clipping.residual_bound, clipping.residual_bound)
            )
        learners.append(learner)
        steps.append(step)
    scale, weights = round_coefficients(etas, mu, DESCENT)
    return Increment(learners, weights, scale, _weighted_sum(weights, steps), _rms(error))


LipschitzFit = Callable[[np.ndarray, float, list], Fitted]
"""FFGB.L's oracle: (target values at the points, multiple a of u_i, learners to subtract) ->
a fit of a u_i - sum(subtracted); the oracle also matches that function's input gradients."""


def ffgb_l_increment(
    u_values: np.ndarray, etas: Sequence[float], fit: LipschitzFit, residual: bool = True
) -> Increment:
    """Algorithm 4 (FFGB.L) with the oracle's argument u_i - Delta_{k-1} (see the module
    docstring); ``u_values`` = u_i at the node's points, i.e. its targets (eq. 17)."""
    u_values = np.asarray(u_values, dtype=np.float64)
    learners, steps = [], []
    fitted_sum = np.zeros_like(u_values)
    for k in range(1, len(etas) + 1):
        if residual:  # u_i - Delta_{k-1} = k u_i - sum_{j<k} h_j
            target, multiple, previous = k * u_values - fitted_sum, float(k), list(learners)
        else:
            target, multiple, previous = u_values, 1.0, []
        fitted = fit(target, multiple, previous)
        learners.append(fitted.learner)
        steps.append(fitted.values)
        fitted_sum = fitted_sum + fitted.values
    scale, weights = round_coefficients(etas, 0.0, AVERAGE)
    error = target - fitted.values
    return Increment(learners, weights, scale, _weighted_sum(weights, steps), _rms(error))


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(values**2))) if values.size else 0.0
