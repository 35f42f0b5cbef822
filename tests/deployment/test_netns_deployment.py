"""Opt-in (``FL_NETNS=1``, root): SuperLink and SuperNodes each in a network namespace of their
own, linked by veth pairs, TLS and SuperNode authentication on: the closest one machine gets to
SuperNodes on separate hosts. The namespaces share no loopback, so the SuperNodes can reach the
SuperLink only over their links, by its certificate's addresses. The ServerApp and the
ClientApps are forked warm (``deploy.warm_superexec``), each in its process's namespace.

    FL_NETNS=1 .venv/bin/python -m pytest tests/deployment/test_netns_deployment.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.deployment import Deployment
from deploy.netns import Star
from deploy.ports import free_port_block

pytestmark = [
    pytest.mark.e2e,  # stage 2: `make test-e2e`
    pytest.mark.serial,
    pytest.mark.skipif(
        os.environ.get("FL_NETNS") != "1" or os.geteuid() != 0,
        reason="opt-in: set FL_NETNS=1 and run as root (creates network namespaces)",
    ),
]

NODES = 2


def reachable(star: Star, namespace: str, address: str) -> bool:
    host, port = address.split(":")
    probe = [
        *star.exec_prefix(namespace),
        sys.executable,
        "-c",
        f"import socket, sys; s = socket.socket(); s.settimeout(3); "
        f"sys.exit(s.connect_ex(('{host}', {port})))",
    ]
    return subprocess.run(probe, capture_output=True).returncode == 0


def warm_superexec_in(namespace: str) -> bool:
    """Whether a ``deploy.warm_superexec`` process runs in ``namespace``."""
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    commands = []
    for pid in pids.stdout.split():
        try:
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:  # it exited meanwhile
            continue
    return any(b"deploy.warm_superexec" in command for command in commands)


def test_supernodes_in_their_own_namespaces_train_over_tls(tmp_path):
    star = Star(f"flt{os.getpid() % 1000}", NODES)
    port = free_port_block()
    deployment = Deployment(tmp_path, tls=True, auth=True, base_port=port, star=star)
    try:
        star.create()
        deployment.start_superlink()
        for i in range(NODES):
            assert not reachable(star, star.node(i), f"127.0.0.1:{port}")  # no shared loopback
            assert reachable(star, star.node(i), f"{star.link_address(i)}:{port}")
            deployment.start_supernode(i, NODES)
        results = tmp_path / "results"
        done = deployment.flwr_run(
            "algorithm='fedfun' task='wine' partitioning='kmeans' num-server-rounds=2 "
            "fedfun.initial-steps=100 fedfun.local-steps=30 fedfun.hidden='8' "
            f"min-nodes={NODES} output-dir='{results}' run-name='job'"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        rows = json.loads((results / "job" / "metrics.json").read_text())["rounds"]
        assert [r["round"] for r in rows] == [0, 1, 2]
        assert all(r["failures"] == 0 and r["participants"] == NODES for r in rows[1:])
        assert rows[-1]["test_accuracy_mean"] > 0.5
        for namespace in [star.link, *(star.node(i) for i in range(NODES))]:
            assert warm_superexec_in(namespace)  # the ServerApp and ClientApps forked warm
    finally:
        deployment.stop()
        star.delete()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert star.prefix not in listed
