"""Payload accounting and torch <-> record helpers for what travels in Flower messages."""

from __future__ import annotations

import math

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common.serde import config_record_to_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import Array as ProtoArray

_SCALAR_BYTES = 8  # int64 / float64 as Flower's protobuf carries them


def _value_bytes(value: object) -> int:
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return _SCALAR_BYTES
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, list):
        return sum(_value_bytes(v) for v in value)
    raise TypeError(f"unexpected record value of type {type(value).__name__}")


def array_data_bytes(array: Array) -> int:
    """Raw data bytes of one array (element count x item size; no serialisation header).

    What an ``Array`` declares beside its bytes (dtype, shape) is the sender's word: it is used
    only when it is well formed and no larger than the bytes the array carries, else the bytes
    carried are counted. So a reply can never inflate, deflate below zero or crash the meter,
    and an honest array counts exactly its data.
    """
    carried = len(array.data) if isinstance(array.data, bytes) else 0
    try:
        shape = tuple(array.shape)
        if all(type(d) is int and d >= 0 for d in shape):
            declared = math.prod(shape) * np.dtype(array.dtype).itemsize
            if declared <= carried:
                return declared
    except Exception:  # a declared dtype numpy does not know, or any other fault
        pass
    return carried


def array_record_bytes(record: ArrayRecord) -> int:
    """Raw array data bytes of a record (``array_data_bytes`` of each array)."""
    return sum(array_data_bytes(arr) for arr in record.values())


def payload_bytes(content: RecordDict) -> int:
    """Bytes of payload put into a message: array data, config and metric values.

    Keys and framing are not counted: this is what the algorithm chose to send.
    """
    total = 0
    for record in content.values():
        if isinstance(record, ArrayRecord):
            total += array_record_bytes(record)
        elif isinstance(record, (ConfigRecord, MetricRecord)):
            total += sum(_value_bytes(v) for v in record.values())
    return total


def wire_bytes(content: RecordDict) -> int:
    """Size of the content as Flower serialises it: payload plus keys, dtypes, shapes and the
    ~128-byte header Flower stores with every array (so many tiny arrays cost more than one).

    Exactly ``recorddict_to_proto(content).ByteSize()``, computed without putting any array's
    data into a protobuf (which copies it three times: 192 MiB of memory for a 64 MiB reply
    that is still to be screened): each array's header fields are measured as protobuf, its data
    added as the length-delimited field it is, and so up the nesting (Flower's recorddict.proto:
    RecordDict.Item{key, array_record}, ArrayRecord.Item{key, value}, Array{..., data = 4})."""
    total = 0
    for key, record in content.items():
        if isinstance(record, ArrayRecord):
            body = sum(
                _field(_text(name) + _field(_array_size(array))) for name, array in record.items()
            )
        elif isinstance(record, ConfigRecord):
            body = sum(_config_item_size(name, value) for name, value in record.items())
        else:  # a MetricRecord: numbers only
            total += recorddict_to_proto(RecordDict({key: record})).ByteSize()
            continue
        total += _field(_text(key) + _field(body))
    return total


def _array_size(array: Array) -> int:
    header = ProtoArray(dtype=array.dtype, shape=array.shape, stype=array.stype)
    return header.ByteSize() + (_field(len(array.data)) if array.data else 0)


def _config_item_size(name: str, value: object) -> int:
    """A ConfigRecord.Item{key, value: ConfigRecordValue}: text and bytes (and lists of them)
    measured by length; other values (numbers and their lists) as protobuf."""
    if isinstance(value, (str, bytes)):  # string = 5, bytes = 6: a one-byte tag
        size = _field(_length(value))
    elif isinstance(value, list) and value and isinstance(value[0], (str, bytes)):
        size = 1 + _field(sum(_field(_length(v)) for v in value))  # string_list 25, bytes_list 26
    else:
        return config_record_to_proto(ConfigRecord({name: value})).ByteSize()
    return _field(_text(name) + _field(size))


def _length(value: str | bytes) -> int:
    return len(value.encode("utf-8")) if isinstance(value, str) else len(value)


def _varint(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field(size: int) -> int:
    """A length-delimited protobuf field of ``size`` bytes, with a one-byte tag."""
    return 1 + _varint(size) + size


def _text(value: str) -> int:
    """A string field (proto3 leaves out an empty one)."""
    return _field(len(value.encode("utf-8"))) if value else 0
