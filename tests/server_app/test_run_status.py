"""`make run`'s exit status follows the run's, not `flwr run --stream`'s (always 0)."""

from __future__ import annotations

import json
import subprocess

import pytest

from server_app import run_status


def listing(*runs: tuple[str, str, str]) -> str:
    return json.dumps(
        {
            "success": True,
            "runs": [
                {
                    "run-id": rid,
                    "status": status,
                    "status-details": "ServerApp raised",
                    "pending-at": at,
                }
                for rid, status, at in runs
            ],
        }
    )


@pytest.mark.parametrize(
    "status, code", [("finished:completed", 0), ("finished:failed", 1), ("running", 1)]
)
def test_the_newest_runs_status_is_the_exit_status(monkeypatch, capsys, status, code):
    out = listing(
        ("1", "finished:completed", "2026-11-24 03:00:00"), ("2", status, "2026-11-24 04:00:00")
    )
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr="")
    )
    assert run_status.main([]) == code
    assert f"run 2: {status}" in capsys.readouterr().out


def test_no_list_is_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout="", stderr="cannot connect"),
    )
    assert run_status.main([]) == 2
    assert "cannot connect" in capsys.readouterr().err
