"""FedDR (Tran-Dinh, Pham, Phan, Nguyen, NeurIPS 2021), g = indicator of D, and projected FedAvg.

FedDR solves min_x (1/n) sum_i f_i(x) + g(x) by randomized Douglas-Rachford splitting. With g the
indicator of the constraint set D, prox_{eta g} is the Euclidean projection onto D for every eta.
We implement Algorithm 1 of the FedDR paper (cross-checked with the authors' code, unc-optimization/
FedDR, flearn/models/client_dr.py and flearn/trainers/feddr.py):

- initialisation: y_i^0 = x^0, x_i^0 = prox_{eta f_i}(y_i^0) approximately,
  x_hat_i^0 = 2 x_i^0 - y_i^0, server x_tilde^0 = x^0. We take the zero-step approximation
  x_i^0 = x^0 (``feddr_client_init``), so x_hat_i^0 = x^0 and x_tilde^0 is their exact mean.
- client i in S_k:  y_i^{k+1} = y_i^k + alpha (x_bar^k - x_i^k)
                    x_i^{k+1} ~ prox_{eta f_i}(y_i^{k+1})
                    x_hat_i^{k+1} = 2 x_i^{k+1} - y_i^{k+1}
- server:           x_tilde^{k+1} = (1/n) sum_i x_hat_i  (the last x_hat of every client)
                    x_bar^{k+1} = proj_D(x_tilde^{k+1})

The paper's clients send the difference x_hat_i^{k+1} - x_hat_i^k and the server accumulates it;
here clients send x_hat_i itself and the server keeps the last one of each client (``FedDRServer``):
the same x_tilde in exact arithmetic, and a lost message cannot corrupt the running sum. The mean
is uniform, as in the paper (the authors' code weights by sample counts). The inexact prox is
``local_steps`` gradient steps on f_i(z) + ||z - y||^2 / (2 eta), warm-started at x_i^k, as in
the authors' code (proximal-term SGD started from the local model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from oracles.lmo import SCOPES, Constraint
from tasks.errors import ConfigError

Params = list[np.ndarray]


@dataclass
class DRClientState:
    """Client i's FedDR variables: x_i (its model), y_i (DR auxiliary), x_hat_i (what it sends)."""

    x: Params
    y: Params
    x_hat: Params


def feddr_client_init(x0: Params) -> DRClientState:
    """The state before round 0: x_i = y_i = x_hat_i = x^0 (see the module docstring)."""
    return DRClientState(
        x=[np.array(a, dtype=np.float64) for a in x0],
        y=[np.array(a, dtype=np.float64) for a in x0],
        x_hat=[np.array(a, dtype=np.float64) for a in x0],
    )


def feddr_client_step(
    state: DRClientState,
    x_bar: Params,
    grad_fn: Callable[[Params], Params],
    alpha: float,
    eta: float,
    local_steps: int,
    lr: float,
) -> DRClientState:
    """One FedDR client update (step 5 of Algorithm 1); returns a new state, the input is unchanged.

    ``grad_fn(z)`` is grad f_i(z) (full or minibatch). ``alpha`` is the relaxation (FedDR proves
    convergence for alpha in (0, 2)), ``eta`` the prox parameter, ``lr`` the inner step size.
    """
    if not 0.0 < alpha < 2.0:
        raise ConfigError.bound("feddr.alpha", alpha, "in (0, 2)")
    if not eta > 0.0:
        raise ConfigError.bound("feddr.eta", eta, "> 0")
    if isinstance(local_steps, bool) or not isinstance(local_steps, int) or local_steps < 1:
        raise ConfigError.bound("feddr.local-steps", local_steps, "an integer >= 1")
    if not lr > 0.0:
        raise ConfigError.bound("feddr.lr", lr, "> 0")
    y = [yk + alpha * (np.asarray(bk) - xk) for yk, bk, xk in zip(state.y, x_bar, state.x)]
    z = [xk.copy() for xk in state.x]
    for _ in range(local_steps):
        grad = grad_fn(z)
        z = [zk - lr * (np.asarray(gk) + (zk - yk) / eta) for zk, gk, yk in zip(z, grad, y)]
    return DRClientState(x=z, y=y, x_hat=[2.0 * zk - yk for zk, yk in zip(z, y)])


