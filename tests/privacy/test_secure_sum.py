"""Secure aggregation's protocol (``strategies.secure_sum``, ``client_app.secure_sum``): on the
in-process engine, with a ClientApp whose nodes each reply a known vector, the server gets the
sum and no node's vector; nodes may drop at every stage while a majority of each secret's holders
remains; a malformed reply is dropped with its reason; an honest node refuses requests that
would reveal more than the sum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client_app.secure_sum import HANDLERS, keys, masked_reply, setup, unmask
from functions.errors import DecodeError, NonFiniteError
from functions.secure_sum import (
    ALIVE,
    DROPPED,
    KEYS,
    MASKED,
    ME,
    NEIGHBOUR_KEYS,
    NEIGHBOURS,
    OWN_KEY,
    SEALED,
    SEALING_KEY,
    SECAGG,
    SHARES,
    SUM,
    THRESHOLD,
    UNMASK,
    VECTOR,
    SumField,
    SumLayout,
    scale_bits,
)
from strategies.secure_sum import SecureAggregator, neighbourhoods
from testing.inprocess_grid import LocalGrid, enter_run
from testing.recording_grid import RecordingGrid

SIZE = 6
FIELDS = [SumField("arrays", "x", SIZE, 100.0), SumField("metrics", "n", 1, 1000.0, integer=True)]


def node_values(partition: int) -> tuple[np.ndarray, int]:
    rng = np.random.default_rng(partition)
    return rng.normal(0, 10, SIZE), 10 + partition


def toy_app(hostile=None) -> ClientApp:
    """Nodes that reply ``node_values`` of their partition to a ``train`` message, through the
    project's node half of the secure sum; ``hostile(partition, message_type, reply)`` may alter
    or refuse a reply."""
    app = ClientApp()

    def answer(content: RecordDict, partition: int) -> RecordDict:
        x, n = node_values(partition)
        return RecordDict(
            {"arrays": ArrayRecord({"x": Array(x)}), "metrics": MetricRecord({"n": n})}
        )

    def handle(message: Message, context: Context) -> Message:
        kind = message.metadata.message_type
        partition = context.node_config["partition-id"]
        if kind in HANDLERS:
            content = HANDLERS[kind](message.content, context.state)
        else:
            content = masked_reply(message.content, context.state, lambda c: answer(c, partition))
        if hostile is not None:
            content = hostile(partition, kind, content)
        return Message(content, reply_to=message)

    for kind in ("train", *HANDLERS):
        category, _, action = kind.partition(".")
        getattr(app, category)(action)(handle) if action else getattr(app, category)()(handle)
    return app


def secure_sum(nodes: int, hostile=None, aggregator=None, fields=FIELDS, weight=""):
    grid = RecordingGrid(LocalGrid(toy_app(hostile), {}, nodes))
    aggregator = aggregator or SecureAggregator("test", seed=0)
    messages = [Message(RecordDict(), n, "train", group_id="1") for n in grid.get_node_ids()]
    return aggregator.exchange(grid, 1, messages, fields, weight), grid


def plain_sum(partitions) -> np.ndarray:
    return sum(node_values(p)[0] for p in partitions)


def test_the_sum_of_three_nodes_is_exact_and_no_reply_holds_a_nodes_vector():
    outcome, grid = secure_sum(3)
    assert outcome.error == "" and len(outcome.contributors) == 3
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum(range(3)), rtol=0, atol=1e-12)
    assert outcome.sums["metrics/n"].tolist() == [10 + 11 + 12]
    layout = SumLayout.of(FIELDS, 3)
    for exchange in grid.exchanges:
        reply = exchange.reply.content
        assert "arrays" not in reply and "metrics" not in reply  # taken out, masked
        if MASKED in reply:
            vector = reply[MASKED][VECTOR].numpy()
            partition = grid._inner.contexts[exchange.sent.metadata.dst_node_id].node_config[
                "partition-id"
            ]
            x, n = node_values(partition)
            plain = layout.take(
                RecordDict(
                    {"arrays": ArrayRecord({"x": Array(x)}), "metrics": MetricRecord({"n": n})}
                )
            )
            assert not np.any(vector == plain)  # every word masked
            assert vector.view(np.int64).std() > 2.0**60  # spread over the whole ring


def test_sealing_keys_come_once_a_run_and_each_unmask_brings_the_next_sums_keys():
    grid = RecordingGrid(LocalGrid(toy_app(), {}, 3))
    aggregator = SecureAggregator("test", seed=0)
    for _ in range(3):
        messages = [Message(RecordDict(), n, "train", group_id="1") for n in grid.get_node_ids()]
        outcome = aggregator.exchange(grid, 1, messages, FIELDS)
        assert outcome.error == ""
        np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum(range(3)), atol=1e-12)
    kinds = [e.sent.metadata.message_type for e in grid.exchanges]
    assert kinds.count("train.secagg_setup") == 3 and kinds.count("train.secagg_keys") == 3
    assert kinds.count("train") == 9 and kinds.count(UNMASK) == 9
    # a sum over other nodes than the last one's contributors asks for its own keys
    messages = [Message(RecordDict(), n, "train", group_id="1") for n in grid.get_node_ids()]
    aggregator.exchange(grid, 1, messages[:2], FIELDS)
    kinds = [e.sent.metadata.message_type for e in grid.exchanges]
    assert kinds.count("train.secagg_keys") == 3  # two of three still hold a majority each
    outcome = aggregator.exchange(grid, 1, messages, FIELDS)  # the third was not keyed
    assert outcome.error == "" and len(outcome.contributors) == 3
    kinds = [e.sent.metadata.message_type for e in grid.exchanges]
    assert kinds.count("train.secagg_keys") == 6


def refuse(partitions, stage):
    def hostile(partition, kind, content):
        if partition in partitions and kind == stage:
            raise RuntimeError(f"node {partition} is gone")
        return content

    return hostile


def test_a_node_that_drops_after_sending_its_shares_leaves_the_sum_of_the_others():
    outcome, _ = secure_sum(3, refuse({1}, "train"))
    assert outcome.error == "" and len(outcome.contributors) == 2
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum([0, 2]), atol=1e-12)
    assert outcome.sums["metrics/n"].tolist() == [10 + 12]


def test_a_node_that_drops_after_sending_its_vector_stays_in_the_sum():
    outcome, _ = secure_sum(3, refuse({2}, UNMASK))
    assert outcome.error == "" and len(outcome.contributors) == 3
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum(range(3)), atol=1e-12)


def test_ten_of_a_hundred_nodes_drop_after_sending_their_shares():
    gone = set(range(3, 100, 10))
    outcome, _ = secure_sum(100, refuse(gone, "train"))
    assert outcome.error == "", outcome.error
    assert len(outcome.contributors) == 90
    np.testing.assert_allclose(
        outcome.sums["arrays/x"], plain_sum(set(range(100)) - gone), rtol=0, atol=1e-9
    )


def test_too_few_nodes_left_fail_the_sum_in_one_sentence():
    outcome, _ = secure_sum(3, refuse({0, 1}, "train"))
    assert outcome.sums == {} and outcome.contributors == []
    assert "fewer than 2 nodes" in outcome.error and "\n" not in outcome.error


def test_a_malformed_share_is_dropped_with_its_reason_and_the_sum_survives():
    def hostile(partition, kind, content):
        if partition == 0 and kind == UNMASK:
            shares = list(content[SECAGG][SHARES])
            shares[0] = shares[0][:1] + bytes(len(shares[0]) - 1)  # the right size, a wrong share
            content[SECAGG][SHARES] = shares
        return content

    outcome, _ = secure_sum(5, hostile)
    assert outcome.error == "" and len(outcome.contributors) == 5
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum(range(5)), atol=1e-12)
    assert outcome.failures == 1
    assert "does not match its commitment" in next(iter(outcome.reasons.values()))


def test_shares_for_nodes_that_do_not_exist_drop_the_sender():
    def hostile(partition, kind, content):
        if partition == 1 and kind == KEYS:
            record = content[SECAGG]
            record["destinations"] = [*record["destinations"][:-1], 999]
        return content

    outcome, _ = secure_sum(4, hostile)
    assert outcome.error == "" and len(outcome.contributors) == 3
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum([0, 2, 3]), atol=1e-12)
    assert outcome.failures == 1
    (reason,) = outcome.reasons.values()
    assert "no neighbour: [999]" in reason


def test_a_malformed_masked_vector_is_dropped_and_its_masks_removed():
    def hostile(partition, kind, content):
        if partition == 2 and kind == "train":
            vector = content[MASKED][VECTOR].numpy()
            content[MASKED] = ArrayRecord({VECTOR: Array(vector.astype(np.float64))})
        return content

    outcome, _ = secure_sum(3, hostile)
    assert outcome.error == "" and len(outcome.contributors) == 2
    np.testing.assert_allclose(outcome.sums["arrays/x"], plain_sum([0, 1]), atol=1e-12)
    assert "uint64" in next(iter(outcome.reasons.values()))


def test_a_weighted_sum_multiplies_every_field_by_the_weight():
    fields = [SumField("arrays", "x", SIZE, 100.0 * 20), SumField("metrics", "n", 1, 20.0, True)]
    outcome, _ = secure_sum(3, fields=fields, weight="metrics/n")
    expected = sum(node_values(p)[1] * node_values(p)[0] for p in range(3))
    np.testing.assert_allclose(outcome.sums["arrays/x"], expected, atol=1e-9)
    assert outcome.sums["metrics/n"].tolist() == [33]


# -- fixed point ---------------------------------------------------------------------------------
def test_fixed_point_sums_are_exact_to_the_scale_and_bounds_are_refused_not_clipped():
    field = SumField("arrays", "x", 1000, 1.0)
    layout = SumLayout.of([field], 7)
    rng = np.random.default_rng(0)
    values = [rng.uniform(-1, 1, 1000) for _ in range(7)]
    total = np.zeros(1000, np.uint64)
    for v in values:
        total += layout.take(RecordDict({"arrays": ArrayRecord({"x": Array(v)})}))
    summed = layout.split(total)["arrays/x"]
    exact = [math.fsum(column) for column in zip(*values)]
    # each node's rounding to 2^-bits, then float64's own rounding of the result
    assert np.max(np.abs(summed - exact)) <= 7 * 2.0 ** -(layout.bits[0] + 1) + 2.0**-50
    assert layout.bits[0] == scale_bits(field, 7) == 59
    with pytest.raises(DecodeError, match="beyond the bound"):
        layout.take(RecordDict({"arrays": ArrayRecord({"x": Array(np.full(1000, 1.5))})}))
    with pytest.raises(NonFiniteError):
        layout.take(RecordDict({"arrays": ArrayRecord({"x": Array(np.full(1000, np.nan))})}))
    with pytest.raises(ValueError, match="coarser"):
        scale_bits(SumField("a", "x", 1, 2.0**50), 10)


def test_the_graph_is_a_ring_of_majorities_for_many_nodes_and_complete_for_few():
    graph, threshold = neighbourhoods(3, np.random.default_rng(0))
    assert graph == [[1, 2], [0, 2], [0, 1]] and threshold == 2
    graph, threshold = neighbourhoods(100, np.random.default_rng(0))
    assert {len(g) for g in graph} == {14} and threshold == 8
    assert all(p in graph[q] for p in range(100) for q in graph[p])  # symmetric


# -- an honest node refuses ----------------------------------------------------------------------
def keyed_node():
    """One node's state after setup and keys (position 0 of a complete sum of three)."""
    enter_run()
    state = RecordDict()
    own = setup(RecordDict(), state)[SECAGG][SEALING_KEY]
    others = [setup(RecordDict(), RecordDict())[SECAGG][SEALING_KEY] for _ in range(2)]
    request = {SUM: 1, ME: 0, NEIGHBOURS: [1, 2], NEIGHBOUR_KEYS: others, OWN_KEY: own}
    return state, request


