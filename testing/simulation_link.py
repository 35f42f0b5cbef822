"""A SuperLink with Flower's simulation engine (Ray) on loopback, for `flwr run .` from the
tests and the benchmarks.

It runs in a new process group with a temporary FLWR_HOME, free ports and its own Ray
temporary folder, and ``simulation_superlink`` stops that whole group (by the SuperLink's PID)
whatever happens; a Ray process that left the group but names our Ray folder on its command
line is stopped by its PID too. Nothing else is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent
CONNECTION = "testlink"
CHECKOUT = Path(__file__).resolve().parents[1]


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


def pids_naming(marker: str) -> list[int]:
    """PIDs of the processes whose command line contains ``marker`` (a unique temporary path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _stop_stragglers(marker: str) -> None:
    for pid in pids_naming(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def simulation_superlink(
    home: Path, log_path: Path | None = None, ray_address: str | None = None
) -> Iterator[tuple[dict[str, str], str]]:
    """A simulation SuperLink with FLWR_HOME ``home`` (created, removed afterwards); yields the
    environment for ``flwr`` commands and the connection name. Its output goes to ``log_path``
    (default: ``home``/superlink.log, removed with it). ``ray_address``: the head of a running
    Ray cluster (``testing.ray_cluster``) its simulations join (``RAY_ADDRESS``, which
    ``ray.init`` reads), instead of a Ray of their own."""
    home.mkdir(parents=True)
    # Ray's folder: short (its socket paths must fit 107 bytes) and ours alone
    ray_tmp = tempfile.mkdtemp(prefix="ray")
    http, fleet, control, health = free_ports(4)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{http}"\ninsecure = true\n'
    )
    env = _environment(home, ray_tmp, ray_address)
    log = open(log_path or home / "superlink.log", "w")  # closed below
    try:
        process = subprocess.Popen(
            _superlink_command(home, http, fleet, control, health),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_port(http, 60)
            yield env, CONNECTION
        finally:
            stop_group(process)
            _stop_stragglers(ray_tmp)
    finally:
        log.close()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _environment(home: Path, ray_tmp: str, ray_address: str | None) -> dict[str, str]:
    """The environment of the SuperLink and of ``flwr`` commands: FLWR_HOME ``home``, no
    update check nor dependency installation, Ray's temporary folder ``ray_tmp`` (and the
    cluster at ``ray_address``), this interpreter's scripts first on PATH."""
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_TMPDIR": ray_tmp,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    return env


def _superlink_command(home: Path, http: int, fleet: int, control: int, health: int) -> list[str]:
    """``flower-superlink`` in simulation, insecure, on loopback at the given ports, its state
    in ``home``/state.db."""
    return [
        str(BIN / "flower-superlink"),
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--disable-runtime-dependency-installation",
        "--host",
        "127.0.0.1",
        "--port",
        str(http),
        "--fleet-api-address",
        f"127.0.0.1:{fleet}",
        "--control-api-address",
        f"127.0.0.1:{control}",
        "--health-server-address",
        f"127.0.0.1:{health}",
        "--database",
        str(home / "state.db"),
    ]


def federation_config(nodes: int, cpus: float) -> str:
    """``--federation-config`` of ``nodes`` simulated SuperNodes of ``cpus`` CPUs each."""
    return f"num-supernodes={nodes} client-resources-num-cpus={cpus:g}"


def flwr_run(
    env: dict[str, str],
    connection: str,
    nodes: int,
    run_config: str,
    timeout: float = 500,
    cpus: float = 1,
    app: Path = CHECKOUT,
) -> subprocess.CompletedProcess:
    """``flwr run <app> --stream`` on a simulation SuperLink with ``nodes`` SuperNodes
    (``cpus`` CPUs each); its output in ``stdout`` and ``stderr`` (it exits 0 whatever became
    of the run). ``app``: the checkout, or a copy of its app files (``deploy.app_files.app_copy``:
    the same FAB, without the seconds of walking the checkout's .venv: ``benchmarks.fab_build``)."""
    return subprocess.run(
        [
            str(BIN / "flwr"),
            "run",
            str(app),
            connection,
            "--stream",
            "--federation-config",
            federation_config(nodes, cpus),
            "--run-config",
            run_config,
        ],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
