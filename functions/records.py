"""Payload accounting and torch <-> record helpers for what travels in Flower messages."""

from __future__ import annotations

import math

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common.serde import recorddict_to_proto

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


def array_record_bytes(record: ArrayRecord) -> int:
    """Raw array data bytes (element count x item size; no serialisation headers)."""
    return sum(
        math.prod(arr.shape) * np.dtype(arr.dtype).itemsize for arr in record.values()
    )


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
    ~128-byte header Flower stores with every array (so many tiny arrays cost more than one)."""
    return recorddict_to_proto(content).ByteSize()
