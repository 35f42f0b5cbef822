"""No reply can crash the server: property-based mutations of real replies of every algorithm.

For each registered algorithm, one real round is run on the in-process engine and its train and
evaluate replies are kept. Hypothesis then breaks some of them (unparseable array bytes, a
non-numpy stype, text or misshapen arrays, NaN, missing, extra or wrong-kind records, extra keys,
non-finite, negative or absurd metrics) and checks, against a strategy restored to the same state:
the server never raises, each broken reply is exactly one failure, and the outcome (new global
arrays, metrics, strategy state) is what the intact replies alone give, i.e. a broken reply is
the same as no reply.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_app.app import app as client_app
from functions.protocol import CONFIG as CONFIG_RECORD
from functions.protocol import EVALUATE_FIRST, EVALUATION, NUM_EXAMPLES, TRAIN, TRAIN_EXAMPLES
from run_config.common import RunSettings
from run_config.families import algorithm_names
from server_app.packed_grid import unpacked
from strategies.base import FederatedStrategy
from strategies.fedxgb_hist import IterationDropped
from strategies.registry import strategy_for
from testing.inprocess_grid import LocalGrid, counting, run_config
from tests.helpers import restore_saved, run_app, saved

NODES = 4
CONFIG = {
    "task": "synthetic",
    "fedfw.gap": True,
    "central-evaluation": False,
    "local-epochs": 0,
    "local-steps": 2,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 10,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.distill-steps": 2,
    "fedfun.distill-samples": 20,
    "fedfun.hidden": "8",
    "eval-with-train": False,  # evaluate replies of FFGB, FedAvg, FedDR too; fused: see below
}
COUNT_KEYS = (NUM_EXAMPLES, TRAIN_EXAMPLES)
PROPERTY = settings(
    max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@dataclass
class Captured:
    """A strategy's state before aggregating round 1's train (or evaluate) replies, and them."""

    settings: RunSettings
    before_train: RecordDict
    train: list[Message]
    before_evaluate: RecordDict
    evaluate: list[Message]


class RecordingGrid(LocalGrid):
    """The in-process grid, keeping the replies of the first train exchange (``fedxgb-hist``
    grows its trees level by level through the grid, inside ``configure_train``)."""

    first_train: list[Message] | None = None

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        if self.first_train is None and messages and messages[0].metadata.message_type == TRAIN:
            self.first_train = [copy(r) for r in replies]
        return replies


GAP = ("fedfw", "fedfw-plus", "fedfw-sto")  # with fedfw.gap their evaluate exchange stays


def small(algorithm: str, **extra) -> dict:
    """``CONFIG`` for ``algorithm`` (less the keys with no effect there), with ``extra``."""
    overrides = {"algorithm": algorithm, **CONFIG, **extra}
    if algorithm in GAP and overrides.get("fedfw.gap"):  # eval-with-train=false is refused
        overrides.pop("eval-with-train")  # there: it has no effect
    return counting(overrides)


@functools.cache
def captured(algorithm: str) -> Captured:
    config = run_config(**small(algorithm))
    s = RunSettings.from_run_config(config)
    grid = RecordingGrid(client_app, config, NODES)
    strategy = strategy_for(s)
    train = list(
        grid.send_and_receive(
            strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
        )
    )
    if algorithm in LEVELLED:  # its round's first exchange: the roots' histograms
        train = grid.first_train
    before_train = saved(strategy)
    arrays, _ = aggregate(strategy, algorithm, [copy(r) for r in train])
    evaluate = list(
        grid.send_and_receive(strategy.configure_evaluate(1, arrays, ConfigRecord(), grid))
    )
    asked = 1 if algorithm == "fedxgb-cyclic" else NODES  # cyclic: one node trains a round
    assert len(train) == asked and len(evaluate) == NODES
    assert not any(r.has_error() for r in train)
    return Captured(s, before_train, train, saved(strategy), evaluate)


LEVELLED = {"fedxgb-hist"}  # its first exchange asks for the roots: one a tree (or class)


def aggregate(strategy: FederatedStrategy, algorithm: str, replies: list[Message]):
    """``aggregate_train`` of the replies; for ``fedxgb-hist``, its sum of one level's
    histograms (the arrays) and the failures counted while screening them."""
    if algorithm not in LEVELLED:
        return strategy.aggregate_train(1, replies)
    try:
        grad, hess, count, _ = strategy.sum_level(1, replies, strategy.spec.outputs)
        sums = ArrayRecord({k: Array(v) for k, v in (("g", grad), ("h", hess), ("c", count))})
    except IterationDropped:
        sums = None
    return sums, strategy.aggregate_train(1, [])[1]


def copy(message: Message) -> Message:
    return message_from_proto(message_to_proto(message))


def restored(algorithm: str, state: RecordDict) -> FederatedStrategy:
    """A new strategy of the run, restored to ``state`` (what a resumed ServerApp would hold)."""
    strategy = strategy_for(captured(algorithm).settings)
    restore_saved(strategy, state)
    return strategy


# -- mutations: each makes any reply of any algorithm invalid ------------------------------
def _pick(draw, items):
    return draw(st.sampled_from(sorted(items)))


def _array_slot(content: RecordDict, draw):
    name = _pick(draw, [k for k, r in content.items() if isinstance(r, ArrayRecord) and len(r)])
    return content[name], _pick(draw, content[name].keys())


def garbage_bytes(content, draw):
    record, key = _array_slot(content, draw)
    old = record[key]
    data = draw(st.binary(min_size=0, max_size=64).filter(lambda b: not b.startswith(b"\x93NUMPY")))
    record[key] = Array(dtype=old.dtype, shape=old.shape, stype=old.stype, data=data)


def foreign_stype(content, draw):
    record, key = _array_slot(content, draw)
    old = record[key]
    record[key] = Array(
        dtype=old.dtype,
        shape=old.shape,
        stype=draw(st.sampled_from(["torch", "", "numpy"])),
        data=old.data,
    )


def text_array(content, draw):
    record, key = _array_slot(content, draw)
    record[key] = Array(np.array(["x"] * max(1, int(np.prod(record[key].shape)))))


def misshapen_array(content, draw):
    record, key = _array_slot(content, draw)
    value = record[key].numpy()
    record[key] = Array(np.zeros(value.shape + (2,), value.dtype))


def nan_in_floats(content, draw):
    floats = [
        (r, k)
        for r in content.values()
        if isinstance(r, ArrayRecord)
        for k, a in r.items()
        if np.dtype(a.dtype).kind == "f"
    ]
    record, key = floats[draw(st.integers(0, len(floats) - 1))]
    value = record[key].numpy().copy()
    value.flat[draw(st.integers(0, value.size - 1))] = draw(st.sampled_from([np.nan, np.inf]))
    record[key] = Array(value)


def missing_record(content, draw):
    del content[_pick(draw, content.keys())]


def extra_record(content, draw):
    content[draw(st.sampled_from(["junk", "extra"]))] = ConfigRecord({"x": 1})


def wrong_kind(content, draw):
    name = _pick(draw, content.keys())
    content[name] = (
        ConfigRecord({"x": 1})
        if isinstance(content[name], ArrayRecord)
        else ArrayRecord({"x": Array(np.zeros(1, np.float32))})
    )


def extra_key(content, draw):
    record = content[
        _pick(draw, [k for k, r in content.items() if isinstance(r, ArrayRecord | MetricRecord)])
    ]
    record["junk"] = Array(np.zeros(1, np.float32)) if isinstance(record, ArrayRecord) else 1.0


def bad_metric(content, draw):
    record = content[_pick(draw, [k for k, r in content.items() if isinstance(r, MetricRecord)])]
    key = _pick(draw, record.keys())
    bad = [math.nan, math.inf, -math.inf, -1.0]
    if key in COUNT_KEYS:
        bad += [1e12, 2.5]
    record[key] = draw(st.sampled_from(bad))


def mutations_for(content: RecordDict) -> list:
    has = {
        kind: any(isinstance(r, kind) for r in content.values())
        for kind in (ArrayRecord, MetricRecord)
    }
    arrays = any(isinstance(r, ArrayRecord) and len(r) for r in content.values())
    floats = any(
        np.dtype(a.dtype).kind == "f"
        for r in content.values()
        if isinstance(r, ArrayRecord)
        for a in r.values()
    )
    return (
        [missing_record, extra_record, wrong_kind]
        + ([garbage_bytes, foreign_stype, text_array, misshapen_array] if arrays else [])
        + ([nan_in_floats] if floats else [])
        + ([extra_key] if has[ArrayRecord] or has[MetricRecord] else [])
        + ([bad_metric] if has[MetricRecord] else [])
    )


def broken(replies: list[Message], draw) -> tuple[list[Message], list[int]]:
    """Copies of ``replies`` with a non-empty drawn subset mutated; and the mutated indices."""
    bad = sorted(draw(st.sets(st.integers(0, len(replies) - 1), min_size=1)))
    out = [copy(r) for r in replies]
    for i in bad:
        mutate = draw(st.sampled_from(mutations_for(out[i].content)))
        mutate(out[i].content, draw)
    return out, bad


# -- comparing outcomes --------------------------------------------------------------------
def canonical(records: RecordDict | ArrayRecord | MetricRecord | None) -> object:
    """A comparable form: arrays by dtype, shape and bytes; other records as dicts."""
    if records is None:
        return None
    if isinstance(records, ArrayRecord):
        return {k: (a.dtype, tuple(a.shape), a.numpy().tobytes()) for k, a in records.items()}
    if isinstance(records, RecordDict):
        return {k: canonical(r) for k, r in records.items()}
    return dict(records)


def without_sync_of(state: dict, nodes: set[int]) -> dict:
    """The state with the re-sync flag of ``nodes`` hidden: a node whose reply was dropped did
    answer (so it holds state), while a node that did not reply may not; both are right."""
    book = state.get("book")
    if book is not None:
        ids = [int(n) for n in book["node-ids"]]
        book["needs-sync"] = [None if n in nodes else f for n, f in zip(ids, book["needs-sync"])]
    return state


def metrics_without_failures(metrics: MetricRecord | None) -> dict:
    return {k: v for k, v in (metrics or {}).items() if k != "failures"}


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR, logger="flwr")  # every dropped reply logs a warning


@pytest.mark.parametrize("algorithm", algorithm_names())
@PROPERTY
@given(data=st.data())
def test_a_broken_train_reply_is_one_failure_and_otherwise_no_reply(algorithm, data):
    run = captured(algorithm)
    replies, bad = broken(run.train, data.draw)
    nodes = {run.train[i].metadata.src_node_id for i in bad}
    hit, clean = restored(algorithm, run.before_train), restored(algorithm, run.before_train)
    arrays, metrics = aggregate(hit, algorithm, replies)
    expected_arrays, expected = aggregate(
        clean, algorithm, [copy(r) for i, r in enumerate(run.train) if i not in bad]
    )
    assert metrics["failures"] == len(bad) and expected["failures"] == 0
    assert metrics_without_failures(metrics) == metrics_without_failures(expected)
    assert canonical(arrays) == canonical(expected_arrays)
    assert without_sync_of(canonical(saved(hit)), nodes) == without_sync_of(
        canonical(saved(clean)), nodes
    )


@pytest.mark.parametrize("algorithm", algorithm_names())
@PROPERTY
@given(data=st.data())
def test_a_broken_evaluate_reply_is_one_failure_and_otherwise_no_reply(algorithm, data):
    run = captured(algorithm)
    replies, bad = broken(run.evaluate, data.draw)
    hit, clean = restored(algorithm, run.before_evaluate), restored(algorithm, run.before_evaluate)
    metrics = hit.aggregate_evaluate(1, replies)
    expected = clean.aggregate_evaluate(
        1, [copy(r) for i, r in enumerate(run.evaluate) if i not in bad]
    )
    assert metrics["failures"] == len(bad) and expected["failures"] == 0
    assert metrics_without_failures(metrics) == metrics_without_failures(expected)
    assert len(metrics) > 1 or len(bad) == NODES  # the good replies' figures, and failures
    assert canonical(saved(hit)) == canonical(saved(clean))


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_a_second_reply_from_a_node_is_one_failure_and_ignored(algorithm):
    run = captured(algorithm)
    second = copy(run.train[0])
    corrupt_first_array(second)
    hit, clean = restored(algorithm, run.before_train), restored(algorithm, run.before_train)
    arrays, metrics = aggregate(hit, algorithm, [copy(r) for r in run.train] + [second])
    expected_arrays, expected = aggregate(clean, algorithm, [copy(r) for r in run.train])
    assert metrics["failures"] == 1 and expected["failures"] == 0
    assert canonical(arrays) == canonical(expected_arrays)
    assert canonical(saved(hit)) == canonical(saved(clean))


def corrupt_first_array(reply: Message) -> None:
    """Replace the bytes of the reply's first array with bytes that are not a .npy file."""
    record = next(r for r in reply.content.values() if isinstance(r, ArrayRecord) and len(r))
    key = next(iter(record.keys()))
    old = record[key]
    record[key] = Array(dtype=old.dtype, shape=old.shape, stype=old.stype, data=b"not npy")


