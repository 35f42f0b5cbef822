"""Sites that come and go in a deployment, for the default job (FFGB on digits, smaller): a
SuperLink with TLS and SuperNode authentication on loopback, two SuperNodes of three partitions
at the start. The third partition's SuperNode starts once round 2 is written: it joins (``node
... joins the run for partition 2``) and trains. Then partition 1's SuperNode is killed: once
the SuperLink has it offline (its heartbeat overdue) and ``leave-after`` rounds have passed, it
leaves the run for good (``leaves the run for good``), and the rounds after count no failure.

Every process is started and stopped by PID (``deploy.deployment.Deployment``); the work
directory is pytest's temporary one.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from deploy.app_files import app_copy
from deploy.deployment import Deployment
from deploy.ports import free_port_block

pytestmark = [pytest.mark.e2e, pytest.mark.serial]

NODES, LATE, GONE, ROUNDS, LEAVE_AFTER = 3, 2, 1, 60, 2
JOB = (
    f"algorithm='ffgb' task='digits' ffgb.local-steps=1 ffgb.oracle-steps=20 ffgb.hidden=8 "
    f"ffgb.federated-eval=false num-server-rounds={ROUNDS} min-nodes=2 join-timeout=0 "
    f"leave-after={LEAVE_AFTER} reply-timeout=30"
)


def rows(results: Path) -> list[dict]:
    path = results / "metrics.json"
    return json.loads(path.read_text())["rounds"] if path.exists() else []


def wait_for(results: Path, done, what: str, timeout: float = 300) -> list[dict]:
    deadline = time.monotonic() + timeout
    while not done(rows(results)):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s: {rows(results)}"
        time.sleep(0.5)
    return rows(results)


def test_a_site_joins_a_running_deployment_and_another_leaves_it(tmp_path):
    app = app_copy(tmp_path / "app")
    d = Deployment(
        tmp_path / "deploy",
        tls=True,
        auth=True,
        base_port=free_port_block(low=30000, high=35000),
        warm=True,
    )
    results = d.workdir / "results" / "come-and-go"
    try:
        d.start_superlink()
        for i in (0, 1):
            d.start_supernode(i, NODES)
        run_id = d.submit(f"{JOB} output-dir='{d.workdir / 'results'}' run-name='come-and-go'", app)
        wait_for(results, lambda r: len(r) > 2, "round 2")
        d.start_supernode(LATE, NODES)
        joined = wait_for(results, lambda r: r[-1].get("participants") == NODES, "the join")
        d.kill(f"supernode-{GONE}")
        killed_after = joined[-1]["round"]
        status = d.wait_for_runs([run_id], timeout=900)[run_id]
        log = (d.workdir / "logs" / f"{run_id}.log").read_text()
    finally:
        d.stop()

    done = rows(results)
    seen = [(r["round"], r.get("failures"), r.get("participants")) for r in done]
    assert status == "finished:completed", (status, seen)
    assert [r["round"] for r in done] == list(range(ROUNDS + 1))
    assert f"joins the run for partition {LATE}" in log
    assert f"(partition {GONE}) was not connected for {LEAVE_AFTER} rounds" in log
    # before the join two nodes trained, none failed; with it, three
    first = next(r["round"] for r in done[1:] if r["participants"] == NODES)
    assert all(r["participants"] == NODES - 1 and r["failures"] == 0 for r in done[1:first])
    # after the kill: failures while the SuperLink still had it, then it left for good
    left = int(re.search(rf"round (\d+): node \d+ \(partition {GONE}\) was not", log)[1])
    assert killed_after < left < ROUNDS - 5, seen  # rounds enough after it left
    assert all(r["participants"] == NODES - 1 for r in done[left:]), seen
    assert all(r["failures"] == 0 for r in done[left:]), seen
    outcome = json.loads((results / "config.json").read_text())["outcome"]
    assert outcome["nodes"] == NODES - 1 and outcome["vacant"] == [GONE], outcome
