"""A node's failure reaches the server as one sentence, never a traceback: the ClientApp answers
an error reply with the reason itself, and the server keeps one line of whatever reason arrives
(an engine's traceback, colour codes, forged log lines)."""

from __future__ import annotations

import logging

import pytest
from flwr.app import Context, Message, RecordDict

from client_app import app as client_module
from client_app.app import app as client_app
from functions.errors import MAX_REASON, one_sentence
from strategies.screening import screen_replies
from testing.inprocess_grid import enter_run, run_config

RAY_REASON = (
    "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\x1b[36mray::ClientAppActor.run()"
    '\x1b[39m (pid=4242, ip=10.0.0.1)\n  File "/venv/flwr/simulation/ray_transport/'
    'ray_actor.py", line 65, in run\n    raise ClientAppException(str(ex)) from ex\n'
    "flwr.clientapp.client_app.ClientAppException: \nException ClientAppException occurred. "
    "Message: /data/2.csv: no column 'species'; columns are ['island']'>"
)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (RAY_REASON, "/data/2.csv: no column 'species'; columns are ['island']"),
        ("<class 'ValueError'>:<'x must be finite'>", "x must be finite"),
        (
            'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\n'
            "ZeroDivisionError: division by zero",
            "ZeroDivisionError: division by zero",
        ),
        ("first\nsecond", "first second"),
        ("forged\r\n2026 INFO: all good\x07", "forged 2026 INFO: all good"),
        ("", "no reason given"),
    ],
)
def test_a_reason_becomes_one_printable_line(raw, expected):
    assert one_sentence(raw) == expected


def test_a_long_reason_is_cut():
    line = one_sentence("x" * 5000)
    assert len(line) == MAX_REASON and line.endswith("...")


def _message_to(node_id: int, message_type: str = "train") -> Message:
    enter_run()
    return Message(RecordDict(), node_id, message_type, group_id="1")


def test_a_node_whose_setup_fails_answers_the_sentence_and_logs_one_line(caplog):
    context = Context(
        run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config=run_config()
    )
    with caplog.at_level(logging.WARNING, logger="flwr"):
        reply = client_app(_message_to(7), context)
    assert reply.has_error()
    assert reply.error.reason.startswith("node config lacks 'partition-id'; start the SuperNode")
    assert "Traceback" not in caplog.text and "ConfigError" not in reply.error.reason


def test_a_fault_of_ours_is_one_line_to_the_server_and_a_traceback_in_the_nodes_log(
    monkeypatch, caplog
):
    def broken(message, context):
        return 1 / 0

    monkeypatch.setattr(client_module, "answer", broken)
    context = Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 0, "num-partitions": 2},
        state=RecordDict(),
        run_config=run_config(),
    )
    with caplog.at_level(logging.ERROR, logger="flwr"):
        reply = client_app(_message_to(7), context)
    assert reply.error.reason == "ZeroDivisionError: division by zero"
    assert "Traceback" in caplog.text  # the node keeps what a developer needs


def test_the_server_logs_and_keeps_one_line_of_a_raw_engine_reason(caplog):
    enter_run()
    from flwr.app import Error

    question = _message_to(3)
    question.metadata.__dict__["_message_id"] = "q"
    reply = Message(Error(code=1, reason=RAY_REASON), reply_to=question)
    reply.metadata.__dict__["_src_node_id"] = 3
    with caplog.at_level(logging.WARNING, logger="flwr"):
        screened = screen_replies("test", 1, [reply], lambda r: r, {3})
    assert screened.errors == [3]
    assert screened.reasons[3] == "/data/2.csv: no column 'species'; columns are ['island']"
    assert "\x1b" not in caplog.text and "Traceback" not in caplog.text
