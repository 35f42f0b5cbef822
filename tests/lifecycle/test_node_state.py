"""Per-node messages and state for any content: NodeBook (server) and PendingStore (node)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from client_app.node_state import PendingStore
from functions.acceptance import last_accepted, sync_value
from strategies.node_book import NodeBook
from testing.inprocess_grid import enter_run

enter_run()  # Flower builds Messages only inside a run


def test_pending_records_of_any_kind_commit_only_when_accepted():
    store, state = PendingStore("fam"), RecordDict()
    assert store.resolve(state, 0) is None  # a node without state
    committed = {"version": ConfigRecord({"v": 3})}
    pending = {
        "version": ConfigRecord({"v": 5}),
        "cache": ArrayRecord({"f": Array(np.arange(4.0))}),
    }
    store.stage(state, committed, pending, server_round=7)
    assert store.resolve(state, last_accepted=6) == committed  # the server did not use round 7
    accepted = store.resolve(state, last_accepted=7)
    assert accepted["version"]["v"] == 5 and set(accepted) == {"version", "cache"}
    store.stage(state, {"version": ConfigRecord({"v": 5})}, {}, server_round=8)
    assert "fam.pending.cache" not in state and store.resolve(state, 8) == {}


def test_each_node_gets_its_own_content_and_restart_records():
    book = NodeBook([11, 22, 33], "test")
    book.accept(1, [22])

    def restart(node):
        return "deltas", {"deltas": ConfigRecord({"since": 0})}

    messages = [
        book.train_message(n, 2, {"delta": ConfigRecord({"for": n})}, restart, k=1)
        for n in book.node_ids
    ]
    assert [m.content["delta"]["for"] for m in messages] == [11, 22, 33]
    assert [sync_value(m.content["config"]) for m in messages] == ["deltas", "none", "deltas"]
    assert [last_accepted(m.content["config"]) for m in messages] == [0, 1, 0]
    assert "deltas" not in messages[1].content and messages[0].content["config"]["k"] == 1


def test_screening_updates_sync_flags_and_the_book_round_trips():
    book = NodeBook([11, 22, 33], "test")

    def reply(node: int, ok: bool) -> Message:
        content = RecordDict({"x": ConfigRecord({"ok": ok})})
        message = Message(content, dst_node_id=node, message_type="train")
        message.metadata.__dict__["_src_node_id"] = node
        return message

    def decode(message: Message) -> bool:
        if not message.content["x"]["ok"]:
            raise ValueError("bad")
        return True

    accepted, screened = book.screen(
        1, [reply(33, True), reply(11, False), reply(44, True)], decode
    )
    assert list(accepted) == [33] and screened.rejected == 2  # 44 is outside the federation
    assert screened.nonfinite == []
    assert book.needs_sync == {11: False, 22: True, 33: False}  # 11 answered: it holds state
    book.accept(1, accepted)
    again = NodeBook.from_record(book.to_record(), "test")
    assert (again.node_ids, again.last_accepted, again.needs_sync) == (
        book.node_ids,
        book.last_accepted,
        book.needs_sync,
    )