@pytest.mark.parametrize("algorithm", ["fedfw", "fedavg"])
def test_garbage_bytes_in_train_and_evaluate_are_counted_and_the_run_completes(
    tmp_path, algorithm, caplog
):
    """Partition 0 answers round 2 (train and evaluate) with an unreadable array."""

    def garbling(message, context):
        reply = unpacked(client_app(message, context))  # its arrays as sent
        if (
            context.node_config["partition-id"] == 0
            and message.metadata.message_type in ("train", "evaluate")
            and message.content["config"]["server-round"] == 2
        ):
            if message.metadata.message_type == "evaluate":
                reply.content["junk-grad"] = ArrayRecord({"g": Array(np.zeros(2, np.float32))})
            corrupt_first_array(reply)
        return reply

    caplog.set_level(logging.WARNING, logger="flwr")
    run = run_app(
        tmp_path,
        4,
        client=garbling,
        **small(algorithm, **{"num-server-rounds": 3}),
    )
    rows = run.rows
    assert [r["failures"] for r in rows[1:]] == [0, 2, 0]
    assert [r["round"] for r in rows] == [0, 1, 2, 3] and rows[-1]["train_loss"] > 0
    node = run.grid.node_ids[0]
    dropped = [
        r.getMessage()
        for r in caplog.records
        if f"dropped the reply of node {node}" in r.getMessage()
    ]
    assert len(dropped) == 2 and any("unreadable array" in m for m in dropped), dropped


