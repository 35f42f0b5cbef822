"""`python -m deploy.local`, as an operator runs it: its exit status is the run's, it names the
results folder only when the run wrote one, and it prints a line a round and the health line.
Its processes run on loopback ports of a free block and are stopped by PID when it returns."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy.local import free_port_block
from testing.inprocess_grid import PROJECT_ROOT


def deploy(tmp_path, run_config: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "deploy.local",
            "--nodes",
            "2",
            "--tls",
            "--auth",
            "--port",
            str(free_port_block(low=30000, high=32000)),
            "--workdir",
            str(tmp_path / "work"),
            run_config,
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_refused_config_exits_2_before_anything_starts(tmp_path):
    done = deploy(tmp_path, "algorithm='nope'", timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith("Invalid run config: algorithm='nope' is not valid")
    assert not (tmp_path / "work").exists()


@pytest.mark.e2e
def test_a_diverging_job_exits_1_with_its_health_line(tmp_path):
    done = deploy(
        tmp_path,
        "algorithm='fedavg' task='diabetes' learning-rate=5.0 num-server-rounds=3 min-nodes=2",
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    lines = out.splitlines()
    status = next(line for line in lines if line.startswith("run ") and ": finished:" in line)
    assert "finished:failed" in status
    results = tmp_path / "work" / "results" / "job"
    assert f"results: {results}" in lines and (results / "config.json").is_file()
    (health,) = [line for line in lines if line.startswith("Run failed: diverged at round ")]
    assert "(fedavg on diabetes; step sizes learning-rate=5.0" in health


@pytest.mark.e2e
def test_a_completed_job_exits_0_with_a_line_a_round(tmp_path):
    done = deploy(
        tmp_path,
        "algorithm='fedfw' task='synthetic' num-server-rounds=2 min-nodes=2 "
        "fedfw.federated-eval=false",
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line for line in lines if "[results] round" in line][-1].startswith(
        "[results] round 2/2"
    )
    assert any(line.startswith("Run completed; 2/2 rounds, 2 nodes") for line in lines)
