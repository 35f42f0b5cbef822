"""The part of a Grid wrapper that only passes calls on: the base of the ServerApp's grids that
add something to a real Grid (``MeteredGrid`` counts, ``PackedGrid`` packs); and how this
project's grids create a message (``MessageMaker``: the wrappers and the in-process grid)."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


class MessageMaker(Grid):
    """A Grid whose ``create_message`` builds the Message itself (the run and source node ids
    are set when it is pushed), as the wrappers and ``testing.inprocess_grid.LocalGrid`` do."""

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)


class GridWrapper(MessageMaker):
    """Delegates every Grid call to ``inner``; subclasses override what they add to."""

    def __init__(self, inner: Grid) -> None:
        self._inner = inner

    def set_run(self, run) -> None:  # Flower's Run type
        self._inner.set_run(run)

    @property
    def run(self):
        return self._inner.run

    def get_node_ids(self) -> Iterable[int]:
        return self._inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self._inner.send_and_receive(messages, timeout=timeout)
