"""The ``feddr.*`` run-config table, and the constraint set D shared by the projection baselines.

FedDR and projected FedAvg solve the same problem as FedFW, min_{x in D} F(x), so D comes from the
``fedfw.constraint``, ``fedfw.radius`` and ``fedfw.scope`` keys: one run config compares like
with like across the three algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass

from run_config.common import RunSettings, read_key, require
from run_config.fedfw import ConstraintSet, constraint_set


@dataclass(frozen=True)
class FedDRSettings:
    """Everything FedDR reads from the run config (Algorithm 1 of Tran-Dinh et al. 2021)."""

    domain: ConstraintSet
    alpha: float
    eta: float
    local_steps: int
    lr: float
    batch_size: int
    participation: float
    federated_eval: bool


def feddr_settings(settings: RunSettings) -> FedDRSettings:
    """Parse ``feddr.*`` and D; ConfigError names the key."""
    raw = settings.raw
    out = FedDRSettings(
        domain=constraint_set(settings),
        alpha=read_key(raw, "feddr.alpha", float, 1.0),
        eta=read_key(raw, "feddr.eta", float, 1.0),
        local_steps=read_key(raw, "feddr.local-steps", int, 5),
        lr=read_key(raw, "feddr.lr", float, 0.1),
        batch_size=read_key(raw, "feddr.batch-size", int, 0),
        participation=read_key(raw, "feddr.participation", float, 1.0),
        federated_eval=read_key(raw, "feddr.federated-eval", bool, True),
    )
    require(0.0 < out.alpha < 2.0, "feddr.alpha", out.alpha, "in (0, 2)")
    require(0.0 < out.eta < float("inf"), "feddr.eta", out.eta, "finite and > 0")
    require(out.local_steps >= 1, "feddr.local-steps", out.local_steps, ">= 1")
    require(0.0 < out.lr < float("inf"), "feddr.lr", out.lr, "finite and > 0")
    require(out.batch_size >= 0, "feddr.batch-size", out.batch_size, ">= 0 (0 = full batch)")
    require(0.0 < out.participation <= 1.0, "feddr.participation", out.participation, "in (0, 1]")
    return out
