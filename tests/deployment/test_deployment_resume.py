"""Resume in a real deployment: each job's ServerApp process is SIGKILLed after a checkpoint, the
same job is submitted again with ``resume-from``, and the resumed run's rows equal an
uninterrupted run's (the in-process engine's, same config and seed).

Flower runs a resumed job as a new run, so every SuperNode's Context.state for it is empty: the
server must bring every node back up to date as a node that lost its state
(``strategy.forget_node_states()`` after loading the checkpoint, server_app/app.py). Without it,
the first round after the checkpoint lost both nodes (0 participants, 2 failures).

Two jobs side by side on one warm deployment (``deploy.warm_superexec``): FedFW (its resume is
exact) and FFGB. A ServerApp is a process forked by the SuperLink's warm SuperExec, found
through /proc (a child of that SuperExec, itself a child of the SuperLink process this test
started). The resumed jobs are submitted as soon as the ServerApps are dead, as an operator
restarting them would, after stopping the dead runs (``flwr stop``, Flower's status
``finished:stopped``), the runbook's first step (docs/deployment.md). Without it Flower marks a
killed run ``finished:failed`` only when its heartbeats are overdue (2 x 30 s,
``HEARTBEAT_DEFAULT_INTERVAL``), and until then the SuperNodes took no message of the resumed
runs: their two rounds took 59 s against 4.5 s after ``flwr stop`` (measured here, 2 cores).

Known: FFGB's resumed rows after the checkpoint differ from the uninterrupted run's by about
1e-9 relative (oracle_error, test_loss). A node brought up to date gets the whole ensemble at
once (``Ensemble.snapshot``) and sums f in another order than the incremental
``PredictionCache.update`` of a node that kept its state; the same holds in-process (strict
xfail below).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from deploy.app_files import app_copy
from deploy.deployment import Deployment
from deploy.ports import free_port_block
from run_config.declared import parse_overrides
from server_app.checkpoint import FILE_NAME, read_checkpoint
from server_app.results import CLOCKS
from testing.processes import new_server_app, server_apps
from tests.helpers import run_app
from tests.lifecycle.test_checkpoints import is_traffic

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time

NODES = 2
ROUNDS = 4
COMMON = f"num-server-rounds={ROUNDS} min-nodes={NODES} reply-timeout=300"
JOBS = {
    "fedfw": "algorithm='fedfw' task='synthetic' fedfw.federated-eval=false",
    "ffgb": "algorithm='ffgb' task='digits' ffgb.local-steps=1 ffgb.oracle-steps=20 "
    "ffgb.hidden=8 ffgb.federated-eval=false",
}
KILL_AFTER = 2  # the checkpoint round after which a ServerApp dies
FFGB_REL = 1e-6  # FFGB after the checkpoint: the ensemble summed in another order (see above)


def config(name: str) -> str:
    return f"{JOBS[name]} {COMMON}"


def saved_round(folder: Path) -> int:
    return read_checkpoint(folder).server_round if (folder / FILE_NAME).exists() else -1


def rows_equal(got: list[dict], want: list[dict], after: int, late_rel: float = 1e-12) -> None:
    """Every key but the clocks' equal (rel 1e-12; ``late_rel`` for floats after the
    checkpoint), but traffic after the checkpoint, which can only be larger; after it, no
    failure and every node taking part."""
    assert [r["round"] for r in got] == [r["round"] for r in want] == list(range(ROUNDS + 1))
    for a, b in zip(got, want):
        late = a["round"] > after
        assert a.keys() == b.keys(), a["round"]
        keep = [k for k in a if k not in CLOCKS and not (late and is_traffic(k))]
        exact = [k for k in keep if not isinstance(a[k], float)]
        assert {k: a[k] for k in exact} == {k: b[k] for k in exact}, a["round"]
        rel = late_rel if late else 1e-12
        assert {k: a[k] for k in keep} == pytest.approx(
            {k: b[k] for k in keep}, rel=rel, abs=0.0
        ), a["round"]
        assert all(a[k] >= b[k] for k in a if is_traffic(k)), a["round"]
        if late:  # no round lost: both nodes, brought up to date, took part
            assert (a["failures"], a["participants"]) == (0, NODES), a


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Both jobs killed after round KILL_AFTER (or the round saved by the time the kill lands)
    and resumed; per job: the killed and resumed runs' statuses, the checkpoint round, the
    resumed run's log and its metrics rows."""
    work = tmp_path_factory.mktemp("resume")
    app = app_copy(work / "app")
    d = Deployment(work / "deploy", base_port=free_port_block(), warm=True)
    results = d.workdir / "results"
    job = {name: f"{config(name)} output-dir='{results}' run-name='{name}'" for name in JOBS}
    killed, pids, after = {}, {}, {}
    try:
        d.start_superlink()
        for i in range(NODES):
            d.start_supernode(i, NODES)
        for name in JOBS:  # one at a time, to tell their ServerApp processes apart
            before = server_apps(d)
            killed[name] = d.submit(job[name], app)
            pids[name] = new_server_app(d, before)
        deadline = time.monotonic() + 300
        while len(after) < len(JOBS):
            for name in set(JOBS) - set(after):
                if saved_round(results / name) >= KILL_AFTER:
                    os.kill(pids[name], signal.SIGKILL)
                    after[name] = saved_round(results / name)  # a later one may have landed
            assert time.monotonic() < deadline, f"checkpoints after {after} only"
            time.sleep(0.1)
        assert all(r < ROUNDS for r in after.values()), f"a run finished before the kill: {after}"
        for run_id in killed.values():  # the operator's first step: the dead runs stopped
            d.stop_run(run_id)
        again = dict(
            zip(JOBS, d.submit_all([f"{job[n]} resume-from='{results / n}'" for n in JOBS], app))
        )
        statuses = d.wait_for_runs([*killed.values(), *again.values()], timeout=600)
    finally:
        d.stop()
    return {
        name: {
            "killed": statuses[killed[name]],
            "resumed": statuses[again[name]],
            "after": after[name],
            "log": (d.workdir / "logs" / f"{again[name]}.log").read_text(),
            "rows": json.loads((results / name / "metrics.json").read_text())["rounds"],
        }
        for name in JOBS
    }


@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_killed_server_app_resumed_in_a_deployment_equals_an_uninterrupted_run(
    resumed, tmp_path, name
):
    run = resumed[name]
    assert (run["killed"], run["resumed"]) == ("finished:stopped", "finished:completed"), run
    assert f"Resuming after round {run['after']} of {ROUNDS}" in run["log"], run["log"][-3000:]
    whole = run_app(tmp_path, NODES, **parse_overrides(config(name))).rows
    rows_equal(run["rows"], whole, run["after"], FFGB_REL if name == "ffgb" else 1e-12)


@pytest.mark.xfail(
    strict=True,
    reason="known: a node brought up to date sums FFGB's ensemble "
    "in another order than one that kept its state (about 1e-9 relative)",
)
def test_ffgb_resumed_in_a_deployment_is_exact(resumed, tmp_path):
    whole = run_app(tmp_path, NODES, **parse_overrides(config("ffgb"))).rows
    rows_equal(resumed["ffgb"]["rows"], whole, resumed["ffgb"]["after"])
