"""A ClientApp for the hostile-peer tests: the project's ClientApp, unless the node is hostile.

Every node of the test's deployment runs this wrapper (the job's FAB names it as the ClientApp;
``client_app/app.py`` stays the production one). A node behaves exactly like the real app unless
its node config has ``hostile``, which only the hostile SuperNode gets (``--node-config``):

    hostile='nan,outside,garbage,huge'   train (and evaluate) replies of round r get the r-th
                                         corruption; later rounds are honest
    hostile='claim:1'                    the query.node reply claims partition 1
    hostile='unusable'                   the query.node reply is an Array that declares a dtype
                                         numpy does not know and a shape of 1e28 elements

The honest reply is computed first (the node's Context.state moves on as an honest node's would),
then corrupted:

- ``nan``: a NaN in every float array (dtype and shape kept);
- ``outside``: every float array scaled by 4 (a FedFW l2 point of norm 4r: outside D_i), every
  integer array set to its dtype's maximum (an l1/simplex vertex index out of range);
- ``garbage``: every array replaced by one of another dtype and shape;
- ``huge``: the first array replaced by ``HUGE_ARRAY_BYTES`` of float32 (Flower sends it in 5 MiB
  chunks) and a ConfigRecord with ``HUGE_CONFIG_BYTES`` of bytes added (one object, not chunked).
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from client_app.app import app as honest_app
from client_app.registry import message_types
from functions.packed_records import pack_content, unpack_content
from functions.protocol import CONFIG, NODE, PARTITION_ID, SERVER_ROUND

HOSTILE = "hostile"  # the node-config key
HUGE_ARRAY_BYTES = 32 * 2**20
HUGE_CONFIG_BYTES = 16 * 2**20
CORRUPTIONS = ("nan", "outside", "garbage", "huge")
UNUSABLE = "unusable"

app = ClientApp()


def plan_of(context: Context) -> list[str]:
    """The node's hostile plan (empty: honest); an unknown item is a ValueError."""
    items = [item.strip() for item in str(context.node_config.get(HOSTILE, "")).split(",")]
    items = [item for item in items if item]
    for item in items:
        if item not in (*CORRUPTIONS, UNUSABLE) and not item.startswith("claim:"):
            raise ValueError(f"unknown hostile behaviour {item!r}")
    return items


def _arrays(reply: Message) -> list[tuple[ArrayRecord, str]]:
    return [
        (record, key)
        for record in reply.content.values()
        if isinstance(record, ArrayRecord)
        for key in record
    ]


def corrupt(reply: Message, how: str) -> None:
    """Corrupt a content reply in place (see the module docstring)."""
    slots = _arrays(reply)
    if how == "huge":
        record, key = slots[0]
        record[key] = Array(np.ones(HUGE_ARRAY_BYTES // 4, np.float32))
        reply.content["junk"] = ConfigRecord({"blob": b"\x00" * HUGE_CONFIG_BYTES})
        return
    for record, key in slots:
        value = record[key].numpy()
        if how == "garbage":
            record[key] = Array(np.arange(value.size + 3, dtype=np.int16))
        elif value.dtype.kind == "f":
            value = value.astype(value.dtype, copy=True)
            if how == "nan":
                value.flat[0] = np.nan
            else:
                value = value * 4
            record[key] = Array(value)
        elif how == "outside" and value.dtype.kind in "iu":
            record[key] = Array(np.full_like(value, np.iinfo(value.dtype).max))


def hostile_handle(message: Message, context: Context) -> Message:
    """The honest reply, corrupted as the node's plan says for this message (its arrays
    unpacked, corrupted and packed again: a hostile node that speaks the wire format, so its
    corruptions reach the server's decoders)."""
    reply = honest_app(message, context)
    plan = plan_of(context)
    if not plan or reply.has_error():
        return reply
    reply.content = unpack_content(reply.content)
    _corrupt_as_planned(message, reply, plan)
    reply.content = pack_content(reply.content)
    return reply


def _corrupt_as_planned(message: Message, reply: Message, plan: list[str]) -> None:
    """Corrupt ``reply`` (unpacked) in place as ``plan`` says for ``message``."""
    kind = message.metadata.message_type
    if kind == "query.node":
        claims = [int(item.split(":", 1)[1]) for item in plan if item.startswith("claim:")]
        if claims:
            reply.content[NODE][PARTITION_ID] = claims[0]
        if UNUSABLE in plan:
            reply.content[NODE] = ArrayRecord(
                {
                    "x": Array(
                        dtype="bogus",
                        shape=(2**31 - 1,) * 3,
                        stype="numpy.ndarray",
                        data=b"\x00" * 8,
                    )
                }
            )
        return
    config = message.content.config_records.get(CONFIG)
    rounds = [item for item in plan if item in CORRUPTIONS]
    server_round = config.get(SERVER_ROUND) if config is not None else None
    if type(server_round) is int and 1 <= server_round <= len(rounds):
        corrupt(reply, rounds[server_round - 1])


def _register(message_type: str) -> None:
    category, _, action = message_type.partition(".")
    decorator = getattr(app, category)
    (decorator(action) if action else decorator())(hostile_handle)


for _message_type in message_types():
    _register(_message_type)
