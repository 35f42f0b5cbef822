"""A run whose numbers stop being numbers fails, said once, and keeps what came before: a
non-finite metric stops it after that round's row (no checkpoint of the diverged state), every
reply of a round dropped for NaN or inf stops it at that round, JSON files hold null, and the
run's outcome (config.json) says diverged. A completed run says completed, with its headline
metric, in the label's own units when the label was standardised."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from client_app.app import app as client_app
from server_app.app import RunDiverged
from server_app.checkpoint import read_checkpoint
from server_app.outcome import in_label_units, outcome
from server_app.packed_grid import unpacked
from server_app.results import ResultsWriter
from strategies.base import Diverged
from strategies.evaluation import checked_metrics
from strategies.screening import screen_replies
from testing.inprocess_grid import enter_run
from tests.helpers import run_app

# FedAvg's local SGD at the step that was its default (issue 35: test MSE 1.40, 171,570, inf)
DIVERGING = {
    "algorithm": "fedavg",
    "task": "diabetes",
    "learning-rate": 0.3,
    "num-server-rounds": 4,
}


def strict_json(path):
    """The file's JSON, refusing NaN and Infinity (which JSON does not have)."""
    return json.loads(
        path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in {path.name}")
    )


def test_a_non_finite_metric_fails_the_run_keeping_the_rounds_before(tmp_path):
    with pytest.raises(RunDiverged) as raised:
        run_app(tmp_path, 10, **DIVERGING)
    message = str(raised.value)
    assert message.startswith("diverged at round ") and "test_mse=inf" in message
    assert message.endswith(
        "(fedavg on diabetes; step sizes learning-rate=0.3: a smaller one may help)"
    )
    metrics = strict_json(tmp_path / "job" / "metrics.json")
    rows, summary = metrics["rounds"], metrics["summary"]
    at = int(message.split()[3].rstrip(":"))
    assert [r["round"] for r in rows] == list(range(at + 1))  # the diverged row is the last
    assert rows[-1]["test_mse"] is None and rows[0]["test_mse"] > 0
    assert summary["status"] == "failed" and summary["cause"] == message
    config = strict_json(tmp_path / "job" / "config.json")
    assert config["outcome"]["diverged"] and config["outcome"]["rounds"] == at - 1
    assert config["outcome"]["line"].startswith(f"Run failed: {message}; {at - 1}/4 rounds")
    csv = (tmp_path / "job" / "metrics.csv").read_text()
    assert "inf" not in csv and "nan" not in csv.lower()
    assert read_checkpoint(tmp_path / "job").server_round == at - 1  # not the diverged state


def nan_replies(message: Message, context) -> Message:
    """The real ClientApp, whose every train reply has its arrays made NaN."""
    reply = unpacked(client_app(message, context))  # its arrays as sent
    if message.metadata.message_type == "train" and not reply.has_error():
        content = RecordDict()
        for key, record in reply.content.items():
            if isinstance(record, ArrayRecord):
                record = ArrayRecord(
                    {k: Array(np.full_like(a.numpy(), np.nan)) for k, a in record.items()}
                )
            content[key] = record
        return Message(content, reply_to=message)
    return reply


def test_every_reply_dropped_for_nan_stops_the_run_at_that_round(tmp_path):
    with pytest.raises(
        RunDiverged,
        match=r"^diverged at round 1: every reply \(4\) carried "
        r"NaN or inf values, for example node \d+'s: ",
    ):
        run_app(tmp_path, 4, client=nan_replies, algorithm="fedavg", **{"num-server-rounds": 3})
    rows = strict_json(tmp_path / "job" / "metrics.json")["rounds"]
    assert [r["round"] for r in rows] == [0]


