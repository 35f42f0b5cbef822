"""A reply's declared fields cannot end or skew a run: the ServerApp meets every reply of every
message type of every family (query.node, query.bounds and query.sketch answers, round 0, train,
evaluate, distillation, one-shot) with the screen first, and the meter never trusts what an
``Array`` declares beside its bytes.

The property, on the real ServerApp and ClientApp (in-process engine), for every family: one
node's replies are mutated in their declared fields (an ``Array``'s dtype, shape and stype,
record keys, values nested where scalars belong, or an extra record holding such an ``Array``;
one mutation per reply, drawn by a generator seeded per case), either every reply after its
admission (train and evaluate of every round, FedFun's bounds, round 0, relay, FFGB's distillation
and one-shot rounds, fedxgb-hist's sketch and every tree level) or its query answers (query.node,
FedFun's query.bounds, fedxgb-hist's query.sketch). The run
completes, and its rows equal those of the same run in which those replies are error replies
instead (a bad reply is a missing reply), but for what was sent and received (bytes, models
exchanged: a node whose reply was dropped did answer, and the strategy may re-sync it either
way). The reply-level property suite (``test_reply_robustness.py``) mutates bytes and values.
"""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
from hypothesis import strategies as st

from client_app.app import app as client_app
from client_app.registry import message_types
from functions.packed_records import pack_content, unpack_content
from functions.records import array_data_bytes, payload_bytes
from functions.secure_sum import GROUP, STAGES
from server_app.results import CLOCKS
from testing.inprocess_grid import counting, round_of
from tests.helpers import run_app

NODES, TARGET = 3, 1  # partition 1's replies are mutated
FAST = {
    "task": "synthetic",
    "num-server-rounds": 2,
    "central-evaluation": False,
    "fedfw.gap": True,
    "local-epochs": 0,
    "local-steps": 2,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 5,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.distill-steps": 2,
    "fedfun.distill-samples": 20,
    "fedfun.hidden": "8",
    "synthetic.samples": 600,
}
RUNS = {  # every family, and FFGB's distillation and one-shot phases
    **{
        name: {"algorithm": name}
        for name in (
            "fedavg",
            "fedprox",
            "fedavg-proj",
            "feddr",
            "fedfw",
            "fedfw-plus",
            "fedfw-sto",
            "ffgb",
            "ffgb-c",
            "ffgb-l",
            "fedfun",
            "psr",
            "dfedavgm",
            "dfedfish",
            "dfeddf",
            "fedxgb-bagging",
            "fedxgb-cyclic",
            "fedxgb-hist",
        )
    },
    # a KDDT of 32 leaves: 2 s, against 33 s with the default budget (1000)
    "fedfun-trees": {"algorithm": "fedfun", "fedfun.learner": "tree", "fedfun.max-leaves": 32},
    # without the gap FedFW's evaluation rides on round 2's train replies (eval-with-train)
    "fedfw-fused": {"algorithm": "fedfw", "fedfw.gap": False},
    "ffgb-distill": {
        "algorithm": "ffgb",
        "ffgb.distill-every": 1,
        "ffgb.distill-rounds": 1,
        "ffgb.distill-steps": 2,
        "num-server-rounds": 3,
    },
    "ffgb-one-shot": {"algorithm": "ffgb-l", "ffgb.one-shot": True, "ffgb.eta0": 1.0},
    # every stage of the secure sums too (their replies' records, masked vectors, shares)
    "fedavg-secure": {"algorithm": "fedavg", "secure-aggregation": True},
    "fedxgb-hist-secure": {
        "algorithm": "fedxgb-hist",
        "secure-aggregation": True,
        "fedxgb-hist.bins": "grid",
    },
    "fedfw-secure": {"algorithm": "fedfw", "secure-aggregation": True, "fedfw.gap": False},
    "ffgb-sealed": {"algorithm": "ffgb", "relay-encryption": True},
    "fedfun-sealed": {"algorithm": "fedfun", "relay-encryption": True},
}
ADDED = ("fedfw-secure", "ffgb-sealed", "fedfun-sealed")  # after the others in the seeds' order


