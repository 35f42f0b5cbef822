"""The acceptance state a stateful family's train message carries in its config, written and
read by one pair of functions so both halves agree on what a missing key means.

``last-accepted`` (the last round whose step the server accepted from the node) is left out when
it is the round before the message's, and ``sync`` (where a node without state restarts) when it
is ``none``: a steady round's message carries neither (``strategies.node_book`` writes them,
``client_app.node_state`` reads them).
"""

from __future__ import annotations

from collections.abc import Mapping

from functions.protocol import LAST_ACCEPTED, SERVER_ROUND, SYNC, SYNC_NONE


def acceptance_config(server_round: int, last_accepted: int, sync: str = SYNC_NONE) -> dict:
    """The config entries of a round-``server_round`` train message, usual values left out."""
    config: dict[str, int | str] = {SERVER_ROUND: server_round}
    if last_accepted != server_round - 1:
        config[LAST_ACCEPTED] = last_accepted
    if sync != SYNC_NONE:
        config[SYNC] = sync
    return config


def last_accepted(config: Mapping[str, object]) -> int:
    """The last round whose step the server accepted from this node."""
    return int(config.get(LAST_ACCEPTED, int(config[SERVER_ROUND]) - 1))


def sync_value(config: Mapping[str, object]) -> str:
    """Where a node without state restarts: ``none``, ``xbar`` or a record key."""
    return str(config.get(SYNC, SYNC_NONE))
