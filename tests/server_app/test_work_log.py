"""The opt-in node work log (``client_app.work_log``) and the rows' exchange time: what
``benchmarks.hist_time`` splits a round with."""

from __future__ import annotations

import time

from client_app import work_log
from tests.helpers import run_app

CASE = {
    "algorithm": "fedxgb-hist",
    "task": "wine",
    "num-server-rounds": 2,
    "fedxgb-hist.max-depth": 2,
    "tensorboard": False,
}


def test_each_answered_message_has_a_line_and_rounds_their_exchange_time(tmp_path, monkeypatch):
    log = tmp_path / "work.jsonl"
    monkeypatch.setenv(work_log.ENV, str(log))
    run = run_app(tmp_path / "run", 3, **CASE)
    lines = work_log.read(log)
    sent = [m for m in run.grid.down if m.metadata.message_type != "query.agree"]
    assert len(lines) >= len(sent) > 0
    assert {line["node"] for line in lines} == {m.metadata.dst_node_id for m in run.grid.down}
    for line in lines:
        assert 0.0 <= line["work_seconds"] <= line["seconds"]
        assert 0.0 <= line["work_cpu_seconds"] <= line["cpu_seconds"] + 1e-3
    trained = [line for line in lines if line["type"] == "train"]
    assert trained and all(line["work_seconds"] > 0 for line in trained)
    assert max(line["state_bytes"] for line in trained) > 0  # the kept bins and gradients
    rows = run.rows
    for before, row in zip(rows, rows[1:]):
        assert row["exchanges"] >= 3  # the root and two levels
        assert 0.0 < row["exchange_time_s"] <= row["wall_time_s"] - before["wall_time_s"] + 1e-3


def test_nothing_is_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(work_log.ENV, raising=False)
    run_app(tmp_path / "run", 2, **{**CASE, "num-server-rounds": 1})
    assert not any(p.suffix == ".jsonl" for p in tmp_path.rglob("*"))


def test_what_is_set_aside_within_the_work_is_not_the_family_s():
    """The node's data, read on first use inside the family's procedure, counts as the
    ClientApp's part, as when it was read before the procedure."""
    work_log._current.work = work_log._current.work_cpu = 0.0
    with work_log.work():
        time.sleep(0.02)
        with work_log.aside():
            time.sleep(0.2)
    assert 0.015 < work_log._current.work < 0.1
