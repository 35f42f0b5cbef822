"""The server half of every algorithm: a strategy factory and the message types it sends.

The client half registers under the same names in ``client_app.registry``; a test checks that
both sides name the same algorithms and message types. Nothing here imports the client half.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from functions.protocol import EVALUATE, QUERY_BOUNDS, QUERY_NODE, TRAIN
from run_config.common import RunSettings
from strategies.base import FederatedStrategy
from strategies.fedavg import build_fedavg, build_fedprox, build_projected_fedavg
from strategies.feddr import build_feddr
from strategies.fedfun import build_fedfun
from strategies.fedfw import build_fedfw
from strategies.fedxgb import build_fedxgb
from strategies.ffgb import build_ffgb
from tasks.datasets import TaskData
from tasks.errors import ConfigError
from tasks.federation import task_for

STANDARD_MESSAGES = (TRAIN, EVALUATE, QUERY_NODE)
RELAY_MESSAGES = (*STANDARD_MESSAGES, QUERY_BOUNDS)


@dataclass(frozen=True)
class ServerAlgorithm:
    """A registered algorithm's server half.

    ``build`` parses the algorithm's run-config keys (``run_config``) and returns its strategy
    for the task (bundled, or agreed with the sites); it raises ConfigError before any node
    trains. ``message_types`` are those its strategy
    sends, each of which the client half must answer.
    """

    name: str
    summary: str
    build: Callable[[RunSettings, TaskData], FederatedStrategy]
    message_types: tuple[str, ...] = STANDARD_MESSAGES

    def strategy(self, settings: RunSettings, task: TaskData | None = None) -> FederatedStrategy:
        """The strategy for ``task``, by default the run's bundled task."""
        return self.build(settings, task_for(settings.data) if task is None else task)


ALGORITHMS: dict[str, ServerAlgorithm] = {
    a.name: a
    for a in (
        ServerAlgorithm("fedavg", "FedAvg (Flower's strategy), local SGD", build_fedavg),
        ServerAlgorithm("fedprox", "FedProx, proximal local SGD", build_fedprox),
        ServerAlgorithm("fedfw", "Federated Frank-Wolfe, quadratic penalty", build_fedfw),
        ServerAlgorithm("fedfw-plus", "FedFW+, augmented Lagrangian", build_fedfw),
        ServerAlgorithm("fedfw-sto", "FedFW-sto, averaged minibatch gradients", build_fedfw),
        ServerAlgorithm(
            "feddr", "FedDR, Douglas-Rachford splitting, x-bar projected onto D", build_feddr
        ),
        ServerAlgorithm(
            "fedavg-proj", "FedAvg whose average is projected onto D", build_projected_fedavg
        ),
        ServerAlgorithm(
            "ffgb", "Federated functional gradient boosting with residuals", build_ffgb
        ),
        ServerAlgorithm("ffgb-c", "FFGB.C, clipped learners and residuals", build_ffgb),
        ServerAlgorithm(
            "ffgb-l", "FFGB.L, square loss, Lipschitz extension, Sobolev oracle", build_ffgb
        ),
        ServerAlgorithm(
            "fedfun",
            "FedFun: function-space regularisation on a graph (FSR)",
            build_fedfun,
            RELAY_MESSAGES,
        ),
        ServerAlgorithm(
            "psr",
            "PSR: parameter-space regularisation (synchronous DJAM)",
            build_fedfun,
            RELAY_MESSAGES,
        ),
        ServerAlgorithm(
            "dfedavgm",
            "DFedAvgM: neighbour averaging, local momentum SGD",
            build_fedfun,
            RELAY_MESSAGES,
        ),
        ServerAlgorithm(
            "dfedfish",
            "DFedFish: Fisher-weighted neighbour averaging",
            build_fedfun,
            RELAY_MESSAGES,
        ),
        ServerAlgorithm(
            "dfeddf",
            "DFedDF: neighbours' ensemble distilled on sampled inputs",
            build_fedfun,
            RELAY_MESSAGES,
        ),
        ServerAlgorithm(
            "fedxgb-bagging",
            "XGBoost, Flower's FedXgbBagging: nodes' new trees appended",
            build_fedxgb,
        ),
        ServerAlgorithm(
            "fedxgb-cyclic", "XGBoost, Flower's FedXgbCyclic: nodes boost in turn", build_fedxgb
        ),
    )
}


def get_algorithm(name: str) -> ServerAlgorithm:
    """The registered algorithm, or a ConfigError naming the allowed values."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError.choice("algorithm", name, ALGORITHMS) from None