def test_a_node_refuses_a_threshold_below_a_majority_of_the_holders():
    state, request = keyed_node()
    with pytest.raises(DecodeError, match="majority"):
        keys(RecordDict({SECAGG: ConfigRecord({**request, THRESHOLD: 1})}), state)


def test_a_node_never_gives_both_shares_of_one_neighbour_and_answers_unmask_once():
    state, request = keyed_node()
    keys(RecordDict({SECAGG: ConfigRecord({**request, THRESHOLD: 2})}), state)
    layout = SumLayout.of([SumField("arrays", "x", 2, 1.0)], 3).to_config()
    content = RecordDict(
        {SECAGG: ConfigRecord({SUM: 1, NEIGHBOURS: [], NEIGHBOUR_KEYS: [], SEALED: [], **layout})}
    )
    content[SECAGG]["sources"] = []
    with pytest.raises(DecodeError, match="fewer neighbours"):
        masked_reply(content, state, lambda c: RecordDict())
    both = RecordDict({SECAGG: ConfigRecord({SUM: 1, ALIVE: [1], DROPPED: [1]})})
    state["secagg"]["stage"] = MASKED
    state["secagg"]["vector-neighbours"] = [1, 2]
    with pytest.raises(DecodeError, match="both alive and dropped"):
        unmask(both, state)
    fine = RecordDict({SECAGG: ConfigRecord({SUM: 1, ALIVE: [1, 2], DROPPED: []})})
    with pytest.raises(DecodeError, match="holds no shares"):  # none were sealed to it here
        unmask(fine, state)
    state["secagg"]["held-owners"] = [0, 1, 2]
    state["secagg"]["held-seed"] = [b"a", b"b", b"c"]
    state["secagg"]["held-key"] = [b"d", b"e", b"f"]
    assert unmask(fine, state)[SECAGG][SHARES] == [b"a", b"b", b"c"]
    with pytest.raises(Exception, match="no masked vector"):
        unmask(fine, state)


class Reversed(RecordingGrid):
    """Replies in the reverse order of the messages, as an engine may deliver them."""

    def pull_messages(self, message_ids):
        return list(reversed(list(super().pull_messages(message_ids))))


def test_contributors_come_in_the_messages_order_whatever_order_replies_arrive_in():
    grid = Reversed(LocalGrid(toy_app(), {}, 4))
    aggregator = SecureAggregator("test", seed=0)
    nodes = list(grid.get_node_ids())
    for _ in range(2):  # the second sum runs on keys its first unmask brought, out of order
        messages = [Message(RecordDict(), n, "train", group_id="1") for n in nodes]
        outcome = aggregator.exchange(grid, 1, messages, FIELDS)
        assert outcome.contributors == nodes
