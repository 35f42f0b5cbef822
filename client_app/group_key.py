"""The node's half of a relay's group key (FFGB with ``relay-encryption``; the server's half:
``strategies.group_key``).

One node makes the run's group key; every node gets it wrapped to its own sealing key (the secure
sums' setup stage, ``client_app.secure_sum.setup``) by a node that holds it, and keeps it in its
``Context.state``. The server only ever holds wraps, which it cannot open: it relays them in the
``group`` stage's replies and in each family message (``GROUP_KEY``). A node answers a ``group``
request (make the key, or wrap the one it holds to the sealing keys listed) and opens the wrap a
family message brings, once per wrap.
"""

from __future__ import annotations

import os

from flwr.app import ConfigRecord, RecordDict

from client_app.node_state import LostStateError
from client_app.secure_sum import sealing_pair
from functions.errors import DecodeError
from functions.secagg_crypto import KEY_BYTES, MAX_WRAP_BYTES, agreements, seal, unseal
from functions.secure_sum import (
    CREATE,
    GROUP_KEY,
    MAX_NODES_IN_SUM,
    OWN_KEY,
    RECIPIENT_KEYS,
    SECAGG,
    WRAP,
    WRAP_FROM,
    WRAPS,
)

STATE = "secagg-group"  # the node's ConfigRecord in Context.state: the key and its wrap
GROUP_PURPOSE = b"flower-beyond-averaging relay group key"


def answer(content: RecordDict, state: RecordDict) -> RecordDict:
    """The group key (made afresh when the request says ``create``, else the one this node
    holds, from the wrap the request brings or its state) wrapped to each recipient key."""
    request = content.get(SECAGG)
    if not isinstance(request, ConfigRecord):
        raise DecodeError(f"group: the message carries no {SECAGG!r} ConfigRecord")
    private, public = sealing_pair(state)
    if request.get(OWN_KEY) != public:
        raise LostStateError("group: the request names another sealing key than this node's")
    recipients = request.get(RECIPIENT_KEYS)
    if (
        not isinstance(recipients, list)
        or not 1 <= len(recipients) <= MAX_NODES_IN_SUM
        or any(not isinstance(k, bytes) or len(k) != KEY_BYTES for k in recipients)
    ):
        raise DecodeError(f"group: {RECIPIENT_KEYS} must list public keys of {KEY_BYTES} bytes")
    if request.get(CREATE) is True:
        key = os.urandom(KEY_BYTES)
        state[STATE] = ConfigRecord({"key": key, WRAP: b""})
    elif WRAP in request:
        key = group_key(request, state)
    elif STATE in state:
        key = state[STATE]["key"]
    else:
        raise LostStateError("group: this node holds no group key")
    wraps = [seal(pair, key) for pair in agreements(private, recipients, GROUP_PURPOSE)]
    return RecordDict({SECAGG: ConfigRecord({WRAPS: wraps})})


def group_key(record: object, state: RecordDict) -> bytes:
    """The group key from the wrap in ``record`` (a message's ``GROUP_KEY``, or a group
    request), opened with this node's sealing key and kept; ``DecodeError`` if it does not
    open, ``LostStateError`` if the node holds no sealing key."""
    if not isinstance(record, ConfigRecord):
        raise DecodeError(f"the message carries no {GROUP_KEY!r} ConfigRecord")
    source, wrap = record.get(WRAP_FROM), record.get(WRAP)
    if not isinstance(source, bytes) or len(source) != KEY_BYTES:
        raise DecodeError(f"{WRAP_FROM} must be a public key of {KEY_BYTES} bytes")
    if not isinstance(wrap, bytes) or not 0 < len(wrap) <= MAX_WRAP_BYTES:
        raise DecodeError(f"{WRAP} must be a token of at most {MAX_WRAP_BYTES} bytes")
    kept = state.get(STATE)
    if isinstance(kept, ConfigRecord) and kept.get(WRAP) == wrap:
        return kept["key"]
    private, _ = sealing_pair(state)
    try:
        key = unseal(agreements(private, [source], GROUP_PURPOSE)[0], wrap)
    except DecodeError:
        raise DecodeError(
            "the group key's wrap does not open with this node's sealing key"
        ) from None
    if len(key) != KEY_BYTES:
        raise DecodeError(f"the group key must be {KEY_BYTES} bytes")
    state[STATE] = ConfigRecord({"key": key, WRAP: wrap})
    return key


def message_key(content: RecordDict, state: RecordDict) -> bytes:
    """The group key of a family message (its ``GROUP_KEY`` record)."""
    return group_key(content.get(GROUP_KEY), state)
