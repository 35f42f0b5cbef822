"""Replies can never crash the server: every reply is read inside one guard.

An error reply is logged with its reason as one line (``one_sentence``: whatever an engine or a
node put in it; the metered grid counts it); any exception while reading a content
reply (unparseable array bytes, a wrong record kind, a missing or extra key, non-finite or
out-of-range values, a reply from a node outside the federation, a second reply from one node)
drops that reply, logs one line naming the node and the reason, and counts one failure. The
replies that pass are handed on in the caller's node order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from logging import WARNING
from typing import Generic, TypeVar

from flwr.app import Message, RecordDict
from flwr.common.logger import log

from functions.errors import DecodeError, NonFiniteError, one_sentence

T = TypeVar("T")


@dataclass
class Screened(Generic[T]):
    """What came back: decoded replies by node, nodes whose reply was dropped, nodes that sent
    an error."""

    accepted: dict[int, T] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # of each error or dropped reply
    nonfinite: list[int] = field(default_factory=list)  # dropped for a NaN or an infinity

    @property
    def rejected(self) -> int:
        """How many content replies failed decoding (each one failure of the round)."""
        return len(self.dropped)

    def in_order(self, node_ids: Iterable[int]) -> dict[int, T]:
        """The accepted replies in ``node_ids`` order (reply order varies between engines)."""
        return {n: self.accepted[n] for n in node_ids if n in self.accepted}


def screen_replies(
    label: str,
    server_round: int,
    replies: Iterable[Message],
    decode: Callable[[Message], T],
    members: Collection[int],
) -> Screened[T]:
    """Decode every reply from ``members``; a reply that raises anything becomes a failure."""
    out: Screened[T] = Screened()
    for reply in replies:
        node = reply.metadata.src_node_id
        if reply.has_error():
            out.errors.append(node)
            out.reasons[node] = one_sentence(reply.error.reason)
            log(
                WARNING,
                "%s round %d: node %s failed: %s",
                label,
                server_round,
                node,
                out.reasons[node],
            )
            continue
        try:
            if node not in members:
                raise DecodeError("reply from a node outside the federation")
            if node in out.accepted:
                raise DecodeError("a second reply from the same node")
            out.accepted[node] = decode(reply)
        except Exception as err:  # whatever a reply holds, it only fails itself
            out.dropped.append(node)
            if isinstance(err, NonFiniteError):
                out.nonfinite.append(node)
            reason = one_sentence(
                err if isinstance(err, DecodeError) else f"{type(err).__name__}: {err}"
            )
            out.reasons.setdefault(node, reason)
            log(
                WARNING,
                "%s round %d: dropped the reply of node %s: %s",
                label,
                server_round,
                node,
                reason,
            )
    return out


def exact_records(content: RecordDict, kinds: Mapping[str, type]) -> dict:
    """The records of ``content``, which must be exactly ``kinds`` (name -> record type)."""
    if set(content.keys()) != set(kinds):
        raise DecodeError(f"expected records {sorted(kinds)}, got {sorted(content.keys())}")
    for name, kind in kinds.items():
        if not isinstance(content[name], kind):
            raise DecodeError(
                f"record {name!r}: expected a {kind.__name__}, got {type(content[name]).__name__}"
            )
    return {name: content[name] for name in kinds}
