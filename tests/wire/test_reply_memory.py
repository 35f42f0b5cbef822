"""Bound before you build: a reply of up to 64 MiB costs the server no memory beyond what an
honest reply costs (within 64 MiB), whatever it declares.

Each case meters a round's replies (the metered grid's count, payload and wire size) and hands
them to the strategy, as the ServerApp does; the peak resident memory of that step is measured
from the process's own high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) and
compared with the same step on the honest replies. Before the bounds, a 64 MiB array cost 192 MiB
in the wire meter alone, a 64 MiB config value 384 MiB, and 200,000 one-leaf trees in an FFGB
delta +164 MiB and 10 s before the learner count was compared with K.
"""

from __future__ import annotations

import gc
import logging
import re
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from functions.protocol import DELTA, DELTA_ARRAYS
from server_app.metered_grid import MeteredGrid
from tests.wire.test_reply_robustness import captured, copy, restored

MiB = 2**20
FAMILIES = ("fedavg", "fedfw", "ffgb", "fedfun")
CLEAR_REFS = Path("/proc/self/clear_refs")


def resident() -> tuple[int, int]:
    """(current, peak since the last reset) resident bytes of this process."""
    status = Path("/proc/self/status").read_text()
    return tuple(
        int(re.search(rf"{field}:\s+(\d+)", status).group(1)) * 1024 for field in ("VmRSS", "VmHWM")
    )


def peak_of(step) -> int:
    """The resident memory ``step()`` adds at its peak."""
    gc.collect()
    CLEAR_REFS.write_text("5")  # reset VmHWM to the current resident size
    before, _ = resident()
    step()
    return resident()[1] - before


class Replies:
    """A grid whose send_and_receive gives back fixed replies (what a SuperLink delivered)."""

    def __init__(self, replies: list[Message]) -> None:
        self.replies = replies

    def send_and_receive(self, messages, *, timeout=None):
        return self.replies


def meter_and_aggregate(algorithm: str, replies: list[Message]) -> dict:
    """What the ServerApp does with a round's train replies; the round's metrics."""
    strategy = restored(algorithm, captured(algorithm).before_train)

    def step() -> None:
        grid = MeteredGrid(Replies(replies))
        grid.send_and_receive(
            [Message(RecordDict(), r.metadata.src_node_id, "train", group_id="1") for r in replies]
        )
        step.counters = grid.take()
        step.metrics = strategy.aggregate_train(1, replies)[1]

    step.extra = peak_of(step)
    return {"extra": step.extra, "counters": step.counters, "metrics": step.metrics}


def big_array(reply: Message) -> None:
    """The first array of the reply replaced by 64 MiB of float32 (a well-formed array)."""
    record = next(r for r in reply.content.values() if isinstance(r, ArrayRecord) and len(r))
    record[next(iter(record.keys()))] = Array(np.ones(64 * MiB // 4, np.float32))


def big_config(reply: Message) -> None:
    """A 64 MiB bytes value in a config record of the reply."""
    reply.content["junk"] = ConfigRecord({"blob": b"\x00" * (64 * MiB)})


def lying_header(reply: Message) -> None:
    """An array whose .npy header declares 10^12 float64 (numpy's loader would allocate them)."""
    record = next(r for r in reply.content.values() if isinstance(r, ArrayRecord) and len(r))
    key = next(iter(record.keys()))
    old = record[key]
    header = old.data[: old.data.index(b"\n") + 1]
    lie = header.replace(repr(tuple(old.shape)).encode(), b"(1000000000000,)")
    record[key] = Array(
        dtype="float64", shape=(10**6, 10**6), stype=old.stype, data=lie + b"\x00" * 64
    )


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR, logger="flwr")


@pytest.mark.skipif(not CLEAR_REFS.exists(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("algorithm", FAMILIES)
@pytest.mark.parametrize("attack", [big_array, big_config, lying_header], ids=lambda f: f.__name__)
@pytest.mark.e2e
def test_one_hostile_reply_costs_no_more_memory_than_an_honest_one(algorithm, attack):
    honest = meter_and_aggregate(algorithm, [copy(r) for r in captured(algorithm).train])
    replies = [copy(r) for r in captured(algorithm).train]
    attack(replies[0])
    hostile = meter_and_aggregate(algorithm, replies)
    assert hostile["metrics"]["failures"] == 1
    assert hostile["extra"] < honest["extra"] + 64 * MiB, (
        hostile["extra"] / MiB,
        honest["extra"] / MiB,
    )


def test_an_ffgb_delta_of_200000_trees_is_refused_before_it_is_decoded():
    """K = 2 learners a round; the reply declares 200,000 one-leaf trees (9.5 MiB on the wire)."""
    reply = copy(captured("ffgb").train[0])
    count, outputs = 200_000, int(reply.content[DELTA]["n_outputs"])
    config = dict(reply.content[DELTA])
    config.update({"count": count, "groups": 1, "g0.count": count, "g0.kind": "tree"})
    config = {
        k: v
        for k, v in config.items()
        if not k.startswith("g") or k.startswith("g0.c") or k == "g0.kind" or k == "groups"
    }
    reply.content[DELTA] = ConfigRecord(config)
    reply.content[DELTA_ARRAYS] = ArrayRecord(
        {
            "weights": Array(np.full(count, 0.1)),
            "g0.sizes": Array(np.ones(count, np.int64)),
            "g0.feature": Array(np.full(count, -1, np.int64)),
            "g0.threshold": Array(np.zeros(0, np.float32)),
            "g0.value": Array(np.zeros((count, outputs), np.float32)),
        }
    )
    replies = [reply, *(copy(r) for r in captured("ffgb").train[1:])]
    started = time.perf_counter()
    hostile = meter_and_aggregate("ffgb", replies)
    assert time.perf_counter() - started < 2.0
    assert hostile["metrics"]["failures"] == 1
    assert hostile["extra"] < 16 * MiB
