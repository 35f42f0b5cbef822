"""Bounding FFGB's ensemble by knowledge distillation (section 5 of the FFGB paper).

A plain round adds N K learners to the global ensemble. Distillation replaces functions by one
learner fitted (least squares, the WO2 oracle) to their values on unlabelled points:

- ``increment`` (client side): the node replaces its K new learners sum_k w_k v_k by one learner
  d fitted to their weighted mean (sum_k w_k v_k) / W on its points, W = sum_k w_k, and sends d
  with weight W and the round's scale: the ensemble grows by one learner per node and round, and
  f^t itself is untouched. All w_k have one sign (descent steps: negative; FFGB.L: positive), so
  the weighted mean is a convex combination of the v_k and stays within FFGB.C's bound G2.
- ``function`` (client side, the paper's own proposal: "the final ensemble size is reduced to
  N"): the node replaces its whole g^{K+1} = scale f^t + sum_k w_k v_k by one learner fitted to
  g on its points, sent with scale 0 (it replaces f^t) and weight 1. Under heterogeneity d only
  matches f^t on the node's own points, which is what this mode gives up.
- global rounds (server side, ``distillation_round``): a single student network trained by
  FedAvg to mimic f^t on every node's points ("interleaving distillation rounds ... via
  FedAvg"), which then replaces the whole ensemble.

Plain functions on values and a fit callable: no Flower, no run config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
from torch import nn

from oracles.boosting import Fitted, Increment

NONE, INCREMENT, FUNCTION = "none", "increment", "function"
MODES = (NONE, INCREMENT, FUNCTION)


def distilled_coefficients(
    mode: str, scale: float, weights: Sequence[float]
) -> tuple[float, list[float]]:
    """(scale, [weight]) of the one learner a node sends in ``mode`` (client and server compute
    them with this code, so the server checks a reply exactly)."""
    if mode == INCREMENT:
        return scale, [math.fsum(weights)]
    if mode == FUNCTION:
        return 0.0, [1.0]
    raise ValueError(f"no distilled coefficients for mode {mode!r}")


def distill_increment(
    increment: Increment, f: np.ndarray, mode: str, fit: Callable[[np.ndarray], Fitted]
) -> tuple[Increment, float]:
    """The node's increment with its learners distilled into one (``mode`` as above), and the
    RMS distillation error on its points. ``f`` = f^t's values on the points, ``fit`` the
    oracle (target values (n, c) -> learner and its values)."""
    scale, weights = distilled_coefficients(mode, increment.scale, increment.weights)
    if mode == INCREMENT:
        target = increment.own_values / weights[0]
    else:
        target = increment.scale * np.asarray(f, dtype=np.float64) + increment.own_values
    fitted = fit(target)
    error = float(np.sqrt(np.mean((target - fitted.values) ** 2))) if target.size else 0.0
    distilled = replace(
        increment,
        learners=[fitted.learner],
        weights=weights,
        scale=scale,
        own_values=weights[0] * fitted.values,
    )
    return distilled, error


def average_networks(
    networks: Sequence[nn.Module], fractions: Sequence[float], into: nn.Module
) -> nn.Module:
    """FedAvg of same-architecture networks: ``into`` gets sum_i fractions[i] * parameters_i
    (summed in float64, stored in ``into``'s dtype), as a distillation round's server step."""
    states = [network.state_dict() for network in networks]
    averaged = {}
    for name, tensor in into.state_dict().items():
        total = sum(p * state[name].double() for p, state in zip(fractions, states))
        averaged[name] = total.to(tensor.dtype)
    into.load_state_dict(averaged)
    into.eval()
    return into
