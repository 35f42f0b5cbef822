"""A message's arrays travel as one object per record: the codec both apps apply to what they
send and undo on what they receive.

Flower 1.41 moves a message as content-addressed objects, one Fleet or Runtime call per object:
the message, its RecordDict, each record, each ``Array`` and each array's chunk(s). A record of n
arrays is 2n + 1 objects, and every hop of a deployed exchange (ServerApp -> SuperLink ->
SuperNode -> ClientApp and back) pulls or pushes them one call at a time (two threads), which
cost a deployed round more than the training did (benchmarks/README.md, case `latency`). Here an
``ArrayRecord`` of two or more arrays is sent as a record of one array whose bytes are a
manifest and the arrays' own bytes, so that record is 3 objects whatever its size. Each array
comes back exactly as it was sent (its dtype, shape, stype and bytes): the decoders and the reply
guard downstream see what they saw before. Flower has no such option (its ``Array`` is the unit of
transfer); the manifest is JSON, never pickle.

A packed record's single array has key ``PACKED_KEY`` and stype ``PACKED_STYPE``; its bytes are
a 4-byte big-endian manifest length, the manifest (a JSON list of [key, dtype, shape, stype,
byte count]) and the arrays' bytes one after another. ``unpack_content`` validates all of it and
raises ``PackedRecordError`` naming what is wrong.
"""

from __future__ import annotations

import json

from flwr.app import Array, ArrayRecord, RecordDict

from functions.errors import DecodeError

PACKED_KEY = "fl.packed"
PACKED_STYPE = "fl.packed/1"
MIN_ARRAYS = 2  # a record of fewer arrays gains nothing
HEADER = 4  # bytes of the manifest's length
MAX_MANIFEST = 16 << 20  # bytes: far above a manifest of a million arrays' short keys
MAX_NDIM = 32  # numpy's own limit is 64


class PackedRecordError(DecodeError):
    """A packed record that cannot be read back into its arrays."""


def pack_content(content: RecordDict, done: dict[int, ArrayRecord] | None = None) -> RecordDict:
    """``content`` with each ArrayRecord of ``MIN_ARRAYS`` or more arrays packed (the other
    records as they are, the same objects). ``done``: the packed form of records packed before,
    by ``id`` of the record, filled as it goes: a record that many messages share (the model sent
    to every node) is packed once and stays one object for Flower to hash and send once; the
    caller keeps those records alive while it uses ``done``."""
    if not any(_packable(record) for record in content.values()):
        return content
    done = {} if done is None else done
    packed = {}
    for name, record in content.items():
        if _packable(record):
            if id(record) not in done:
                done[id(record)] = ArrayRecord({PACKED_KEY: _pack(record)})
            record = done[id(record)]
        packed[name] = record
    return RecordDict(packed)


def unpack_content(content: RecordDict) -> RecordDict:
    """``content`` with each packed record restored to its arrays; ``PackedRecordError`` if one
    is malformed."""
    if not any(_is_packed(record) for record in content.values()):
        return content
    return RecordDict(
        {
            name: _unpack(name, record) if _is_packed(record) else record
            for name, record in content.items()
        }
    )


def _packable(record: object) -> bool:
    return isinstance(record, ArrayRecord) and len(record) >= MIN_ARRAYS


def _is_packed(record: object) -> bool:
    return isinstance(record, ArrayRecord) and PACKED_KEY in record


def _pack(record: ArrayRecord) -> Array:
    manifest = []
    for key, array in record.items():
        manifest.append([key, array.dtype, list(array.shape), array.stype, len(array.data)])
    text = json.dumps(manifest, separators=(",", ":")).encode()
    blob = b"".join(
        [len(text).to_bytes(HEADER, "big"), text, *(array.data for array in record.values())]
    )
    return Array(dtype="uint8", shape=(len(blob),), stype=PACKED_STYPE, data=blob)


def _unpack(name: str, record: ArrayRecord) -> ArrayRecord:
    """The arrays of packed record ``name``, in the order they were packed."""
    if len(record) != 1:
        raise PackedRecordError(f"record {name!r}: packed, yet {len(record)} arrays, not 1")
    packed = record[PACKED_KEY]
    blob = packed.data
    if packed.stype != PACKED_STYPE or not isinstance(blob, bytes):
        raise PackedRecordError(f"record {name!r}: its packed array has stype {packed.stype!r}")
    if packed.dtype != "uint8" or tuple(packed.shape) != (len(blob),):
        raise PackedRecordError(
            f"record {name!r}: its packed array declares {packed.dtype} {tuple(packed.shape)}, "
            f"not the uint8 ({len(blob)},) it carries"
        )
    if len(blob) < HEADER:
        raise PackedRecordError(f"record {name!r}: {len(blob)} bytes, too short for a manifest")
    size = int.from_bytes(blob[:HEADER], "big")
    if size > min(MAX_MANIFEST, len(blob) - HEADER):
        raise PackedRecordError(f"record {name!r}: a manifest of {size} bytes does not fit")
    try:
        manifest = json.loads(blob[HEADER : HEADER + size])
    except (UnicodeDecodeError, ValueError) as err:
        raise PackedRecordError(f"record {name!r}: its manifest is not JSON ({err})") from None
    if not isinstance(manifest, list):
        raise PackedRecordError(f"record {name!r}: its manifest is not a list")
    arrays: dict[str, Array] = {}
    offset = HEADER + size
    for number, entry in enumerate(manifest):
        key, dtype, shape, stype, nbytes = _entry(name, number, entry)
        if key in arrays:
            raise PackedRecordError(f"record {name!r}: array {key!r} twice")
        if nbytes > len(blob) - offset:
            raise PackedRecordError(f"record {name!r}: array {key!r} runs past the bytes sent")
        arrays[key] = Array(
            dtype=dtype, shape=tuple(shape), stype=stype, data=blob[offset : offset + nbytes]
        )
        offset += nbytes
    if offset != len(blob):
        raise PackedRecordError(f"record {name!r}: {len(blob) - offset} bytes after the last array")
    return ArrayRecord(arrays)


def _entry(name: str, number: int, entry: object) -> tuple[str, str, list[int], str, int]:
    """One manifest entry, checked: [key, dtype, shape, stype, byte count]."""
    where = f"record {name!r}, manifest entry {number}"
    if not isinstance(entry, list) or len(entry) != 5:
        raise PackedRecordError(f"{where}: not a list of 5 fields")
    key, dtype, shape, stype, nbytes = entry
    if not all(isinstance(text, str) for text in (key, dtype, stype)):
        raise PackedRecordError(f"{where}: key, dtype and stype must be strings")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(d) is int and d >= 0 for d in shape)
    ):
        raise PackedRecordError(f"{where}: shape must be a list of at most {MAX_NDIM} sizes")
    if type(nbytes) is not int or nbytes < 0:
        raise PackedRecordError(f"{where}: byte count must be a non-negative integer")
    return key, dtype, shape, stype, nbytes