# -- mutations of declared fields ----------------------------------------------------------------
def _arrays(content):
    return [(r, k) for r in content.values() if isinstance(r, ArrayRecord) for k in r]


def declared_dtype(content, draw):
    record, key = draw(st.sampled_from(_arrays(content)))
    old = record[key]
    dtype = draw(
        st.sampled_from(
            ["bogus", "O", "<U7", "V0", "(3,)f8", "<i8" if old.dtype != "<i8" else "<f2"]
        )
    )
    record[key] = Array(dtype=dtype, shape=old.shape, stype=old.stype, data=old.data)


def declared_shape(content, draw):
    record, key = draw(st.sampled_from(_arrays(content)))
    old = record[key]
    shape = draw(
        st.sampled_from([(2**31 - 1,) * 3, (-5,), (), (0,), (*old.shape, 2), (-(2**31),) * 2])
    )
    record[key] = Array(dtype=old.dtype, shape=shape, stype=old.stype, data=old.data)


def declared_stype(content, draw):
    record, key = draw(st.sampled_from(_arrays(content)))
    old = record[key]
    record[key] = Array(
        dtype=old.dtype,
        shape=old.shape,
        data=old.data,
        stype=draw(st.sampled_from(["torch", "", "numpy.ndarray "])),
    )


def renamed_key(content, draw):
    record = content[draw(st.sampled_from(sorted(k for k, r in content.items() if len(r))))]
    key = draw(st.sampled_from(sorted(record.keys())))
    record[key + draw(st.sampled_from(["x", "/", " "]))] = record.pop(key)


def nested_value(content, draw):
    records = sorted(
        k for k, r in content.items() if isinstance(r, ConfigRecord | MetricRecord) and len(r)
    )
    record = content[draw(st.sampled_from(records))]
    key = draw(st.sampled_from(sorted(record.keys())))
    value = record[key]
    if isinstance(record, MetricRecord):
        record[key] = [1.0, 2.0] if not isinstance(value, list) else 1.0
    else:
        record[key] = [value, value] if not isinstance(value, list) else "a list before"


def extra_array_record(content, draw):
    content[draw(st.sampled_from(["junk", "node-extra"]))] = ArrayRecord(
        {
            "x": Array(
                dtype=draw(st.sampled_from(["bogus", "<f8"])),
                shape=(2**31 - 1, 2**31 - 1),
                stype="numpy.ndarray",
                data=b"\x93NUMPY not really",
            )
        }
    )


def mutations_for(content) -> list:
    has_arrays = bool(_arrays(content))
    has_values = any(
        isinstance(r, ConfigRecord | MetricRecord) and len(r) for r in content.values()
    )
    return (
        [extra_array_record]
        + ([declared_dtype, declared_shape, declared_stype] if has_arrays else [])
        + ([renamed_key] if any(len(r) for r in content.values()) else [])
        + ([nested_value] if has_values else [])
    )


# -- the two runs --------------------------------------------------------------------------------
class NodeOfPartition:
    """The ClientApp, but partition ``TARGET``'s replies to the message types it is given are
    mutated (a mutation drawn per reply by a seeded generator), or, with ``mutate=False``, are
    error replies."""

    def __init__(self, types: set[str], seed: int, mutate: bool = True) -> None:
        self.types, self.mutate, self.hits = types, mutate, []
        self.rng = random.Random(seed)

    def __call__(self, message, context):
        reply = client_app(message, context)
        kind = message.metadata.message_type
        if context.node_config["partition-id"] != TARGET or kind not in self.types:
            return reply
        if not self.mutate:
            self.hits.append((kind, round_of(message)))
            raise RuntimeError("no reply")
        if reply.has_error():  # the node could not answer (it holds no key the server has)
            self.hits.append((kind, round_of(message), "error reply"))
            return reply
        content = unpack_content(reply.content)  # a node that speaks the wire format
        change = self.rng.choice(mutations_for(content))
        self.hits.append((kind, round_of(message), change.__name__))
        change(content, Draw(self.rng))
        reply.content = pack_content(content)
        return reply


