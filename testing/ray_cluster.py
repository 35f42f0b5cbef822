"""A Ray cluster of several Ray nodes on this machine, for ``flwr run`` on Flower's simulation
engine across machines (docs/deployment.md, "A Ray cluster"): the head (``ray start --head``),
then each other node (``ray start --address=<head>``), each with its own CPUs, all on loopback.

Each ``ray start --block`` runs in a process group of its own and keeps its Ray processes
under it; ``ray_cluster`` stops those groups (by the PIDs it started) and any Ray process whose
command line names the cluster's own temporary folder, whatever happens. It never runs
``ray stop``, which would stop every Ray process of the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testing.simulation_link import BIN, _stop_stragglers, free_ports, stop_group, wait_for_port


@contextmanager
def ray_cluster(cpus: tuple[int, ...] = (1, 1), timeout: float = 120) -> Iterator[str]:
    """Ray nodes of ``cpus`` CPUs each (the first the head); yields the head's address, once
    every node has joined (``ray.nodes()``)."""
    folder = tempfile.mkdtemp(prefix="rayc")  # short: Ray's socket paths must fit 107 bytes
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_TMPDIR": folder, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    started: list[subprocess.Popen] = []
    logs = []
    try:
        for i, count in enumerate(cpus):
            where = [f"--address={address}"]  # a dashboard is the head's only
            if i == 0:
                where = ["--head", f"--port={port}", f"--temp-dir={folder}"]
                where += ["--include-dashboard=false"]
            log = open(Path(folder) / f"ray-start-{i}.log", "w")  # closed below
            logs.append(log)
            started.append(
                subprocess.Popen(
                    [str(BIN / "ray"), "start", "--block", f"--num-cpus={count}", *where]
                    + ["--node-ip-address=127.0.0.1"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            if i == 0:
                wait_for_port(port, timeout)
        _wait_for_nodes(address, len(cpus), env, timeout)
        yield address
    finally:
        for process in reversed(started):
            stop_group(process)
        _stop_stragglers(folder)
        for log in logs:
            log.close()
        shutil.rmtree(folder, ignore_errors=True)


def actor_nodes(address: str, actor_class: str = "ClientAppActor") -> set[str]:
    """The Ray nodes that have hosted an actor of ``actor_class`` in the cluster at
    ``address`` (Flower's simulation actors: where its ClientApps ran). Ray's public state API
    (``ray.util.state``) needs the dashboard, which the cluster runs without: this reads the
    GCS's actor table (``ray._private.state.actors``)."""
    done = _ask(
        address,
        "from ray._private.state import actors; print(json.dumps(sorted({a['Address']"
        "['NodeID'] for a in actors().values() if a['ActorClassName'] == sys.argv[2]})))",
        actor_class,
    )
    done.check_returncode()
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _wait_for_nodes(address: str, count: int, env: dict[str, str], timeout: float) -> None:
    """Until ``count`` Ray nodes are alive in the cluster at ``address``."""
    deadline = time.monotonic() + timeout
    while True:
        done = _ask(address, "print(sum(n['Alive'] for n in ray.nodes()))", env=env)
        alive = int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0
        if alive >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{alive} of {count} Ray nodes joined {address}: {done.stderr[-500:]}"
            )
        time.sleep(1)


def _ask(
    address: str, code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``code`` in a child Python connected to the cluster at ``address`` (``json``,
    ``sys`` and ``ray`` imported; ``sys.argv[2:]`` = ``args``), so this process never joins it."""
    prelude = "import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); "
    return subprocess.run(
        [str(BIN / "python"), "-c", prelude + code, address, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
