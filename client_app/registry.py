"""The client half of every algorithm: which procedure answers each message type.

The server half registers under the same names in ``strategies.registry``; a test checks that
both sides name the same algorithms and message types. Nothing here imports the server half.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from client_app import fedavg, feddr, fedfun, fedfw, fedxgb, ffgb
from client_app.job import ClientProcedure
from tasks.errors import ConfigError

FEDFUN_NAMES = ("fedfun", "psr", "dfedavgm", "dfedfish", "dfeddf")

CLIENT_HALVES: dict[str, Mapping[str, ClientProcedure]] = {
    "fedavg": fedavg.HANDLERS,
    "fedprox": fedavg.HANDLERS,
    "fedavg-proj": fedavg.HANDLERS,
    "fedfw": fedfw.HANDLERS,
    "fedfw-plus": fedfw.HANDLERS,
    "fedfw-sto": fedfw.HANDLERS,
    "feddr": feddr.HANDLERS,
    "ffgb": ffgb.HANDLERS,
    "ffgb-c": ffgb.HANDLERS,
    "ffgb-l": ffgb.HANDLERS,
    **{name: fedfun.HANDLERS for name in FEDFUN_NAMES},
    "fedxgb-bagging": fedxgb.HANDLERS,
    "fedxgb-cyclic": fedxgb.HANDLERS,
}

# A family whose node may override the run's settings from its node config: (the family
# settings, the node config) -> the node's own values, built once per run and node
# (``client_app.setup``) and read by its procedures as ``job.overrides``.
NODE_OVERRIDES: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {
    **{name: fedfw.node_overrides for name in ("fedfw", "fedfw-plus", "fedfw-sto")},
    **{name: fedfun.node_overrides for name in FEDFUN_NAMES},
}


def client_half(name: str) -> Mapping[str, ClientProcedure]:
    """The handlers of ``name``, or a ConfigError naming the allowed values."""
    try:
        return CLIENT_HALVES[name]
    except KeyError:
        raise ConfigError.choice("algorithm", name, CLIENT_HALVES) from None


def node_overrides(name: str) -> Callable[[Any, Mapping[str, Any]], Any] | None:
    """The node-config overrides hook of ``name``'s family, if it has one."""
    return NODE_OVERRIDES.get(name)


def message_types() -> tuple[str, ...]:
    """Every message type some algorithm handles ("train", "query.node", ...)."""
    return tuple(sorted({t for handlers in CLIENT_HALVES.values() for t in handlers}))