class Draw:
    """Hypothesis-style ``draw`` over a seeded generator (the mutations take either)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def __call__(self, strategy):  # a st.sampled_from(...)
        return self.rng.choice(list(strategy.elements))


def comparable(rows: list[dict]) -> list[dict]:
    return [
        {
            k: v
            for k, v in r.items()
            if not ("bytes" in k or k in ("models_exchanged", "exchanges", *CLOCKS))
        }
        for r in rows
    ]


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR, logger="flwr")  # every dropped reply logs a warning


ANSWERS = {"query.node", "query.bounds", "query.sketch"}
# each run's seed: its place in this order (runs added later go last: the others' draws stay)
SEEDS = [
    *sorted(set(RUNS) - set(ADDED), key=lambda name: (name.endswith("-secure"), name)),
    *ADDED,
]
SECURE_STAGES = {  # one stage at a time: a node dropped at one is not asked the next
    f"its {kind} replies": {kind} for kind in ("train", *STAGES[1:])
}
CASES = (
    [(name, "every reply after admission") for name in sorted(RUNS)]
    + [(name, "its query answers") for name in ("fedavg", "ffgb", "fedfun", "fedfw", "fedxgb-hist")]
    + [
        (name, which)
        for name in ("fedavg-secure", "fedxgb-hist-secure", "fedfw-secure")
        for which in SECURE_STAGES
    ]
)


@pytest.mark.parametrize(("run_name", "which"), CASES)
def test_mutated_declared_fields_are_a_missing_reply(tmp_path, run_name, which):
    config = counting({**FAST, **RUNS[run_name]})
    every = {*message_types(), *STAGES, GROUP} - {"query.node"}
    types = ANSWERS if which == "its query answers" else SECURE_STAGES.get(which, every)
    seed = SEEDS.index(run_name)
    hostile, missing = NodeOfPartition(types, seed), NodeOfPartition(types, seed, mutate=False)
    bad = run_app(tmp_path / "bad", NODES, client=hostile, **config)
    gone = run_app(tmp_path / "gone", NODES, client=missing, **config)
    assert len(hostile.hits) == len(missing.hits) >= 1
    assert comparable(bad.rows) == comparable(gone.rows), hostile.hits
    for row in bad.rows:
        assert all(math.isfinite(row[k]) and 0 <= row[k] < 2**40 for k in row if "bytes" in k)


def test_the_meter_counts_the_bytes_carried_never_more():
    """An Array's declared dtype and shape are the sender's word: an unknown dtype, a negative or
    a 1e28-element shape counts the bytes the array carries; an honest array its data alone."""
    honest = Array(np.arange(12, dtype=np.float32))
    assert array_data_bytes(honest) == 48 < len(honest.data)
    for dtype, shape in (
        ("bogus", (3,)),
        ("<f8", (2**31 - 1,) * 3),
        ("<f8", (-5,)),
        ("(3,)f8", (40,)),
        ("<f8", (2, -2)),
    ):
        hostile = Array(dtype=dtype, shape=shape, stype="numpy.ndarray", data=honest.data)
        assert array_data_bytes(hostile) == len(honest.data)
    smaller = Array(dtype="(3,)f8", shape=(4,), stype="numpy.ndarray", data=honest.data)
    assert array_data_bytes(smaller) == 96  # a well-formed declaration within what it carries
    content_bytes = payload_bytes(
        {
            "a": ArrayRecord(
                {"x": Array(dtype="bogus", shape=(2**31 - 1,) * 3, stype="x", data=b"abc")}
            )
        }
    )
    assert content_bytes == 3
