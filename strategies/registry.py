"""The one place that maps an ``algorithm`` name to its server and client halves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flwr.serverapp.strategy import Strategy

from oracles import fedavg_client
from oracles.job import ClientProcedure
from strategies.baselines import build_fedavg, build_fedprox
from strategies.build import BuildContext
from tasks.errors import ConfigError


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: a strategy factory plus the client procedures it drives."""

    name: str
    family: str
    summary: str
    build_strategy: Callable[[BuildContext], Strategy]
    client_train: ClientProcedure
    client_evaluate: ClientProcedure


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("fedavg", "baseline", "FedAvg (Flower's strategy), local SGD",
                  build_fedavg, fedavg_client.train, fedavg_client.evaluate),
        Algorithm("fedprox", "baseline", "FedProx (Flower's strategy), proximal local SGD",
                  build_fedprox, fedavg_client.train, fedavg_client.evaluate),
    )
}


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm, or a ConfigError naming the allowed values."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError.choice("algorithm", name, ALGORITHMS) from None