# -- the evaluation riding on the next round's training (``eval-with-train``) -----------------
FUSED = ("ffgb", "ffgb-c", "ffgb-l", "fedavg", "fedprox", "fedavg-proj", "feddr", *GAP)
FUSED += ("fedxgb-bagging", "fedfun", "psr", "dfedfish", "dfeddf", "dfedavgm")


@functools.cache
def captured_fused(algorithm: str) -> tuple[RunSettings, RecordDict, list[Message]]:
    """Round 2's train replies, each with its node's evaluation of round 1's function, and the
    strategy's state before they are aggregated."""
    fused = {"eval-with-train": True, "fedfw.gap": False}  # the gap's gradient has its own
    config = run_config(**small(algorithm, **fused))
    s = RunSettings.from_run_config(config)
    grid, strategy = LocalGrid(client_app, config, NODES), strategy_for(s)
    train = grid.send_and_receive(
        strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
    )
    arrays, _ = strategy.aggregate_train(1, [copy(r) for r in train])
    assert list(strategy.configure_evaluate(1, arrays, ConfigRecord(), grid)) == []
    messages = list(strategy.configure_train(2, arrays, ConfigRecord(), grid))
    replies = list(grid.send_and_receive(messages))
    assert all(EVALUATION in r.content for r in replies) and len(replies) == NODES
    return s, saved(strategy), replies


