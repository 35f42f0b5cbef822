"""The client half of every algorithm: which procedure answers each message type.

The server half registers under the same names in ``strategies.registry``; a test checks that
both sides name the same algorithms and message types. Nothing here imports the server half.
"""

from __future__ import annotations

from collections.abc import Mapping

from client_app import fedavg, feddr, fedfun, fedfw, ffgb
from client_app.job import ClientProcedure
from tasks.errors import ConfigError

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
    **{name: fedfun.HANDLERS for name in ("fedfun", "psr", "dfedavgm", "dfedfish", "dfeddf")},
}


def client_half(name: str) -> Mapping[str, ClientProcedure]:
    """The handlers of ``name``, or a ConfigError naming the allowed values."""
    try:
        return CLIENT_HALVES[name]
    except KeyError:
        raise ConfigError.choice("algorithm", name, CLIENT_HALVES) from None


def message_types() -> tuple[str, ...]:
    """Every message type some algorithm handles ("train", "query.node", ...)."""
    return tuple(sorted({t for handlers in CLIENT_HALVES.values() for t in handlers}))
