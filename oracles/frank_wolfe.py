"""One client's round of FedFW, FedFW+ and FedFW-sto (Algorithm 1 of the FedFW paper), on numpy.

A model is a list of arrays ("Params"). Every function here is pure: it returns new arrays and a
new state and never changes its inputs. That gives the Flower adapter the split it needs: a client
computes ``s, pending = fedfw_client_step(...)``, sends ``s`` and keeps its old state until the
server confirms it accepted ``s``; then it adopts ``pending``. A rejected ``s`` leaves the client a
non-participant of that round (x, y and d unchanged), which is what the server's mirror assumes.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from oracles.lmo import Constraint, lmo_per_tensor
from oracles.schedules import FWSchedule
from tasks.errors import ConfigError

Params = list[np.ndarray]

VARIANTS = ("fedfw", "fedfw-plus", "fedfw-sto")


@dataclass
class FWClientState:
    """x_i^t, plus the FedFW+ dual y_i^t and the FedFW-sto estimator d_i^t (None means zeros)."""

    x: Params
    y: Params | None = None
    d: Params | None = None


def fw_direction(
    variant: str,
    state: FWClientState,
    x_bar: Params,
    grad: Params,
    t: int,
    schedule: FWSchedule,
    num_clients: int,
) -> tuple[Params, FWClientState]:
    """The LMO input g_i^t of Algorithm 1 and the state with y or d advanced (x unchanged).

    ``grad`` is grad f_i(x_i^t), full (FedFW, FedFW+) or a minibatch estimate (FedFW-sto);
    ``num_clients`` is n, the number of all clients, participating or not.

    - FedFW:     g = (1/n) grad + lambda_t (x - x_bar)
    - FedFW+:    y' = y + lambda0 (x - x_bar);  g = (1/n) grad + lambda_t (x - x_bar) + y'
    - FedFW-sto: d' = (1 - rho_t) d + rho_t (1/n) grad;  g = d' + lambda_t (x - x_bar)
    """
    if variant not in VARIANTS:
        raise ConfigError.choice("algorithm", variant, VARIANTS)
    if num_clients < 1:
        raise ValueError(f"num_clients={num_clients} must be >= 1")
    _check_shapes(state.x, x_bar, "x_bar")
    _check_shapes(state.x, grad, "grad")
    lam = schedule.lam(t)
    diff = [np.asarray(x) - np.asarray(xb) for x, xb in zip(state.x, x_bar)]
    scaled = [np.asarray(g) / num_clients for g in grad]
    if variant == "fedfw":
        return [s + lam * e for s, e in zip(scaled, diff)], state
    if variant == "fedfw-plus":
        y = _or_zeros(state.y, state.x)
        y_next = [yk + schedule.lambda0 * e for yk, e in zip(y, diff)]
        g = [s + lam * e + yk for s, e, yk in zip(scaled, diff, y_next)]
        return g, replace(state, y=y_next)
    rho = schedule.rho(t)
    d = _or_zeros(state.d, state.x)
    d_next = [(1.0 - rho) * dk + rho * s for dk, s in zip(d, scaled)]
    return [dk + lam * e for dk, e in zip(d_next, diff)], replace(state, d=d_next)


def apply_step(x: Params, s: Params, eta: float) -> Params:
    """The FW update x' = (1 - eta) x + eta s (eq. 9); shared by the client and the server mirror
    so that both compute bit-identical x_i^{t+1} from the same inputs."""
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta={eta} must be in [0, 1]")
    _check_shapes(x, s, "s")
    return [(1.0 - eta) * np.asarray(xk) + eta * np.asarray(sk) for xk, sk in zip(x, s)]


def fedfw_client_step(
    variant: str,
    state: FWClientState,
    x_bar: Params,
    grad: Params,
    t: int,
    schedule: FWSchedule,
    num_clients: int,
    constraint: Constraint,
    scope: str = "per-tensor",
) -> tuple[Params, FWClientState]:
    """s_i^t = LMO(g_i^t) and the pending state with x_i^{t+1} = (1 - eta_t) x_i^t + eta_t s_i^t.

    ``constraint`` may differ between clients (section 4.3: sets D_i whose intersection is D).
    """
    g, advanced = fw_direction(variant, state, x_bar, grad, t, schedule, num_clients)
    s = lmo_per_tensor(constraint, g, scope)
    return s, replace(advanced, x=apply_step(state.x, s, schedule.eta(t)))


def fw_gap(
    grads_at_xbar: Sequence[Params],
    x_bar: Params,
    constraint: Constraint,
    scope: str,
    num_clients: int,
) -> float:
    """The Frank-Wolfe gap of eq. (11), gap(x) = max_{u in D} <grad F(x), x - u>, at x = x_bar.

    grad F(x_bar) = (1/n) sum_i grad f_i(x_bar) needs every client's gradient, so exactly
    ``num_clients`` gradients are required. The value is >= 0 (up to rounding) for x_bar in D and
    0 exactly at first-order stationary points; it is not clipped, so a negative value exposes an
    infeasible x_bar.
    """
    if len(grads_at_xbar) != num_clients:
        raise ValueError(
            f"fw_gap needs the gradients of all {num_clients} clients, got {len(grads_at_xbar)}"
        )
    for grad in grads_at_xbar:
        _check_shapes(x_bar, grad, "grad")
    full = [
        sum(np.asarray(g[k], dtype=np.float64) for g in grads_at_xbar) / num_clients
        for k in range(len(x_bar))
    ]
    s = lmo_per_tensor(constraint, full, scope)
    x = [np.asarray(xk, dtype=np.float64) for xk in x_bar]
    return float(sum(np.vdot(gk, xk - sk) for gk, xk, sk in zip(full, x, s)))


def _or_zeros(value: Params | None, like: Params) -> Params:
    """``value``, or zeros shaped like ``like`` (Algorithm 1 starts y and d at 0)."""
    if value is None:
        return [np.zeros(np.shape(a), dtype=np.result_type(a, np.float32)) for a in like]
    _check_shapes(like, value, "state")
    return value


def _check_shapes(ref: Params, other: Sequence[np.ndarray], name: str) -> None:
    """Refuse a model whose tensor count or shapes differ from ``ref`` (zip would truncate)."""
    if len(ref) != len(other) or any(np.shape(a) != np.shape(b) for a, b in zip(ref, other)):
        got, want = [np.shape(b) for b in other], [np.shape(a) for a in ref]
        raise ValueError(f"{name} shapes {got} do not match x {want}")