def fused_aggregate(algorithm: str, state: RecordDict, replies: list[Message]):
    """A strategy restored to ``state``, told that round 2's messages asked for round 1's
    evaluation, aggregating ``replies``: its arrays, training metrics, round 1's evaluation and
    state."""
    strategy = strategy_for(captured_fused(algorithm)[0])
    restore_saved(strategy, state)
    strategy.evaluation_due = 1
    asked = captured_fused(algorithm)[2]  # every node was asked, whatever became of its reply
    strategy._asked_to_evaluate = frozenset(r.metadata.src_node_id for r in asked)
    arrays, metrics = strategy.aggregate_train(2, replies)
    due, evaluation = strategy.late_evaluation
    assert due == 1
    return arrays, metrics, evaluation, strategy


@pytest.mark.parametrize("algorithm", FUSED)
@PROPERTY
@given(data=st.data())
def test_a_broken_train_reply_with_its_evaluation_is_one_failure_of_each_round(algorithm, data):
    """Whichever part of the reply is broken (its training or its evaluation), the reply counts
    as none: one failure of round 2's training and one of round 1's evaluation."""
    _, state, replies = captured_fused(algorithm)
    hit_replies, bad = broken(replies, data.draw)
    nodes = {replies[i].metadata.src_node_id for i in bad}
    arrays, metrics, evaluation, hit = fused_aggregate(algorithm, state, hit_replies)
    good = [copy(r) for i, r in enumerate(replies) if i not in bad]
    want_arrays, want, want_evaluation, clean = fused_aggregate(algorithm, state, good)
    assert metrics["failures"] == len(bad) and want["failures"] == 0
    assert evaluation["failures"] == want_evaluation["failures"] == len(bad)
    assert metrics_without_failures(metrics) == metrics_without_failures(want)
    assert metrics_without_failures(evaluation) == metrics_without_failures(want_evaluation)
    assert canonical(arrays) == canonical(want_arrays)
    assert without_sync_of(canonical(saved(hit)), nodes) == without_sync_of(
        canonical(saved(clean)), nodes
    )


