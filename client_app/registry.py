"""The client half of every algorithm family: which procedure answers each message type, keyed
by the family object (``run_config.family``).

The server half registers its strategy builder under the same object in
``strategies.registry``; a test checks that both sides name the same families and that each
family's handlers answer every message type it declares. Nothing here imports the server half.
"""

from __future__ import annotations

from collections.abc import Mapping

from client_app import fedavg, feddr, fedfun, fedfw, fedxgb, fedxgb_hist, ffgb
from client_app.job import ClientProcedure
from run_config.families import family_of
from run_config.family import Family
from run_config.fedavg import FEDAVG
from run_config.feddr import FEDDR
from run_config.fedfun import FEDFUN
from run_config.fedfw import FEDFW
from run_config.fedxgb import FEDXGB
from run_config.fedxgb_hist import FEDXGB_HIST
from run_config.ffgb import FFGB
from tasks.errors import ConfigError

CLIENT_HALVES: dict[Family, Mapping[str, ClientProcedure]] = {
    FEDAVG: fedavg.HANDLERS,
    FEDFW: fedfw.HANDLERS,
    FEDDR: feddr.HANDLERS,
    FFGB: ffgb.HANDLERS,
    FEDFUN: fedfun.HANDLERS,
    FEDXGB: fedxgb.HANDLERS,
    FEDXGB_HIST: fedxgb_hist.HANDLERS,
}


def handlers_for(algorithm: str) -> Mapping[str, ClientProcedure]:
    """The handlers of ``algorithm``'s family; ConfigError for an unknown algorithm or a family
    without a client half."""
    family = family_of(algorithm)
    handlers = CLIENT_HALVES.get(family)
    if handlers is None:
        raise ConfigError(f"algorithm={algorithm!r}: family {family.name!r} has no client half")
    return handlers


def message_types() -> tuple[str, ...]:
    """Every message type some family handles ("train", "query.node", ...)."""
    return tuple(sorted({t for handlers in CLIENT_HALVES.values() for t in handlers}))
