"""A Grid wrapper that counts the payload bytes and failed replies of every exchange."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.superlink.grid.http_grid import HttpGrid

from functions.records import payload_bytes, wire_bytes
from server_app.grid_wrapper import GridWrapper


@dataclass
class TrafficCounters:
    """Totals since the last ``take()``."""

    bytes_down: int = 0
    bytes_up: int = 0
    bytes_down_train: int = 0
    bytes_up_train: int = 0
    wire_bytes_down: int = 0
    wire_bytes_up: int = 0
    failures: int = 0
    exchanges: int = 0
    exchange_seconds: float = 0.0  # waiting in exchanges: the nodes' work and the transport


def own_pull_interval(grid: Grid, interval: float) -> float | None:
    """``interval`` for Flower's deployment grid, which sleeps a fixed 3 s between pulls; None
    (the grid's own ``send_and_receive``) for the simulation engine's, which pulls every 0.1 s,
    and for the in-process test grids."""
    return interval if isinstance(grid, HttpGrid) else None


def _is_train(message: Message) -> bool:
    return message.metadata.message_type.split(".")[0] == "train"


class MeteredGrid(GridWrapper):
    """Delegates to a real Grid and meters what the strategy sends and receives.

    ``bytes_down`` counts the payload of every instruction message, ``bytes_up`` the
    payload of every reply (see ``functions.records.payload_bytes``), and the ``*_train``
    counters the same for train messages alone (what the algorithm itself exchanges,
    without evaluation traffic); ``wire_*`` counts the serialised message content (keys,
    shapes, Flower's per-array header included), what actually crosses the network less the
    message envelope (counted before ``server_app.packed_grid`` packs a record's arrays into
    one, whose manifest takes the place of their fields); a reply carrying
    an error, or a message whose reply never came, counts as a failure.
    """

    def __init__(
        self, inner: Grid, reply_timeout: float | None = None, poll_interval: float | None = None
    ) -> None:
        """``reply_timeout``: seconds to wait for replies when a caller gives none (the run's
        ``reply-timeout``; Flower's own default is an hour). ``poll_interval``: seconds between
        two pulls of the replies still missing (the run's ``reply-poll-interval``); None = the
        inner grid's own ``send_and_receive``."""
        super().__init__(inner)
        self.reply_timeout = reply_timeout
        self.poll_interval = poll_interval
        self._counters = TrafficCounters()

    def take(self) -> TrafficCounters:
        """Return the counters accumulated so far and start new ones."""
        counters, self._counters = self._counters, TrafficCounters()
        return counters

    # -- metering ------------------------------------------------------------
    def _count_down(self, messages: list[Message]) -> None:
        for msg in messages:
            size = payload_bytes(msg.content)
            self._counters.bytes_down += size
            self._counters.wire_bytes_down += wire_bytes(msg.content)
            if _is_train(msg):
                self._counters.bytes_down_train += size

    def _count_up(self, replies: list[Message]) -> None:
        for msg in replies:
            if msg.has_error():
                self._counters.failures += 1
            else:
                size = payload_bytes(msg.content)
                self._counters.bytes_up += size
                self._counters.wire_bytes_up += wire_bytes(msg.content)
                if _is_train(msg):
                    self._counters.bytes_up_train += size

    # -- Grid API --------------------------------------------------------------
    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        self._count_down(messages)
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._inner.pull_messages(message_ids))
        self._count_up(replies)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        messages = list(messages)
        if not messages:
            return []
        self._count_down(messages)
        started = time.monotonic()
        timeout = self.reply_timeout if timeout is None else timeout
        if self.poll_interval is None:
            replies = list(self._inner.send_and_receive(messages, timeout=timeout))
        else:
            replies = self._push_and_pull(messages, timeout, self.poll_interval)
        sent_to = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        for reply in replies:
            _name_the_lost_node(reply, sent_to)
        self._count_up(replies)
        self._counters.failures += max(0, len(messages) - len(replies))
        self._counters.exchanges += 1
        self._counters.exchange_seconds += time.monotonic() - started
        return replies

    def _push_and_pull(
        self, messages: list[Message], timeout: float | None, poll_interval: float
    ) -> list[Message]:
        """Flower's ``Grid.send_and_receive`` with our pull interval: the deployment's grid
        (``flwr/superlink/grid/http_grid.py``, ``send_and_receive``) sleeps a fixed 3 s between
        pulls, up to 3 s of every exchange spent waiting for replies that have arrived."""
        pending = {message_id for message_id in self._inner.push_messages(messages) if message_id}
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while pending:
            pulled = list(self._inner.pull_messages(pending))
            replies += pulled
            pending.difference_update(reply.metadata.reply_to_message_id for reply in pulled)
            left = None if deadline is None else deadline - time.monotonic()
            if not pending or (left is not None and left <= 0):
                break
            time.sleep(poll_interval if left is None else min(poll_interval, left))
        return replies


def _name_the_lost_node(reply: Message, sent_to: dict[str, int]) -> None:
    """The SuperLink answers for a node it lost (Flower's NODE_UNAVAILABLE error) from its own
    node id 1; name the node the message was for, so the strategy re-syncs that node (and the log
    says which one failed)."""
    node = sent_to.get(reply.metadata.reply_to_message_id)
    if reply.has_error() and node is not None and reply.metadata.src_node_id != node:
        reply.metadata.__dict__["_src_node_id"] = node  # Metadata has no setter; flwr does this
