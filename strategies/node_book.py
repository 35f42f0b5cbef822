"""Server-side bookkeeping for algorithms whose nodes keep state between rounds.

Tells each node whether its last step was accepted (``last-accepted``), asks the strategy for a
node's restart records after a failure or on first contact (``sync``), and screens replies: an
error reply marks the node for re-sync, a reply that fails decoding is dropped and counted
(``strategies.screening``). What a message carries is the strategy's: a point, an ensemble delta,
a set of neighbours' models, different for every node if need be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from functions.params import ParamLayout, Params, params_to_record
from functions.protocol import (
    CONFIG,
    EVALUATE,
    LAST_ACCEPTED,
    SERVER_ROUND,
    SYNC,
    SYNC_FROM_XBAR,
    SYNC_NONE,
    TRAIN,
)
from strategies.roster import moved, rekeyed
from strategies.screening import screen_replies

T = TypeVar("T")
Restart = Callable[[int], tuple[str, Mapping[str, ArrayRecord | ConfigRecord]]]


class NodeBook:
    """Which node has which accepted round, and who needs its restart records re-sent."""

    def __init__(self, node_ids: Iterable[int], label: str) -> None:
        """``node_ids`` in a fixed order: sampling and aggregation follow it."""
        self.node_ids = list(node_ids)
        self.label = label
        self.last_accepted = {n: 0 for n in self.node_ids}
        self.needs_sync = {n: True for n in self.node_ids}

    def train_message(self, node: int, server_round: int, content: Mapping[str, object],
                      restart: Restart, **config: int | float | str | bool) -> Message:
        """A train message with ``content`` (this node's own), its acceptance state and, when the
        node may have no state, the restart records ``restart(node)`` gives with their sync value."""
        records = RecordDict(dict(content))
        sync = SYNC_NONE
        if self.needs_sync[node]:
            sync, extra = restart(node)
            for key, record in extra.items():
                records[key] = record
        records[CONFIG] = ConfigRecord({SERVER_ROUND: server_round,
                                        LAST_ACCEPTED: self.last_accepted[node],
                                        SYNC: sync, **config})
        return Message(records, node, TRAIN, group_id=str(server_round))

    def screen(self, server_round: int, replies: Iterable[Message],
               decode: Callable[[Message], T]) -> tuple[dict[int, T], int]:
        """Decoded good replies in node order, and how many replies failed decoding.

        Error replies are counted as failures by the metered grid, not here; their nodes may have
        lost their state, so they are re-synced. A node that answered, even with a reply that is
        dropped, holds state (its committed step).
        """
        screened = screen_replies(self.label, server_round, replies, decode, self.last_accepted)
        for nodes, lost in ((screened.errors, True), ([*screened.accepted, *screened.dropped], False)):
            for node in nodes:
                if node in self.needs_sync:
                    self.needs_sync[node] = lost
        return screened.in_order(self.node_ids), screened.rejected

    def accept(self, server_round: int, nodes: Iterable[int]) -> None:
        """Record that the steps of ``nodes`` in ``server_round`` entered the aggregate."""
        for node in nodes:
            self.last_accepted[node] = server_round
            self.needs_sync[node] = False

    def rebind(self, old: int, new: int) -> None:
        """``new`` takes ``old``'s place (a restarted SuperNode of the same partition): same
        position and last accepted round; it holds nothing, so it gets its restart records."""
        self.node_ids = moved(self.node_ids, old, new)
        self.last_accepted = rekeyed(self.last_accepted, old, new)
        self.needs_sync = rekeyed(self.needs_sync, old, new)
        self.needs_sync[new] = True

    def evaluate_messages(self, server_round: int, content: Mapping[str, object],
                          **config: int | float | str | bool) -> list[Message]:
        """The same ``content`` to every node for federated evaluation."""
        return [self.evaluate_message(node, server_round, content, **config)
                for node in self.node_ids]

    @staticmethod
    def evaluate_message(node: int, server_round: int, content: Mapping[str, object],
                         **config: int | float | str | bool) -> Message:
        """An evaluation message with ``content`` for one node."""
        records = RecordDict({**content,
                              CONFIG: ConfigRecord({SERVER_ROUND: server_round, **config})})
        return Message(records, node, EVALUATE, group_id=str(server_round))

    def to_record(self) -> ConfigRecord:
        """Order, last accepted round and sync flag of every node."""
        return ConfigRecord({
            "node-ids": [str(n) for n in self.node_ids],
            "last-accepted": [self.last_accepted[n] for n in self.node_ids],
            "needs-sync": [self.needs_sync[n] for n in self.node_ids],
        })

    @classmethod
    def from_record(cls, record: ConfigRecord, label: str) -> NodeBook:
        book = cls([int(n) for n in record["node-ids"]], label)
        book.last_accepted = dict(zip(book.node_ids, record["last-accepted"]))
        book.needs_sync = dict(zip(book.node_ids, record["needs-sync"]))
        return book


def dense_restart(layout: ParamLayout, xbar: Params, point: Params, key: str
                  ) -> tuple[str, dict[str, ArrayRecord]]:
    """Sync a node to ``point``: by reference when it equals x-bar as sent (float32), else sent
    under ``key`` in float64 (FedFW's x_i, FedDR's x_hat_i)."""
    sent = [np.asarray(p, np.float32).astype(np.float64) for p in xbar]
    if all(np.array_equal(a, b) for a, b in zip(point, sent)):
        return SYNC_FROM_XBAR, {}
    return key, {key: params_to_record(layout, point, dtype=np.float64)}
