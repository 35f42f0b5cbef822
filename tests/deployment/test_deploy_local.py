"""`python -m deploy.local`, as an operator runs it: its exit status is the run's, it names the
results folder only when the run wrote one, and it prints a line a round and the health line.
Its processes run on loopback ports of a free block and are stopped by PID when it returns."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.deployment import Deployment
from deploy.ports import free_port_block
from deploy.processes import ProcessExited, next_line
from testing.inprocess_grid import PROJECT_ROOT

pytestmark = pytest.mark.serial  # live processes on timers: one at a time in stage 2


def deploy(
    tmp_path, run_config: str, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
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
        env=None if env is None else {**os.environ, **env},
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


def test_a_process_that_exits_unasked_is_named_with_the_end_of_its_log(tmp_path):
    deployment = Deployment(tmp_path)
    try:
        deployment._start(
            "supernode-0", ["sh", "-c", "echo starting; echo 'ValueError: x'; exit 3"]
        )
        deployment._start("supernode-1", ["sleep", "60"])
        deployment.processes["supernode-0"].wait(10)
        with pytest.raises(ProcessExited) as caught:
            deployment.check_alive()
        text = str(caught.value)
        assert text.startswith("supernode-0 exited with code 3 (the end of ")
        assert "starting | ValueError: x" in text and "supernode-1" not in text
    finally:
        deployment.stop()


def test_a_superlink_that_dies_at_start_is_named_while_its_port_is_awaited(tmp_path):
    deployment = Deployment(tmp_path)
    try:
        deployment._start("superlink", ["sh", "-c", "echo 'unable to open database file'; exit 1"])
        deployment.processes["superlink"].wait(10)
        with pytest.raises(ProcessExited, match="superlink exited with code 1 .*database file"):
            deployment.wait_for_port(free_port_block(low=30000, high=32000), timeout=30)
    finally:
        deployment.stop()


def test_a_process_stopped_on_purpose_is_no_failure(tmp_path):
    deployment = Deployment(tmp_path)
    try:
        deployment._start("supernode-0", ["sleep", "60"])
        deployment._start("supernode-1", ["sleep", "60"])
        deployment.kill("supernode-1")  # a node that dies, as the resilience tests make one
        deployment.check_alive()
    finally:
        deployment.stop()


def test_the_wait_for_runs_ends_when_a_process_exits_unasked(tmp_path):
    """A SuperNode that dies while runs wait for it is named at once (not after the timeout);
    one meant to exit (refused by the SuperLink) is no failure."""
    deployment = Deployment(tmp_path)
    deployment._in_link = lambda args: ["sleep", "60"]  # a run's log stream that never ends
    try:
        deployment._start("supernode-0", ["sleep", "60"])
        deployment._start("intruder", ["sh", "-c", "exit 0"])
        deployment.may_exit.add("intruder")
        deployment._start("supernode-1", ["sh", "-c", "sleep 1; echo 'bind: in use'; exit 2"])
        started = time.monotonic()
        with pytest.raises(ProcessExited, match="supernode-1 exited with code 2 .*bind: in use"):
            deployment.wait_for_runs(["1"], timeout=120)
        assert time.monotonic() - started < 30
    finally:
        deployment.stop()


def test_the_wait_for_the_next_line_checks_the_processes_meanwhile():
    lines: queue.Queue[str | None] = queue.Queue()
    checks = []

    def check() -> None:
        checks.append(time.monotonic())
        if len(checks) == 2:
            lines.put("round 1\n")

    assert next_line(lines, check) == "round 1\n" and len(checks) == 2
    lines.put(None)
    assert next_line(lines, check) is None


@pytest.mark.e2e
def test_a_supernode_that_dies_ends_the_run_with_one_sentence(tmp_path):
    done = deploy(tmp_path, "num-server-rounds=2", timeout=300, env={"FL_SUPERNODE_POLL": "x"})
    assert done.returncode == 1, done.stdout + done.stderr
    (failed,) = [line for line in done.stderr.splitlines() if line.startswith("Run failed: ")]
    assert "supernode-0 exited with code 1" in failed
    assert "FL_SUPERNODE_POLL='x' is not a number" in failed


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its start time (so a reused pid is not mistaken)."""
    stats = {int(path.name): _stat(int(path.name)) for path in Path("/proc").glob("[0-9]*")}
    found: dict[int, str] = {}
    frontier = {pid}
    while frontier:
        frontier = {
            child
            for child, fields in stats.items()
            if fields and int(fields[1]) in frontier and child not in found
        }
        found.update({child: stats[child][19] for child in frontier})
    return found


def _alive(pid: int, started: str) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[19] == started and fields[0] != "Z"


@pytest.mark.e2e
def test_a_sigterm_stops_every_process_it_started(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.local",
            "--tls",
            "--port",
            str(free_port_block(low=30000, high=32000)),
            "--workdir",
            str(tmp_path / "work"),
            "num-server-rounds=50",
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started: dict[int, str] = {}
    try:
        for line in process.stdout:  # until the run's ServerApp has evaluated round 0
            if "[results] round 0/" in line:
                break
        started = _descendants(process.pid)
        assert len(started) >= 3, "no SuperLink and SuperNodes under deploy.local"
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 15
        while any(_alive(*p) for p in started.items()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in started.items() if _alive(*pid)]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid, start in started.items():  # only what this test's deploy.local started
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
