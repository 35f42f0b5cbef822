"""The one place that maps an ``algorithm`` name to its server and client halves."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flwr.serverapp.strategy import Strategy

from oracles import consensus_eval, fedavg_client, feddr_client, fedfw_client
from oracles.job import ClientProcedure
from strategies.baselines import build_fedavg, build_fedprox
from strategies.build import BuildContext
from strategies.feddr import build_feddr
from strategies.fedfw import build_fedfw
from strategies.projected_fedavg import build_projected_fedavg
from tasks.errors import ConfigError


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: a strategy factory plus the client procedure of each message type.

    ``handlers`` maps a Flower message type ("train", "evaluate", "query.bounds", ...) to
    the client procedure that answers it.
    """

    name: str
    family: str
    summary: str
    build_strategy: Callable[[BuildContext], Strategy]
    handlers: Mapping[str, ClientProcedure]


_SGD = {"train": fedavg_client.train, "evaluate": fedavg_client.evaluate}
_FW = {"train": fedfw_client.train, "evaluate": fedfw_client.evaluate,
       "query.bounds": fedfw_client.bounds}
_DR = {"train": feddr_client.train, "evaluate": consensus_eval.evaluate_xbar}

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("fedavg", "baseline", "FedAvg (Flower's strategy), local SGD", build_fedavg, _SGD),
        Algorithm("fedprox", "baseline", "FedProx (Flower's strategy), proximal local SGD",
                  build_fedprox, _SGD),
        Algorithm("fedfw", "fedfw", "Federated Frank-Wolfe, quadratic penalty", build_fedfw, _FW),
        Algorithm("fedfw-plus", "fedfw", "FedFW+, augmented Lagrangian", build_fedfw, _FW),
        Algorithm("fedfw-sto", "fedfw", "FedFW-sto, averaged minibatch gradients", build_fedfw, _FW),
        Algorithm("feddr", "baseline", "FedDR, Douglas-Rachford splitting, x-bar projected onto D",
                  build_feddr, _DR),
        Algorithm("fedavg-proj", "baseline", "FedAvg whose average is projected onto D",
                  build_projected_fedavg, _SGD),
    )
}

MESSAGE_TYPES: tuple[str, ...] = tuple(sorted({t for a in ALGORITHMS.values() for t in a.handlers}))


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm, or a ConfigError naming the allowed values."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ConfigError.choice("algorithm", name, ALGORITHMS) from None
