"""A Grid wrapper that sends each message's arrays packed and unpacks the replies
(``functions.packed_records``: a record of n arrays travels as 3 objects, not 2n + 1).

The messages the strategy built keep their content: each is packed for the push and given back
its own content afterwards (Flower computes a message's id from what it pushes, and keeps it in
the message's metadata). A reply whose packed record cannot be read becomes an error reply
naming why, which the reply guard logs and counts as a failure like any node's error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from flwr.app import ArrayRecord, Error, Message, RecordDict
from flwr.app.message.message import make_message
from flwr.common.constant import ErrorCode

from functions.errors import one_sentence
from functions.packed_records import PackedRecordError, pack_content, unpack_content
from server_app.grid_wrapper import GridWrapper


@contextmanager
def packed(messages: list[Message]) -> Iterator[None]:
    """The messages' contents packed while inside (a record they share packed once), their own
    contents again after."""
    own: list[RecordDict | None] = []
    done: dict[int, ArrayRecord] = {}
    for message in messages:
        content = message.content if message.has_content() else None
        own.append(content)
        if content is not None:
            message.content = pack_content(content, done)
    try:
        yield
    finally:
        for message, content in zip(messages, own, strict=True):
            if content is not None:
                message.content = content


def unpacked(reply: Message) -> Message:
    """``reply`` with its arrays unpacked (in place), or an error reply naming what of its
    packed records is unreadable."""
    if reply.has_error():
        return reply
    try:
        reply.content = unpack_content(reply.content)
    except PackedRecordError as err:
        return make_message(
            reply.metadata,
            error=Error(ErrorCode.UNKNOWN, one_sentence(f"an unreadable reply: {err}")),
        )
    return reply


class PackedGrid(GridWrapper):
    """Delegates to a real Grid; what crosses it has its arrays packed."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        with packed(messages):
            return list(self._inner.push_messages(messages))

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [unpacked(reply) for reply in self._inner.pull_messages(message_ids)]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        messages = list(messages)
        with packed(messages):
            replies = list(self._inner.send_and_receive(messages, timeout=timeout))
        return [unpacked(reply) for reply in replies]
