"""A message's arrays travel packed (functions.packed_records, server_app.packed_grid): what is
unpacked is exactly what was packed, a packed message is fewer Flower objects, and no bytes a
node sends in a packed record can do more than get its reply refused with a clear reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from hypothesis import given, settings
from hypothesis import strategies as st

from client_app.app import handle
from functions.packed_records import (
    HEADER,
    PACKED_KEY,
    PACKED_STYPE,
    PackedRecordError,
    pack_content,
    unpack_content,
)
from server_app.packed_grid import PackedGrid
from testing.inprocess_grid import enter_run, run_config, server_context

DTYPES = (np.float32, np.float64, np.int64, np.uint8, np.int16)


@pytest.fixture
def task_identity() -> None:
    enter_run()  # Flower builds a Message only inside a run


def record_of(sizes: list[int], seed: int = 0) -> ArrayRecord:
    rng = np.random.default_rng(seed)
    return ArrayRecord(
        {
            f"a{i}": Array((rng.normal(size=(size, 2)) * 100).astype(DTYPES[i % len(DTYPES)]))
            for i, size in enumerate(sizes)
        }
    )


def content_of(sizes: list[int]) -> RecordDict:
    return RecordDict(
        {
            "arrays": record_of(sizes),
            "config": ConfigRecord({"round": 3, "name": "x"}),
            "metrics": MetricRecord({"loss": 0.5}),
            "lone": ArrayRecord({"w": Array(np.arange(4.0))}),
        }
    )


def packed_blob(manifest: object, data: bytes = b"", text: bytes | None = None) -> RecordDict:
    """A content whose record ``r`` is a packed array of this manifest and these bytes."""
    text = json.dumps(manifest).encode() if text is None else text
    blob = len(text).to_bytes(HEADER, "big") + text + data
    array = Array(dtype="uint8", shape=(len(blob),), stype=PACKED_STYPE, data=blob)
    return RecordDict({"r": ArrayRecord({PACKED_KEY: array})})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=0, max_size=12))
def test_unpacking_gives_back_exactly_the_arrays_that_were_packed(sizes: list[int]) -> None:
    content = content_of(sizes)
    packed = pack_content(content)
    if len(sizes) >= 2:
        assert list(packed["arrays"]) == [PACKED_KEY]
    unpacked = unpack_content(packed)
    assert unpacked.object_id == content.object_id  # same keys, order, dtypes, shapes, bytes
    assert list(unpacked["arrays"]) == list(content["arrays"])
    assert packed["lone"] is content["lone"]  # one array: nothing to gain, sent as it is


def test_a_packed_message_is_fewer_objects(task_identity: None) -> None:
    content = RecordDict({"arrays": record_of([30] * 8), "config": ConfigRecord({"r": 1})})
    plain = Message(content, dst_node_id=5, message_type="train")
    packed = Message(pack_content(content), dst_node_id=5, message_type="train")
    # message, RecordDict, 2 records, and per array: the Array and its chunk
    assert len(get_all_nested_objects(plain)) == 4 + 2 * 8
    assert len(get_all_nested_objects(packed)) == 4 + 2


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (packed_blob([], text=b"\xff\xfe"), "not JSON"),
        (packed_blob({"a": 1}), "not a list"),
        (packed_blob([["k", "float32", [2], "numpy.ndarray"]]), "not a list of 5 fields"),
        (packed_blob([["k", 3, [2], "numpy.ndarray", 0]]), "must be strings"),
        (packed_blob([["k", "float32", [-1], "numpy.ndarray", 0]]), "shape must be"),
        (packed_blob([["k", "float32", [True], "numpy.ndarray", 0]]), "shape must be"),
        (packed_blob([["k", "float32", [1] * 40, "numpy.ndarray", 0]]), "shape must be"),
        (packed_blob([["k", "float32", [2], "numpy.ndarray", -4]]), "byte count"),
        (packed_blob([["k", "float32", [2], "numpy.ndarray", 9]], b"\0" * 8), "runs past"),
        (packed_blob([["k", "uint8", [1], "numpy.ndarray", 1]], b"\0\0"), "after the last"),
        (
            packed_blob([["k", "uint8", [1], "x", 1], ["k", "uint8", [1], "x", 1]], b"\0\0"),
            "twice",
        ),
    ],
)
def test_a_malformed_packed_record_is_refused_naming_what_is_wrong(
    content: RecordDict, reason: str
) -> None:
    with pytest.raises(PackedRecordError, match=reason) as raised:
        unpack_content(content)
    assert "record 'r'" in str(raised.value)


def test_a_packed_record_that_declares_more_than_it_carries_is_refused() -> None:
    short = Array(dtype="uint8", shape=(3,), stype=PACKED_STYPE, data=b"\0\0\0")
    huge = (2**31).to_bytes(HEADER, "big") + b"[]"
    too_big = Array(dtype="uint8", shape=(6,), stype=PACKED_STYPE, data=huge)
    other = Array(dtype="uint8", shape=(1,), stype="numpy.ndarray", data=b"\0")
    lying = Array(dtype="float32", shape=(2**31,), stype=PACKED_STYPE, data=b"\0" * 8)
    extra = {PACKED_KEY: too_big, "b": other}
    for record, reason in [
        ({PACKED_KEY: short}, "too short"),
        ({PACKED_KEY: too_big}, "does not fit"),
        ({PACKED_KEY: other}, "stype"),
        ({PACKED_KEY: lying}, "declares float32"),
        (extra, "2 arrays"),
    ]:
        with pytest.raises(PackedRecordError, match=reason):
            unpack_content(RecordDict({"r": ArrayRecord(record)}))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 400))
def test_no_packed_bytes_raise_anything_but_a_packed_record_error(
    data: bytes, manifest_size: int
) -> None:
    blob = manifest_size.to_bytes(HEADER, "big") + data
    array = Array(dtype="uint8", shape=(len(blob),), stype=PACKED_STYPE, data=blob)
    try:
        unpacked = unpack_content(RecordDict({"r": ArrayRecord({PACKED_KEY: array})}))
    except PackedRecordError:
        return
    assert sum(len(a.data) for a in unpacked["r"].values()) <= len(blob)


class EchoGrid:
    """Replies with the content it received (packed, as a node sends it), or with a reply
    whose packed record lies about its length."""

    def __init__(self, broken: bool = False) -> None:
        self.seen: list[RecordDict] = []
        self.broken = broken

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            self.seen.append(message.content)
            content = packed_blob([["k", "uint8", [1], "x", 5]], b"\0") if self.broken else None
            replies.append(Message(content or message.content, reply_to=_received(message)))
        return replies


def _received(message: Message) -> Message:
    """``message`` as its node receives it (a reply needs a pushed message's metadata)."""
    message.metadata.__dict__["_message_id"] = message.object_id
    return message


def test_the_grid_sends_packed_keeps_the_strategys_messages_and_unpacks_replies(
    task_identity: None,
) -> None:
    inner = EchoGrid()
    content = content_of([5, 6, 7])
    message = Message(content, dst_node_id=5, message_type="train")
    (reply,) = PackedGrid(inner).send_and_receive([message])
    assert list(inner.seen[0]["arrays"]) == [PACKED_KEY]
    assert message.content is content  # the strategy's own message is as it built it
    assert reply.content.object_id == content.object_id


def test_an_unreadable_reply_becomes_an_error_reply_naming_why(task_identity: None) -> None:
    message = Message(content_of([5, 6]), dst_node_id=5, message_type="train")
    (reply,) = PackedGrid(EchoGrid(broken=True)).send_and_receive([message])
    assert reply.has_error()
    assert reply.metadata.src_node_id == message.metadata.dst_node_id
    assert "an unreadable reply: record 'r'" in reply.error.reason
    assert "runs past" in reply.error.reason


def test_a_node_refuses_a_malformed_packed_message_in_one_sentence(task_identity: None) -> None:
    broken = packed_blob([["k", "uint8", [1], "x", 5]], b"\0")
    message = Message(broken, dst_node_id=5, message_type="train")
    _received(message)
    context = server_context(run_config())
    reply = handle(message, context)
    assert reply.has_error()
    assert "record 'r'" in reply.error.reason and "\n" not in reply.error.reason


def test_a_record_that_messages_share_is_packed_once_and_sent_as_one_object(
    task_identity: None,
) -> None:
    model = record_of([5, 6, 7])
    contents = [RecordDict({"arrays": model, "config": ConfigRecord({"n": n})}) for n in range(3)]
    inner = EchoGrid()
    messages = [Message(c, dst_node_id=5 + n, message_type="train") for n, c in enumerate(contents)]
    PackedGrid(inner).send_and_receive(messages)
    sent = [content["arrays"] for content in inner.seen]
    assert sent[0] is sent[1] is sent[2]  # one packed record, hashed and pushed once by Flower
    assert all(m.content is c for m, c in zip(messages, contents, strict=True))
