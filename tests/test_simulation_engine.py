"""`flwr run .` through Flower's real simulation engine (SuperLink + Ray), on loopback.

The test starts its own SuperLink in a new process group, with a temporary FLWR_HOME
and free ports, and stops that whole group (by its PID) whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testing.inprocess_grid import PROJECT_ROOT
from tests.helpers import run_app

pytestmark = pytest.mark.e2e  # stage 2: `make test-e2e`

BIN = Path(sys.executable).parent


def free_ports(count: int) -> list[int]:
    """Ports the kernel reports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_port(port: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {deadline_s}s")


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group we created, then SIGKILL what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        return
    try:  # children (SuperExec, ServerApp, Ray) share the group
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def superlink(tmp_path):
    """A simulation SuperLink on loopback with its own FLWR_HOME; yields (env, connection name)."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    http, fleet, control, health = free_ports(4)
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "testlink"\n\n'
        f'[superlink.testlink]\naddress = "127.0.0.1:{http}"\ninsecure = true\n'
    )
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_UPDATE_CHECK": "1",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = open(tmp_path / "superlink.log", "w")
    process = subprocess.Popen(
        [str(BIN / "flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
         "--disable-runtime-dependency-installation", "--host", "127.0.0.1", "--port", str(http),
         "--fleet-api-address", f"127.0.0.1:{fleet}", "--control-api-address",
         f"127.0.0.1:{control}", "--health-server-address", f"127.0.0.1:{health}",
         "--database", str(home / "state.db")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait_for_port(http, 60)
        yield env, "testlink"
    finally:
        stop_group(process)
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def test_flwr_run_simulation_writes_results(superlink, tmp_path):
    env, connection = superlink
    out = tmp_path / "results"
    completed = subprocess.run(
        [str(BIN / "flwr"), "run", ".", connection, "--stream",
         "--federation-config", "num-supernodes=3 client-resources-num-cpus=1",
         "--run-config", f"num-server-rounds=2 output-dir='{out}' run-name='sim'"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=400,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log[-3000:]
    assert "[results] round 2/2" in log, log[-3000:]
    metrics = json.loads((out / "sim" / "metrics.json").read_text())
    assert [r["round"] for r in metrics["rounds"]] == [0, 1, 2]
    assert metrics["rounds"][-1]["test_accuracy"] > 0.8
    assert json.loads((out / "sim" / "config.json").read_text())["num_nodes"] == 3
    # determinism across engines: the in-process engine gives the same numbers, to the bit
    local = run_app(tmp_path / "local", 3, **{"num-server-rounds": 2}).rows
    keys = ("test_accuracy", "test_loss", "oracle_error", "failures", "participants")
    assert ([{k: r[k] for k in keys if k in r} for r in metrics["rounds"]]
            == [{k: r[k] for k in keys if k in r} for r in local])


def test_an_invalid_run_config_fails_the_run_before_training(superlink, tmp_path):
    """Inside the ServerApp a bad value stops the run before training, and Flower records the
    run as failed (not completed), with the reason."""
    env, connection = superlink
    completed = subprocess.run(
        [str(BIN / "flwr"), "run", ".", connection, "--stream",
         "--federation-config", "num-supernodes=2 client-resources-num-cpus=1",
         "--run-config", f"algorithm='fedfw' fedfw.radius=-1 output-dir='{tmp_path / 'results'}'"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=400,
    )
    log = completed.stdout + completed.stderr
    assert "Invalid run config: fedfw.radius=-1.0 is not valid" in log, log[-3000:]
    assert "[results]" not in log
    listed = subprocess.run([str(BIN / "flwr"), "ls", connection, "--format", "json"],
                            cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    runs = json.loads(listed.stdout)["runs"]
    assert [r["status"] for r in runs] == ["finished:failed"], listed.stdout