@pytest.mark.parametrize("algorithm", ["fedavg", "dfedavgm"])
def test_one_nan_reply_beside_replies_without_their_evaluation_is_no_divergence(algorithm):
    """Every reply broken: three lack the evaluation asked for, one carries NaN in its
    training part. Not every dropped reply carried NaN, so the round has not diverged: four
    failures of training and of evaluation (hypothesis found this: the NaN reply was the only
    one left for the family's screen, which took it for the whole round)."""
    _, state, replies = captured_fused(algorithm)
    hit = [copy(r) for r in replies]
    for reply in hit[:-1]:
        del reply.content[EVALUATION]
    record, key = next(
        (r, k)
        for r in hit[-1].content.values()
        if isinstance(r, ArrayRecord)
        for k, a in r.items()
        if np.dtype(a.dtype).kind == "f"
    )
    value = record[key].numpy().copy()
    value.flat[0] = np.nan
    record[key] = Array(value)
    arrays, metrics, evaluation, _ = fused_aggregate(algorithm, state, hit)
    assert metrics["failures"] == evaluation["failures"] == NODES


class RootGrid(LocalGrid):
    """The in-process grid, keeping the replies to the last train messages that asked for an
    evaluation (``fedxgb-hist``'s root level of a round after the first)."""

    roots: list[Message] = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        if messages and all(
            EVALUATE_FIRST in m.content.config_records.get(CONFIG_RECORD, {}) for m in messages
        ):
            self.roots = [copy(r) for r in replies]
        return replies


@functools.cache
def captured_root() -> tuple[RunSettings, RecordDict, list[Message]]:
    """``fedxgb-hist``: round 2's root replies, each with its node's evaluation of round 1's
    booster, and the strategy's state before they are summed."""
    config = run_config(**small("fedxgb-hist", **{"eval-with-train": True}))
    s = RunSettings.from_run_config(config)
    grid, strategy = RootGrid(client_app, config, NODES), strategy_for(s)
    strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
    arrays, _ = strategy.aggregate_train(1, [])
    assert list(strategy.configure_evaluate(1, arrays, ConfigRecord(), grid)) == []
    state = saved(strategy)
    strategy.configure_train(2, arrays, ConfigRecord(), grid)
    assert all(EVALUATION in r.content for r in grid.roots) and len(grid.roots) == NODES
    return s, state, grid.roots


def summed_root(state: RecordDict, replies: list[Message]):
    """A strategy restored to ``state``, round 1's evaluation due, summing round 2's root
    ``replies``: the sums (None: the iteration dropped), the failures and round 1's
    evaluation."""
    settings, _, asked = captured_root()
    strategy = strategy_for(settings)
    restore_saved(strategy, state)
    nodes = [r.metadata.src_node_id for r in asked]
    try:
        grad, hess, count, members = strategy._root_with_evaluation(
            2, 1, nodes, replies, strategy.spec.outputs
        )
        sums = (grad.tobytes(), hess.tobytes(), count.tobytes(), members)
    except IterationDropped:
        sums = None
    due, evaluation = strategy.late_evaluation
    assert due == 1
    return sums, strategy._failures, evaluation


@PROPERTY
@given(data=st.data())
def test_a_broken_root_reply_with_its_evaluation_is_one_failure_of_each_round(data):
    """fedxgb-hist: whichever part of a root reply is broken (its histograms or its
    evaluation), the reply counts as none: one failure of round 2's training, one of round 1's
    evaluation, and the root sums of the intact replies alone."""
    _, state, replies = captured_root()
    hit_replies, bad = broken(replies, data.draw)
    sums, failures, evaluation = summed_root(state, hit_replies)
    good = [copy(r) for i, r in enumerate(replies) if i not in bad]
    want_sums, want_failures, want_evaluation = summed_root(state, good)
    assert failures == len(bad) and want_failures == 0
    assert evaluation["failures"] == want_evaluation["failures"] == len(bad)
    assert metrics_without_failures(evaluation) == metrics_without_failures(want_evaluation)
    assert sums == want_sums
