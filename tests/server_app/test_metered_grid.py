"""The metered grid's own exchange for Flower's deployment grid (which sleeps a fixed 3 s
between pulls): push once, then pull what is missing every ``reply-poll-interval`` seconds until
every reply is in or ``reply-timeout`` has passed."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.superlink.grid.http_grid import HttpGrid
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from server_app.metered_grid import MeteredGrid, own_pull_interval
from testing.inprocess_grid import enter_run


class SlowGrid:
    """A grid whose node ``n`` answers on the ``n``-th pull after the push (never when ``n`` is
    None); ``send_and_receive`` must not be used (it is Flower's, with its 3 s sleep)."""

    def __init__(self, answers_on: dict[int, int | None]) -> None:
        self.answers_on = answers_on
        self.pulls = 0
        self.sent: dict[str, Message] = {}

    def push_messages(self, messages):
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id  # as Flower's grids do
            self.sent[message.metadata.message_id] = message
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        self.pulls += 1
        replies = []
        for message_id in message_ids:
            message = self.sent[message_id]
            due = self.answers_on[message.metadata.dst_node_id]
            if due is not None and self.pulls >= due:
                content = RecordDict({"w": ArrayRecord({"a": Array(np.ones(3))})})
                replies.append(Message(content, reply_to=message))
        return replies

    def send_and_receive(self, messages, *, timeout=None):
        raise AssertionError("the metered grid pulls itself")


def _ask(nodes: list[int]) -> list[Message]:
    enter_run()
    return [Message(RecordDict(), node, "train", group_id="1") for node in nodes]


def test_replies_are_pulled_every_poll_interval_until_all_are_in() -> None:
    inner = SlowGrid({1: 1, 2: 3, 3: 4})
    grid = MeteredGrid(inner, reply_timeout=30, poll_interval=0.05)
    start = time.monotonic()
    replies = grid.send_and_receive(_ask([1, 2, 3]))
    elapsed = time.monotonic() - start
    assert sorted(r.metadata.src_node_id for r in replies) == [1, 2, 3]
    assert inner.pulls == 4  # no pull after the last reply
    assert 0.15 <= elapsed < 1.0  # three sleeps of 0.05 s, not Flower's 3 s each
    counters = grid.take()
    assert counters.failures == 0 and counters.bytes_up == 3 * 3 * 8


def test_a_node_that_never_answers_is_a_failure_after_the_timeout() -> None:
    inner = SlowGrid({1: 1, 2: None})
    grid = MeteredGrid(inner, reply_timeout=0.3, poll_interval=0.05)
    start = time.monotonic()
    replies = grid.send_and_receive(_ask([1, 2]))
    elapsed = time.monotonic() - start
    assert [r.metadata.src_node_id for r in replies] == [1]
    assert 0.3 <= elapsed < 1.0 and inner.pulls >= 5
    assert grid.take().failures == 1


def test_an_explicit_timeout_overrides_the_runs() -> None:
    inner = SlowGrid({1: None})
    grid = MeteredGrid(inner, reply_timeout=600, poll_interval=0.05)
    start = time.monotonic()
    assert grid.send_and_receive(_ask([1]), timeout=0.1) == []
    assert time.monotonic() - start < 1.0


def test_only_the_deployment_grid_is_pulled_by_the_metered_grid() -> None:
    deployment = HttpGrid.__new__(HttpGrid)  # no connection needed to ask its type
    simulation = InMemoryGrid.__new__(InMemoryGrid)
    assert own_pull_interval(deployment, 0.2) == 0.2
    assert own_pull_interval(simulation, 0.2) is None
    assert own_pull_interval(SlowGrid({}), 0.2) is None
