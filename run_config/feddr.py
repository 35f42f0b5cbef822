"""The ``feddr.*`` run-config table, and the constraint set D shared by the projection baselines.

FedDR and projected FedAvg solve the same problem as FedFW, min_{x in D} F(x), so D comes from the
``fedfw.constraint``, ``fedfw.radius`` and ``fedfw.scope`` keys: one run config compares like
with like across the three algorithms.
"""

from __future__ import annotations

from dataclasses import dataclass

from run_config.common import RunSettings
from run_config.family import (
    FUSED_EVALUATION,
    MODEL,
    SECURE_SUM,
    Algorithm,
    Family,
    Table,
    require_fusable,
)
from run_config.fedfw import DOMAIN, ConstraintSet, constraint_set
from run_config.keys import Key, at_least, build, finite_above, read_keys, within

FEDDR_KEYS = (
    Key("feddr.alpha", float, 1.0, "FedDR relaxation α, in (0, 2)", within(0, 2, "()")),
    Key(
        "feddr.eta", float, 1.0, "FedDR proximal parameter η of prox_{η f_i}, > 0", finite_above(0)
    ),
    Key("feddr.local-steps", int, 5, "gradient steps of the inexact prox per round", at_least(1)),
    Key("feddr.lr", float, 0.1, "step size of those gradient steps", finite_above(0)),
    Key(
        "feddr.batch-size",
        int,
        0,
        "minibatch of those steps; 0 = full local batch",
        at_least(0, "(0 = full batch)"),
    ),
    Key(
        "feddr.participation",
        float,
        1.0,
        "fraction of nodes sampled per round (at least one), seeded, in partition order",
        within(0, 1, "(]"),
    ),
    Key(
        "feddr.federated-eval",
        bool,
        True,
        "evaluate F(x̄) on all clients' training data each round (`train_loss`)",
    ),
)


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
    eval_with_train: bool = True  # round t's evaluation rides on round t + 1's train messages


def feddr_settings(settings: RunSettings) -> FedDRSettings:
    """Parse D and ``FEDDR_KEYS``; ConfigError names the key. ``eval-with-train=false`` is
    refused where it has no effect (no federated evaluation, or nodes sampled)."""
    domain = constraint_set(settings)
    out = build(
        FedDRSettings,
        read_keys(settings.raw, FEDDR_KEYS),
        FEDDR_KEYS,
        domain=domain,
        eval_with_train=settings.eval_with_train,
    )
    require_fusable(
        out.eval_with_train,
        out.federated_eval and out.participation >= 1,
        "feddr.federated-eval is true and feddr.participation is 1",
    )
    return out


FEDDR_TABLE = Table("`feddr.*`", "FedDR", FEDDR_KEYS)

FEDDR: Family[FedDRSettings, None] = Family(
    "feddr",
    (Algorithm("feddr", "FedDR, Douglas-Rachford splitting, x-bar projected onto D"),),
    feddr_settings,
    tables=(DOMAIN, FEDDR_TABLE),
    reads=(*MODEL, *FUSED_EVALUATION, *SECURE_SUM),
    steps=("feddr.lr", "feddr.eta"),
)
