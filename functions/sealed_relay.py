"""A node's model sealed to the nodes that may read it, so that the server relaying it stores and
forwards ciphertext only (``relay-encryption``): what travels, how it is sealed and opened.

The sender serialises its model's records with Flower's protobuf (as checkpoints are written;
nothing is pickled) and encrypts them once, with Fernet, under a fresh content key; the content
key is sealed to each recipient, the sender itself included (a node is re-sent its own model
after a loss), under the key that the two nodes' X25519 sealing keys agree
(``functions.secagg_crypto``, the keys of the secure sums' setup stage). The server sees the
ciphertext's length, the recipients and the sender's public key. A recipient opens its wrap and
then the model, and validates the model as the server validates a plain one.

The sealed model is a model's config under the same prefixes (``sealed-box``, ``sealed-wraps``,
``sealed-to``, ``sealed-from``) with no arrays, so the relay's book keeps and renames it as any.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from google.protobuf.message import DecodeError as ProtoDecodeError

from functions.errors import DecodeError
from functions.params import arrays_to_record, record_to_arrays
from functions.secagg_crypto import KEY_BYTES, MAX_WRAP_BYTES, agreements, seal, unseal

BOX, WRAPS, TO, FROM = "sealed-box", "sealed-wraps", "sealed-to", "sealed-from"
SEALED_KEYS = (BOX, WRAPS, TO, FROM)
PURPOSE = b"flower-beyond-averaging relayed model"
FERNET_OVERHEAD = 1024  # a token is its base64 plaintext (4/3) plus a header of 57 bytes

Sealed = dict[str, bytes | list[bytes] | list[int]]


def is_sealed(config: Mapping[str, object], prefix: str) -> bool:
    """Whether the model under ``prefix`` of a relayed config is a sealed one."""
    return prefix + BOX in config


def seal_model(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    private: bytes,
    public: bytes,
    recipients: Mapping[int, bytes],
) -> Sealed:
    """The model ``config`` and ``arrays`` sealed by the holder of ``private`` / ``public`` to
    each of ``recipients`` (vertex -> public sealing key)."""
    records = RecordDict({"config": ConfigRecord(dict(config)), "arrays": arrays_to_record(arrays)})
    payload = recorddict_to_proto(records).SerializeToString()
    content_key = os.urandom(KEY_BYTES)
    keys = agreements(private, list(recipients.values()), PURPOSE)
    return {
        BOX: seal(content_key, payload),
        WRAPS: [seal(key, content_key) for key in keys],
        TO: list(recipients),
        FROM: public,
    }


def check_sealed(
    sealed: Mapping[str, object], recipients: Sequence[int], sender: bytes, max_bytes: int
) -> None:
    """What the server can check of a sealed model: its fields and their types, a wrap for each
    of ``recipients`` (in that order), the sender's key ``sender``, a ciphertext no longer than
    a model of ``max_bytes`` array bytes can make (``DecodeError`` otherwise)."""
    if set(sealed) != set(SEALED_KEYS):
        raise DecodeError(
            f"a sealed model has the fields {sorted(SEALED_KEYS)}, not {sorted(sealed)}"
        )
    box, wraps, to, source = (sealed[k] for k in SEALED_KEYS)
    if not isinstance(box, bytes) or len(box) > 2 * max_bytes + FERNET_OVERHEAD:
        raise DecodeError(f"{BOX} must be bytes of at most {2 * max_bytes + FERNET_OVERHEAD}")
    if list(to) != list(recipients):
        raise DecodeError(f"{TO} must be the recipients {list(recipients)}, not {to!r}")
    if (
        not isinstance(wraps, list)
        or len(wraps) != len(recipients)
        or any(not isinstance(w, bytes) or len(w) > MAX_WRAP_BYTES for w in wraps)
    ):
        raise DecodeError(f"{WRAPS} must hold a key of at most {MAX_WRAP_BYTES} bytes a recipient")
    if source != sender:
        raise DecodeError(f"{FROM} is not the sender's sealing key")


def check_sealed_form(sealed: Mapping[str, object], max_bytes: int) -> None:
    """``check_sealed`` against its own recipients and sender (a checkpoint's sealed model,
    whose message is gone)."""
    to, source = sealed.get(TO), sealed.get(FROM)
    if not isinstance(to, list) or any(type(v) is not int or v < 0 for v in to):
        raise DecodeError(f"{TO} must be a list of vertices")
    if not isinstance(source, bytes) or len(source) != KEY_BYTES:
        raise DecodeError(f"{FROM} must be a public key of {KEY_BYTES} bytes")
    check_sealed(sealed, to, source, max_bytes)


def open_model(
    sealed: Mapping[str, object], vertex: int, private: bytes, max_bytes: int
) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """The config and arrays of a model sealed to ``vertex``, whose sealing key is ``private``
    (``DecodeError`` when it is not sealed to it, does not open, or is malformed)."""
    to, wraps = sealed.get(TO), sealed.get(WRAPS)
    if not isinstance(to, list) or not isinstance(wraps, list) or len(to) != len(wraps):
        raise DecodeError(f"a sealed model needs as many {WRAPS} as {TO}")
    if vertex not in to:
        raise DecodeError(f"a model sealed to {to}, not to this node's vertex {vertex}")
    source, box = sealed.get(FROM), sealed.get(BOX)
    if not isinstance(source, bytes) or not isinstance(box, bytes):
        raise DecodeError(f"a sealed model's {FROM} and {BOX} must be bytes")
    key = agreements(private, [source], PURPOSE)[0]
    try:
        payload = unseal(unseal(key, wraps[to.index(vertex)]), box)
        records = recorddict_from_proto(ProtoRecordDict.FromString(payload))
    except (DecodeError, ProtoDecodeError, ValueError, TypeError):
        raise DecodeError(
            "a sealed model that does not open with this node's key (sealed to an earlier one?)"
        ) from None
    config, arrays = records.get("config"), records.get("arrays")
    if set(records) != {"config", "arrays"} or not isinstance(config, ConfigRecord):
        raise DecodeError("a sealed model must hold one config and one array record")
    if not isinstance(arrays, ArrayRecord):
        raise DecodeError("a sealed model must hold one config and one array record")
    return dict(config), record_to_arrays(arrays, max_bytes)
