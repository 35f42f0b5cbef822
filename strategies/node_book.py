"""Server-side bookkeeping for algorithms whose nodes keep state between rounds (FedFW, FedDR).

Fixes the client set at the first round, tells each node whether its last step was accepted
(``last-accepted``), re-sends a node's restart point after a failure or on first contact
(``sync``), and screens replies: an error reply marks the node for re-sync, a reply that
fails decoding is dropped, logged with node id and reason, and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log

from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record
from oracles.pending_state import SYNC_FROM_XBAR, SYNC_NONE


class NodeBook:
    """Which node has which accepted round, and who needs its restart point re-sent."""

    def __init__(self, node_ids: Iterable[int], label: str, layout: ParamLayout,
                 point_key: str) -> None:
        """``node_ids`` in a fixed order: sampling and aggregation follow it."""
        self.node_ids = list(node_ids)
        self.label, self.layout, self.point_key = label, layout, point_key
        self.last_accepted = {n: 0 for n in self.node_ids}
        self.needs_sync = {n: True for n in self.node_ids}

    def train_message(self, node: int, server_round: int, xbar: Params, xbar_wire: ArrayRecord,
                      restart: Callable[[int], Params], **config: int | float | str) -> Message:
        """A train message carrying x-bar, acceptance and, if needed, the node's restart point.

        When the restart point equals x-bar as sent (float32), only ``sync="xbar"`` travels.
        """
        content = RecordDict({"xbar": xbar_wire})
        sync = SYNC_NONE
        if self.needs_sync[node]:
            point = restart(node)
            sent = [np.asarray(p, np.float32).astype(np.float64) for p in xbar]
            if all(np.array_equal(a, b) for a, b in zip(point, sent)):
                sync = SYNC_FROM_XBAR
            else:
                sync = self.point_key
                content[self.point_key] = params_to_record(self.layout, point, dtype=np.float64)
        content["config"] = ConfigRecord({"server-round": server_round,
                                          "last-accepted": self.last_accepted[node],
                                          "sync": sync, **config})
        return Message(content, node, "train", group_id=str(server_round))

    def screen(self, server_round: int, replies: Iterable[Message],
               decode: Callable[[int, Message], Params]) -> tuple[dict[int, Params], int]:
        """Decoded points of the good replies, and how many replies failed decoding.

        Error replies are counted as failures by the metered grid, not here.
        """
        points: dict[int, Params] = {}
        rejected = 0
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                if node in self.needs_sync:
                    self.needs_sync[node] = True
                log(WARNING, "%s round %d: node %s failed: %s", self.label, server_round, node,
                    reply.error.reason)
                continue
            if node in self.needs_sync:
                self.needs_sync[node] = False  # it answered, so it holds state
            try:
                if node not in self.last_accepted:
                    raise DecodeError("reply from a node outside the federation")
                points[node] = decode(node, reply)
            except DecodeError as err:
                rejected += 1
                log(WARNING, "%s round %d: dropped the reply of node %s: %s", self.label,
                    server_round, node, err)
        ordered = {n: points[n] for n in self.node_ids if n in points}  # reply order varies
        return ordered, rejected

    def accept(self, server_round: int, nodes: Iterable[int]) -> None:
        """Record that the steps of ``nodes`` in ``server_round`` entered the aggregate."""
        for node in nodes:
            self.last_accepted[node] = server_round
            self.needs_sync[node] = False

    def evaluate_messages(self, server_round: int, xbar: Params, **config: int | float | str | bool
                          ) -> list[Message]:
        """x-bar to every node for federated evaluation."""
        content = RecordDict({"xbar": params_to_record(self.layout, xbar),
                              "config": ConfigRecord({"server-round": server_round, **config})})
        return [Message(content, node, "evaluate", group_id=str(server_round))
                for node in self.node_ids]
