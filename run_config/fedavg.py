"""The FedAvg family: FedAvg, FedProx and projected FedAvg, Flower's strategies with local SGD.

They read the common keys of a torch model, local SGD, node sampling and ``eval-with-train``
(FedProx also ``fedprox.mu``); projected FedAvg also the constraint set D of the ``fedfw.*``
keys, its only settings.
"""

from __future__ import annotations

from run_config.common import RunSettings
from run_config.family import (
    FUSED_EVALUATION,
    LOCAL_SGD,
    MODEL,
    NODE_DP,
    SAMPLED,
    SECURE_SUM,
    Algorithm,
    Family,
    require_fusable,
)
from run_config.fedfw import DOMAIN, ConstraintSet, constraint_set

PROJECTED = "fedavg-proj"


def fedavg_settings(settings: RunSettings) -> ConstraintSet | None:
    """Projected FedAvg's constraint set D; None for FedAvg and FedProx, which read no table.
    ``eval-with-train=false`` is refused where it has no effect (nodes sampled)."""
    require_fusable(settings.eval_with_train, settings.fraction_train >= 1, "fraction-train is 1")
    return constraint_set(settings) if settings.algorithm == PROJECTED else None


FEDAVG: Family[ConstraintSet | None, None] = Family(
    "fedavg",
    (
        Algorithm("fedavg", "FedAvg (Flower's strategy), local SGD"),
        Algorithm("fedprox", "FedProx, proximal local SGD", ("fedprox.mu",)),
        Algorithm(PROJECTED, "FedAvg whose average is projected onto D", tables=(DOMAIN,)),
    ),
    fedavg_settings,
    reads=(*MODEL, *LOCAL_SGD, *SAMPLED, *FUSED_EVALUATION, *SECURE_SUM, *NODE_DP),
    steps=("learning-rate",),
)
