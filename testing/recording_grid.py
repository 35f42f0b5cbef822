"""A Grid wrapper that keeps every message the ServerApp sends and every reply it receives: the
server's view of a run, for the privacy benchmark and the tests that check what a curious
server could read (``benchmarks.privacy``, ``tests/privacy/test_secure_aggregation.py``).

It sits directly around the engine's grid (``testing.inprocess_grid.LocalGrid``), inside the
ServerApp's own wrappers, so a reply is recorded as the node built it (its arrays unpacked), as
a copy: what the strategy later takes out of a reply stays in the record.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

from flwr.app import Message

from server_app.grid_wrapper import GridWrapper


@dataclass(frozen=True)
class Exchange:
    """One message the server sent and the reply it received (None: no reply came)."""

    sent: Message
    reply: Message | None


class RecordingGrid(GridWrapper):
    """Delegates to ``inner`` and records every (message, reply) pair in ``exchanges``."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.exchanges: list[Exchange] = []
        self._sent: dict[str, Message] = {}

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(self._inner.push_messages(messages))
        self._sent.update(zip(ids, messages, strict=True))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._inner.pull_messages(message_ids))
        for reply in replies:
            sent = self._sent.pop(reply.metadata.reply_to_message_id, None)
            if sent is not None:
                self.exchanges.append(Exchange(sent, copy.deepcopy(reply)))
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return list(self.pull_messages(list(self.push_messages(messages))))

    def replies(self, message_type: str | None = None) -> list[Message]:
        """Every reply received (of ``message_type`` only, when given), in arrival order."""
        return [
            e.reply
            for e in self.exchanges
            if e.reply is not None
            and (message_type is None or e.sent.metadata.message_type == message_type)
        ]