def test_a_reply_dropped_for_nan_or_inf_is_told_apart_from_other_faults():
    """The screen counts a reply refused for a NaN or an infinity (``NonFiniteError``, what the
    decoders raise) apart from any other fault, without decoding anything more."""
    enter_run()
    replies = []
    for node, values in ((1, [1.0, math.inf]), (2, [1.0, 2.0]), (3, [1.0, -1.0])):
        question = Message(RecordDict(), node, "train", group_id="1")
        question.metadata.__dict__["_message_id"] = f"q{node}"
        reply = Message(
            RecordDict({"m": MetricRecord({"a": values[0], "b": values[1]})}), reply_to=question
        )
        reply.metadata.__dict__["_src_node_id"] = node
        replies.append(reply)
    screened = screen_replies(
        "test", 1, replies, lambda r: checked_metrics(r.content["m"], ["a", "b"]), {1, 2, 3}
    )
    assert list(screened.accepted) == [2] and screened.dropped == [1, 3]
    assert screened.nonfinite == [1] and screened.reasons[1] == "b=inf is not a finite number >= 0"


def test_the_strategy_screen_raises_diverged_only_when_no_reply_passed():
    error = Diverged(3, "every reply (2) carried NaN or inf values")
    assert str(error) == "diverged at round 3: every reply (2) carried NaN or inf values"
    assert error.server_round == 3


def test_json_files_hold_null_for_non_finite_numbers(tmp_path):
    writer = ResultsWriter(tmp_path / "run", {"x": math.nan})
    writer.add_round({"round": 0, "test_mse": math.inf, "v": np.float32(0.5)})
    writer.finish({"best": -math.inf})
    assert strict_json(tmp_path / "run" / "config.json") == {"x": None}
    metrics = strict_json(tmp_path / "run" / "metrics.json")
    assert metrics["rounds"] == [{"round": 0, "test_mse": None, "v": 0.5}]
    assert metrics["summary"] == {"best": None}


def test_a_standardised_labels_errors_are_also_in_its_own_units():
    row = {
        "round": 1,
        "test_mse": 0.25,
        "site0_test_mse": 0.04,
        "test_loss": 0.25,
        "test_mse_mean": 1.0,
    }
    assert in_label_units(row, 10.0) == {
        "test_rmse_label": 5.0,
        "site0_test_rmse_label": 2.0,
        "test_rmse_label_mean": 10.0,
    }
    assert in_label_units(row, 1.0) == {}


def test_a_completed_regression_run_reports_its_label_units(tmp_path):
    run = run_app(
        tmp_path,
        3,
        algorithm="ffgb",
        task="diabetes",
        **{"ffgb.learner": "tree", "num-server-rounds": 2},
    )
    last = run.rows[-1]
    assert last["test_rmse_label"] == pytest.approx(math.sqrt(last["test_mse"]) * 76.5016, rel=1e-4)
    ended = strict_json(run.out_dir / "config.json")["outcome"]
    assert ended["status"] == "completed" and ended["cause"] == "" and not ended["diverged"]
    assert ended["metric"] == "test_rmse_label" and ended["rounds"] == 2
    assert ended["line"].startswith(
        "Run completed; 2/2 rounds, 3 nodes, 0 left out, "
        "0 warnings, not diverged, test_rmse_label final "
    )


def test_the_outcome_of_rows():
    rows = [
        {"round": 0, "test_accuracy": 0.1},
        {"round": 1, "test_accuracy": 0.9},
        {"round": 2, "test_accuracy": 0.8},
    ]
    ended = outcome(rows, 2, 5)
    assert (ended.metric, ended.final, ended.best, ended.best_round) == (
        "test_accuracy",
        0.8,
        0.9,
        1,
    )
    sites = {"partitions": [0, 2], "left-out": {"7": "its file: no such file"}, "warnings": ["w"]}
    line = outcome(rows, 3, 3, "quorum lost at round 3", sites=sites).line()
    assert line == (
        "Run failed: quorum lost at round 3; 2/3 rounds, 2 sites took part "
        "(partitions 0, 2), 1 left out: node 7: its file: no such file, 1 warning, "
        "not diverged, test_accuracy final 0.8, best 0.9 (round 1)"
    )
    # the roster's own: a node without a usable answer, and the partitions nobody served
    line = outcome(rows, 2, 3, left_out={"9": "no answer"}, vacant=[1, 4]).line()
    assert line.startswith(
        "Run completed; 2/2 rounds, 3 nodes, 1 left out: node 9: no answer, "
        "no node for partitions 1, 4, 0 warnings, "
    )
    many = outcome(rows, 2, 3, vacant=list(range(3, 100))).line()
    assert "no node for partitions 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 and 87 more, 0 warnings" in many
