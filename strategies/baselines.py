"""FedAvg and FedProx: Flower's own strategies, configured from the run settings."""

from __future__ import annotations

from flwr.serverapp.strategy import FedAvg, FedProx, Strategy

from strategies.build import BuildContext
from strategies.federated_metrics import aggregate_evaluation_sums


def fedavg_options(ctx: BuildContext) -> dict:
    federated_eval = not ctx.settings.central_evaluation
    return {
        "fraction_train": ctx.settings.fraction_train,
        "fraction_evaluate": 1.0 if federated_eval else 0.0,
        "min_train_nodes": 1,
        "min_evaluate_nodes": 1,
        "min_available_nodes": ctx.min_nodes,
        "evaluate_metrics_aggr_fn": aggregate_evaluation_sums,
    }


def build_fedavg(ctx: BuildContext) -> Strategy:
    """McMahan et al.'s FedAvg: sample-weighted average of locally trained models."""
    return FedAvg(**fedavg_options(ctx))


def build_fedprox(ctx: BuildContext) -> Strategy:
    """Li et al.'s FedProx: FedAvg whose clients add (mu/2)||w - w_global||^2."""
    return FedProx(proximal_mu=ctx.settings.fedprox_mu, **fedavg_options(ctx))