def project_params(constraint: Constraint, params: Params, scope: str = "per-tensor") -> Params:
    """Euclidean projection of a model onto D: a ball per tensor or one over the flat model."""
    if scope not in SCOPES:
        raise ConfigError.choice("fedfw.scope", scope, SCOPES)
    arrays = [np.asarray(a, dtype=np.float64) for a in params]
    if scope == "per-tensor":
        return [constraint.project(a) for a in arrays]
    if constraint.kind == "nuclear":
        raise ConfigError(
            "fedfw.constraint=nuclear needs fedfw.scope=per-tensor (it acts on matrices)"
        )
    flat = constraint.project(np.concatenate([a.ravel() for a in arrays]))
    parts = np.split(flat, np.cumsum([a.size for a in arrays])[:-1])
    return [p.reshape(a.shape) for p, a in zip(parts, arrays)]


def projected_average(
    models: Sequence[Params],
    weights: Sequence[float],
    constraint: Constraint,
    scope: str = "per-tensor",
) -> Params:
    """proj_D(sum_i w_i x_i / sum_i w_i): the server step of the projected-FedAvg baseline."""
    w = np.asarray(weights, dtype=np.float64)
    if len(models) == 0 or w.shape != (len(models),):
        raise ValueError(f"need one weight per model, got {w.shape} for {len(models)} models")
    if np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {w.tolist()}")
    w = w / w.sum()
    mean = [
        sum(wi * np.asarray(m[k], dtype=np.float64) for wi, m in zip(w, models))
        for k in range(len(models[0]))
    ]
    return project_params(constraint, mean, scope)


def feddr_aggregate(
    x_hats: Sequence[Params], constraint: Constraint, scope: str = "per-tensor"
) -> Params:
    """x_bar = proj_D(mean_i x_hat_i) over the last x_hat of *every* client (steps 7-8)."""
    return projected_average(x_hats, [1.0] * len(x_hats), constraint, scope)


class FedDRServer:
    """Keeps the last x_hat_i of every client, so partial participation averages over all n."""

    def __init__(self, x0: Params, client_ids: Sequence[int]) -> None:
        ids = list(client_ids)
        if not ids or len(set(ids)) != len(ids):
            raise ValueError(f"client ids must be non-empty and distinct, got {ids}")
        self._x_hats = {cid: [np.array(a, dtype=np.float64) for a in x0] for cid in ids}

    @classmethod
    def restore(cls, x_hats: Mapping[int, Params]) -> FedDRServer:
        """The server whose ``x_hats()`` were ``x_hats``."""
        return cls(next(iter(x_hats.values())), list(x_hats)).store(x_hats)

    def store(self, x_hats: Mapping[int, Params]) -> FedDRServer:
        """Replace the kept x_hat_i of the given clients (float64 copies)."""
        for cid, x_hat in x_hats.items():
            self._x_hats[cid] = [np.array(a, dtype=np.float64) for a in x_hat]
        return self

    def add(self, client_id: int, x_hat: Params) -> None:
        """A client that joined, its last x_hat_i ``x_hat`` (where it starts)."""
        if client_id in self._x_hats:
            raise KeyError(f"client {client_id} is already kept")
        self._x_hats[client_id] = [np.array(a, dtype=np.float64) for a in x_hat]

    def remove(self, client_id: int) -> None:
        """A client that left: the mean is over the others from now on."""
        if len(self._x_hats) == 1:
            raise ValueError("FedDRServer keeps at least one client")
        del self._x_hats[client_id]

    def x_hats(self) -> dict[int, Params]:
        """Every client's last x_hat_i (copies)."""
        return {cid: self.x_hat_of(cid) for cid in self._x_hats}

    def x_hat_of(self, client_id: int) -> Params:
        """A copy of client ``client_id``'s last x_hat_i (its restart point after a lost state)."""
        return [a.copy() for a in self._x_hats[client_id]]

    def aggregate(
        self, received: Mapping[int, Params], constraint: Constraint, scope: str = "per-tensor"
    ) -> Params:
        """Store the participants' x_hat_i and return x_bar = proj_D(mean over all clients)."""
        unknown = [cid for cid in received if cid not in self._x_hats]
        if unknown:
            raise KeyError(f"unknown client ids {unknown}")
        shapes = [a.shape for a in next(iter(self._x_hats.values()))]
        for cid, x_hat in received.items():
            got = [np.shape(a) for a in x_hat]
            if got != shapes:
                raise ValueError(f"client {cid} sent shapes {got}, expected {shapes}")
        self.store(received)
        return feddr_aggregate(list(self._x_hats.values()), constraint, scope)
