"""An algorithm family, declared once: its algorithms, its key tables, its typed settings and the
messages its strategy sends. Both halves key their registries on the family object
(``strategies.registry``, ``client_app.registry``) and ``run_config.families`` lists them all, so
a family is added by declaring one ``Family`` beside its keys and one line in each registry.

A family groups the algorithms that share a server half, a client half and a settings type
(FFGB, FFGB.C and FFGB.L are one family). ``S`` is its frozen settings dataclass, parsed once
per run on the server and once per node; ``N`` what a node's own node config makes of them
(FedFW: the node's set D_i; FedFun: its learner and hidden widths; ``None`` for a family whose
nodes take the run's settings as they are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from functions.protocol import EVALUATE, QUERY_BOUNDS, QUERY_NODE, TRAIN
from run_config.common import RunSettings
from run_config.keys import Key, require
from run_config.node_keys import NodeKey

S = TypeVar("S")
N = TypeVar("N")  # what a node's own node config makes of the settings

STANDARD_MESSAGES = (TRAIN, EVALUATE, QUERY_NODE)
RELAY_MESSAGES = (*STANDARD_MESSAGES, QUERY_BOUNDS)  # the server relays nodes' bounds (FedFun)

# common keys that only some algorithms read: a torch model's, local SGD's, the sampler's
MODEL = ("model",)
LOCAL_SGD = ("local-epochs", "local-steps", "batch-size", "learning-rate")
SAMPLED = ("fraction-train",)
FUSED_EVALUATION = ("eval-with-train",)  # families whose evaluation can ride on training
SECURE_SUM = ("secure-aggregation", "secure-aggregation.bound")  # servers that need only sums
NODE_DP = ("dp.noise-multiplier", "dp.clipping-norm", "dp.delta")  # client-level DP of updates
ROW_DP = ("dp.noise-multiplier", "dp.delta")  # row-level DP of sums bounded by construction


def require_fusable(eval_with_train: bool, fusable: bool, when: str) -> None:
    """``eval-with-train=false`` is a key with no effect, refused, where the evaluation could
    not ride on training anyway (``fusable`` false; ``when`` says what it takes)."""
    require(
        eval_with_train or fusable,
        "eval-with-train",
        eval_with_train,
        f"true (the default) unless {when}: otherwise every evaluation has its own exchange "
        "already",
    )


@dataclass(frozen=True)
class Table:
    """A key table as docs/configuration.md shows it: a title, who reads it, its keys."""

    title: str
    note: str
    keys: tuple[Key, ...]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of a family: its ``algorithm`` value, a one-line summary, and what it reads
    beyond its family's tables and common keys (FedProx's ``fedprox.mu``, projected FedAvg's
    constraint set)."""

    name: str
    summary: str
    reads: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()


def _no_overrides(settings: Any, node_config: Mapping[str, Any]) -> None:
    return None


@dataclass(frozen=True, eq=False)
class Family(Generic[S, N]):
    """One algorithm family (see the module docstring); hashed by identity, so registries key
    on the object itself.

    ``parse`` builds the settings from the family's tables only (ConfigError names the first
    bad key); ``reads`` are the common keys every one of its algorithms reads among those only
    some read (``MODEL``, ``LOCAL_SGD``, ``SAMPLED``, ...); ``steps`` the keys of its step sizes,
    which a diverged run names; ``node_keys`` the node-config keys its nodes may set, which
    ``node_overrides`` turns into the node's own values.
    """

    name: str
    algorithms: tuple[Algorithm, ...]
    parse: Callable[[RunSettings], S]
    tables: tuple[Table, ...] = ()
    reads: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    message_types: tuple[str, ...] = STANDARD_MESSAGES
    node_keys: tuple[NodeKey, ...] = ()
    node_overrides: Callable[[S, Mapping[str, Any]], N] = _no_overrides

    @property
    def names(self) -> tuple[str, ...]:
        """Its algorithms' ``algorithm`` values."""
        return tuple(a.name for a in self.algorithms)

    def algorithm(self, name: str) -> Algorithm:
        """The algorithm called ``name`` (KeyError if it is not one of this family's)."""
        for algorithm in self.algorithms:
            if algorithm.name == name:
                return algorithm
        raise KeyError(name)

    def tables_of(self, name: str) -> tuple[Table, ...]:
        """The key tables algorithm ``name`` reads beyond the common keys."""
        extra = self.algorithm(name).tables
        return (*extra, *(t for t in self.tables if t not in extra))

    def reads_of(self, name: str) -> tuple[str, ...]:
        """The scoped common keys algorithm ``name`` reads."""
        return (*self.reads, *self.algorithm(name).reads)
