"""Server-side bookkeeping of the roster's nodes: one slot per node, moved as one.

A slot holds what the server knows of one node: the last round whose step entered the aggregate
(``last-accepted``, which the node reads to commit or drop its pending step) and whether it may
hold nothing and must be brought up to date (``needs_sync``); a family adds its own fields by
subclassing ``NodeSlot`` (what ensemble version a node holds, its D_i, ...). A restarted SuperNode
takes its partition's slot under its new id in one operation (``rebind``), where the slot's
``lose`` resets what a node that holds nothing cannot have. Everything a family keeps per
partition outside the slots (a mirror, x_hat_i) is keyed by roster position, which a rebind
does not change. A node that joins gets a new slot at the end (``append``); one that leaves for
good keeps its slot, under its position's tombstone id (``release``), so positions never move:
``node_ids`` are the run's nodes, ``positions`` how many places the order has.

The book also builds messages that carry the slot's acceptance state and, when the node needs
it, its restart records, and screens replies: an error reply marks the node for re-sync, a reply
that fails decoding is dropped and counted (``strategies.screening``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from functions.acceptance import acceptance_config
from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record
from functions.protocol import CONFIG, EVALUATE, SERVER_ROUND, SYNC_FROM_XBAR, SYNC_NONE, TRAIN
from strategies.roster import is_tombstone, tombstone
from strategies.screening import Screened, screen_replies
from strategies.state_codec import decode_rows, encode_rows

T = TypeVar("T")
Restart = Callable[[int], tuple[str, Mapping[str, ArrayRecord | ConfigRecord]]]


@dataclass
class NodeSlot:
    """What the server keeps for one node of the roster. Subclasses add fields of scalar types
    (bool, int, float, str, or one of them or None); the book saves them with the state codec's
    rows (``strategies.state_codec``)."""

    last_accepted: int = 0
    needs_sync: bool = True

    def lose(self) -> None:
        """The node holds nothing any more (it restarted, or the run was resumed)."""
        self.needs_sync = True


S = TypeVar("S", bound=NodeSlot)


class NodeBook(Generic[S]):
    """The roster's nodes in their fixed order, each with its slot."""

    def __init__(
        self, node_ids: Iterable[int], label: str, slot: Callable[[], S] = NodeSlot
    ) -> None:  # type: ignore[assignment]
        """``node_ids`` in a fixed order: sampling and aggregation follow it."""
        self.label, self.new_slot = label, slot
        self.slots: dict[int, S] = {n: slot() for n in node_ids}
        self._position = {n: i for i, n in enumerate(self.slots)}

    @property
    def node_ids(self) -> list[int]:
        """The run's nodes, in order (released positions left out)."""
        return [n for n in self.slots if not is_tombstone(n)]

    @property
    def active_positions(self) -> list[int]:
        """The positions of the run's nodes."""
        return [self._position[n] for n in self.node_ids]

    @property
    def positions(self) -> int:
        """How many places the order has: the run's nodes and the released ones."""
        return len(self.slots)

    def __getitem__(self, node: int) -> S:
        return self.slots[node]

    def __contains__(self, node: object) -> bool:
        return node in self.slots

    def position(self, node: int) -> int:
        """The node's place in the order (what per-partition state is keyed by)."""
        return self._position[node]

    @property
    def last_accepted(self) -> dict[int, int]:
        return {n: s.last_accepted for n, s in self.slots.items()}

    @property
    def needs_sync(self) -> dict[int, bool]:
        return {n: s.needs_sync for n, s in self.slots.items()}

    def lost(self, nodes: Iterable[int]) -> None:
        """``nodes`` may hold nothing we sent (an error reply): bring them up to date next time.
        Ids outside the roster are ignored (Flower reports an unreachable node as node 1)."""
        for node in nodes:
            if node in self.slots:
                self.slots[node].needs_sync = True

    def train_message(
        self,
        node: int,
        server_round: int,
        content: Mapping[str, object],
        restart: Restart,
        **config: float | str | bool,
    ) -> Message:
        """A train message with ``content`` (this node's own), its acceptance state and, when the
        node may have no state, the restart records ``restart(node)`` gives with their sync value.
        """
        records = RecordDict(dict(content))
        sync = SYNC_NONE
        if self.slots[node].needs_sync:
            sync, extra = restart(node)
            for key, record in extra.items():
                records[key] = record
        records[CONFIG] = ConfigRecord(
            {**acceptance_config(server_round, self.slots[node].last_accepted, sync), **config}
        )
        return Message(records, node, TRAIN, group_id=str(server_round))

    def screen(
        self, server_round: int, replies: Iterable[Message], decode: Callable[[Message], T]
    ) -> tuple[dict[int, T], Screened[T]]:
        """Decoded good replies in node order, and what the screen found (the replies that
        failed decoding, those that carried NaN or inf, the errors).

        Error replies are counted as failures by the metered grid, not here; their nodes may have
        lost their state, so they are re-synced. A node that answered, even with a reply that is
        dropped, holds state (its committed step).
        """
        screened = screen_replies(self.label, server_round, replies, decode, self.slots)
        self.lost(screened.errors)
        for node in [*screened.accepted, *screened.dropped]:
            if node in self.slots:
                self.slots[node].needs_sync = False
        return screened.in_order(self.slots), screened

    def accept(self, server_round: int, nodes: Iterable[int]) -> None:
        """Record that the steps of ``nodes`` in ``server_round`` entered the aggregate."""
        for node in nodes:
            self.slots[node].last_accepted = server_round
            self.slots[node].needs_sync = False

    def rebind(self, old: int, new: int) -> None:
        """``new`` takes ``old``'s slot (a restarted SuperNode of the same partition): same
        position and last accepted round; it holds nothing (``NodeSlot.lose``)."""
        self.slots = {new if n == old else n: s for n, s in self.slots.items()}
        self._position = {n: i for i, n in enumerate(self.slots)}
        self.slots[new].lose()

    def append(self, node: int) -> None:
        """A node that joined: a new slot at the end of the order; it holds nothing yet."""
        self.slots[node] = self.new_slot()
        self._position[node] = len(self.slots) - 1

    def release(self, node: int) -> None:
        """A node that left for good: its slot stays in place under its position's tombstone."""
        self.rebind(node, tombstone(self._position[node]))

    def evaluate_messages(
        self, server_round: int, content: Mapping[str, object], **config: float | str | bool
    ) -> list[Message]:
        """The same ``content`` to every node for federated evaluation."""
        return [
            self.evaluate_message(node, server_round, content, **config) for node in self.node_ids
        ]

    @staticmethod
    def evaluate_message(
        node: int, server_round: int, content: Mapping[str, object], **config: float | str | bool
    ) -> Message:
        """An evaluation message with ``content`` for one node."""
        records = RecordDict(
            {**content, CONFIG: ConfigRecord({SERVER_ROUND: server_round, **config})}
        )
        return Message(records, node, EVALUATE, group_id=str(server_round))

    # -- checkpoint -----------------------------------------------------------------------------
    def to_record(self) -> ConfigRecord:
        """The order (node ids as text: they do not fit int64) and every slot field as one list
        per field (``state_codec.encode_rows``: ``needs_sync`` under ``needs-sync``, an optional
        field's None marked in ``<key>:none``)."""
        slots = list(self.slots.values())
        return ConfigRecord(
            {"node-ids": [str(n) for n in self.slots], **encode_rows(type(self.new_slot()), slots)}
        )

    @classmethod
    def from_record(
        cls, record: ConfigRecord, label: str, slot: Callable[[], S] = NodeSlot
    ) -> NodeBook[S]:  # type: ignore[assignment]
        """Inverse of ``to_record``; DecodeError when a field is missing, unknown, of another
        length or of another type than the slot declares."""
        try:
            node_ids = [int(n) for n in record["node-ids"]]
        except (KeyError, TypeError, ValueError) as err:
            raise DecodeError(f"node book: no usable node ids ({err})") from None
        book = cls(node_ids, label, slot)
        fields = {k: v for k, v in record.items() if k != "node-ids"}
        rows = decode_rows(type(slot()), fields, len(node_ids), "node book")
        for node, values in zip(node_ids, rows):
            for name, value in values.items():
                setattr(book.slots[node], name, value)
        return book


def messages_to(content: RecordDict, nodes: Iterable[int], message_type: str) -> list[Message]:
    """One message of ``message_type`` with the same ``content`` to each of ``nodes`` (as
    Flower's strategies build theirs, from its public ``Message``)."""
    return [Message(content, node, message_type) for node in nodes]


def dense_restart(
    layout: ParamLayout, xbar: Params, point: Params, key: str
) -> tuple[str, dict[str, ArrayRecord]]:
    """Sync a node to ``point``: by reference when it equals x-bar as sent (float32), else sent
    under ``key`` in float64 (FedFW's x_i, FedDR's x_hat_i)."""
    sent = [np.asarray(p, np.float32).astype(np.float64) for p in xbar]
    if all(np.array_equal(a, b) for a, b in zip(point, sent)):
        return SYNC_FROM_XBAR, {}
    return key, {key: params_to_record(layout, point, dtype=np.float64)}
