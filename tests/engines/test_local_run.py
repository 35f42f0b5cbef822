"""``python -m testing.local_run``: a job on the in-process engine, its nodes in lockstep by
default, with the results folder and exit status of a ``flwr run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testing import local_run

QUICK = ["num-server-rounds=2", "ffgb.oracle-steps=30"]


def _rows(out: str) -> list[dict]:
    folder = next(line for line in out.splitlines() if line.startswith("results: "))[9:]
    return json.loads((Path(folder) / "metrics.json").read_text())["rounds"]


def test_a_job_completes_with_its_results_folder_and_health_line(tmp_path, capsys):
    code = local_run.main(["--nodes", "3", f"output-dir='{tmp_path}'", *QUICK])
    out = capsys.readouterr().out
    assert code == 0
    assert "run config OK: algorithm=ffgb task=digits" in out
    assert "Run completed; 2/2 rounds, 3 nodes" in out
    assert len(_rows(out)) == 3  # round 0's evaluation and two rounds


def test_lockstep_or_not_the_rows_are_the_same(tmp_path, capsys):
    rows = []
    for together in ("1", "0"):
        args = ["--nodes", "3", "--together", together, f"output-dir='{tmp_path / together}'"]
        assert local_run.main([*args, *QUICK]) == 0
        rows.append(_rows(capsys.readouterr().out))
    alone, together = rows
    losses = [[r["test_loss"] for r in run] for run in (alone, together)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)


def test_a_refused_run_config_exits_2_before_anything_runs(tmp_path, capsys):
    code = local_run.main(["--nodes", "3", f"output-dir='{tmp_path}'", "ffgb.oracle-step=3"])
    assert code == 2
    assert "Invalid run config: 'ffgb.oracle-step'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_failed_run_exits_1_with_the_servers_reason(tmp_path, capsys):
    nodes = ["--nodes", "2", "--node-config", "device='cuda:99'"]  # no node can set up
    code = local_run.main([*nodes, f"output-dir='{tmp_path}'", *QUICK])
    err = capsys.readouterr().err
    assert code == 1
    assert "the run failed: RuntimeError: FFGB: no node gave a usable answer" in err
