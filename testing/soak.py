"""A long run under faults: one job through a deployment that a schedule keeps breaking, then
the checks that nothing was lost.

The deployment is the separate-machines runbook's (docs/deployment.md) on one machine:
``deploy.deployment.Deployment`` with TLS, SuperNode authentication, the nginx perimeter and the
SuperLink's state in a SQLite file (``--database``); with root and ``ip``, the SuperLink and
each SuperNode in a network namespace of its own (``deploy.netns.Star``), one node's link slow
and lossy (``Star.impair``); else everything on loopback, unimpaired (``Soak.network`` says
which). SuperNodes retry the SuperLink without limit, as Flower's own default does, so that they
ride out its restart.

The schedule is data (``Fault``), each fault injected once the row of its round is on disk:

- ``node-crash``: a SuperNode's process group SIGKILLed, and a new SuperNode started for its
  partition (a new key, so a new node id: the roster rebinds the partition to it once the old
  id is offline, which Flower notices from missed heartbeats);
- ``node-restart``: the same after SIGTERM (the node tells the SuperLink it leaves);
- ``serverapp``: the run's ServerApp process SIGKILLed; the operator's steps follow: ``flwr
  stop`` of the dead run, the same job submitted with ``resume-from`` its results folder;
- ``superlink``: the SuperLink restarted (SIGTERM) on the same database. In flwr 1.42 the
  ServerApp does not survive it (its SuperExec watches the SuperLink, the ServerApp watches the
  SuperExec: ``--parent-pid``), so the run is stopped and resumed as after ``serverapp``; the
  registered keys and node ids are in the database, and the SuperNodes reconnect.

``check`` compares the finished results folder with an undisturbed run of the same job and seed
on the in-process engine (the same rows as an undisturbed deployment, docs/deployment.md):
the run completed, every round's row once, the checkpoint readable at the last round, the rows
before the round of the first fault equal, the final metrics within ``ACCURACY_TOLERANCE`` and
``LOSS_TOLERANCE``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.deployment import Deployment
from deploy.netns import NETEM, Star
from deploy.ports import free_port_block
from server_app.checkpoint import read_checkpoint
from server_app.results import CLOCKS
from testing.processes import server_apps

KINDS = ("node-crash", "node-restart", "serverapp", "superlink")
# The faults take node-rounds away (a node's learners missing from a round) and a resumed round
# brings nodes up to date (FFGB's sums then differ by about 1e-9): the run is the same job, not
# the same computation, so its final metrics are compared within bounds, not to the bit.
# Digits' test split is 360 images: 0.01 is under 4 of them. The undisturbed default job's test
# loss falls by under 1 % a round late in a run, so 5 % is several rounds' progress.
ACCURACY_TOLERANCE = 0.01  # absolute, final test_accuracy
LOSS_TOLERANCE = 0.05  # relative, final test_loss


@dataclass(frozen=True)
class Fault:
    """One fault: its kind (``KINDS``), injected once round ``after``'s row is on disk;
    ``node``: the partition whose SuperNode it hits (node faults)."""

    kind: str
    after: int
    node: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r}: one of {', '.join(KINDS)}")


def schedule(rounds: int, nodes: int) -> list[Fault]:
    """The soak's schedule for a run of ``rounds``: a SuperNode fault every eighth of the run
    (crashes and restarts in turn, each partition in turn, the slow one included), the ServerApp
    killed at 40 % and the SuperLink restarted at 70 %; none in the last 10 % of rounds."""
    step = max(1, rounds // 8)
    faults = [
        Fault("node-crash" if k % 2 else "node-restart", after, k % nodes)
        for k, after in enumerate(range(step // 2 + 1, int(rounds * 0.9), step))
    ]
    faults += [Fault("serverapp", int(rounds * 0.4)), Fault("superlink", int(rounds * 0.7))]
    return sorted(faults, key=lambda f: (f.after, f.kind))


# the short version (tests/deployment/test_soak.py, ``benchmarks.soak --quick``): SuperNodes
# stopped with SIGTERM, since a SIGKILLed one costs the minute Flower takes to miss its heartbeats
SHORT_ROUNDS, SHORT_NODES = 7, 2
SHORT = [Fault("node-restart", 2, node=1), Fault("serverapp", 3), Fault("superlink", 5)]


@dataclass
class Injected:
    """A fault as it happened: the last round on disk then, seconds since the job was
    submitted, seconds until the next round's row came, and what it did."""

    kind: str
    round: int
    at_s: float
    detail: str
    recovered_s: float | None = None


@dataclass
class Soak:
    """One job on a fresh deployment under ``faults``; ``run`` returns what happened."""

    workdir: Path
    job: str  # the job's run config (the default job: "")
    rounds: int
    faults: list[Fault]
    nodes: int = 3
    slow_node: int | None = 0  # the partition whose link is impaired (namespaces only)
    netem: str = NETEM
    reply_timeout: float = 120.0
    timeout: float = 3600.0
    network: str = ""
    injected: list[Injected] = field(default_factory=list)
    runs: dict[str, str] = field(default_factory=dict)  # Flower run id -> final status

    @property
    def results(self) -> Path:
        return self.workdir / "results" / "job"

    def config(self) -> str:
        return (
            f"{self.job} num-server-rounds={self.rounds} min-nodes={self.nodes} "
            f"reply-timeout={self.reply_timeout} join-timeout={self.reply_timeout} "
            f"output-dir='{self.results.parent}' run-name='job'"
        ).strip()

    def run(self) -> dict[str, Any]:
        """Set up, run the job through the schedule, tear everything down (every process by
        PID, the namespaces), also on an error; the outcome (``outcome``)."""
        star = None
        if os.geteuid() == 0 and shutil.which("ip"):
            star = Star(f"fls{os.getpid() % 1000}", self.nodes)
        size = 12 + 2 * (self.nodes + len(self.faults))  # a SuperNode's ports per start
        self.deployment = Deployment(
            self.workdir / "deploy",
            tls=True,
            auth=True,
            base_port=free_port_block(size),
            star=star,
            perimeter=True,
            database=self.workdir / "deploy" / "state.db",
            max_retries=None,
            max_wait_time=None,
        )
        self.names = {i: f"supernode-{i}" for i in range(self.nodes)}
        started = time.monotonic()
        try:
            if star is None:
                self.network = "loopback, no link impaired (namespaces need root and `ip`)"
            else:
                star.create()
                self.network = "a network namespace per process"
                if self.slow_node is not None:
                    applied = star.impair(self.slow_node, self.netem)
                    self.network += f"; node {self.slow_node}'s link: {applied}"
            self.deployment.start_superlink()
            for i in range(self.nodes):
                self.deployment.start_supernode(i, self.nodes)
            self._drive()
        finally:
            self.deployment.stop()
            if star is not None:
                star.delete()
        return self.outcome(time.monotonic() - started)

    def _drive(self) -> None:
        """Submit the job, inject each fault when its round is on disk, resume the job after
        the faults that end its run, until a run of it finishes."""
        self.t0 = time.monotonic()
        self.run_id = self.deployment.submit(self.config())
        pending = sorted(self.faults, key=lambda f: f.after)
        checked = 0.0
        while True:
            last = last_round(self.results)
            for done in self.injected:
                if done.recovered_s is None and last > done.round:
                    done.recovered_s = round(time.monotonic() - self.t0 - done.at_s, 1)
            if pending and last >= pending[0].after:
                self._inject(pending.pop(0), last)
                continue
            if time.monotonic() - checked > 5:  # a ``flwr list`` costs about 1 s of CPU
                checked = time.monotonic()
                status = self.deployment.statuses().get(self.run_id, "")
                if status.startswith("finished"):
                    self.runs[self.run_id] = status
                    return
            if time.monotonic() - self.t0 > self.timeout:
                raise TimeoutError(f"the soak ran past {self.timeout} s at round {last}")
            self.deployment.check_alive()
            time.sleep(0.5)

    def _inject(self, fault: Fault, last: int) -> None:
        at = round(time.monotonic() - self.t0, 1)
        if fault.kind in ("node-crash", "node-restart"):
            how = signal.SIGKILL if fault.kind == "node-crash" else signal.SIGTERM
            old = self.names[fault.node]
            self.deployment.kill(old, how)
            new = f"supernode-{fault.node}-{len(self.injected)}"
            self.deployment.start_supernode(
                fault.node, self.nodes, name=new, slot=self.nodes + len(self.injected)
            )
            self.names[fault.node] = new
            detail = (
                f"partition {fault.node}: node {self.deployment.node_ids[old]} "
                f"{how.name}, node {self.deployment.node_ids[new]} started"
            )
        else:
            if fault.kind == "serverapp":
                (pid,) = server_apps(self.deployment)
                os.kill(pid, signal.SIGKILL)
            else:
                self.deployment.restart_superlink(signal.SIGTERM)
            detail = self._resume(fault.kind)
        self.injected.append(Injected(fault.kind, last, at, detail))

    def _resume(self, kind: str) -> str:
        """The operator's steps after the run's ServerApp died: ``flwr stop`` the dead run
        (Flower would mark it failed only when its heartbeats are overdue), submit the job
        again with ``resume-from`` its results folder."""
        self.deployment.stop_run(self.run_id)
        self.runs[self.run_id] = self.deployment.statuses().get(self.run_id, "")
        saved = read_checkpoint(self.results).server_round
        before = self.run_id
        self.run_id = self.deployment.submit(f"{self.config()} resume-from='{self.results}'")
        cause = "ServerApp SIGKILLed" if kind == "serverapp" else "SuperLink restarted (SIGTERM)"
        return f"{cause}; run {before} stopped, resumed from round {saved} as run {self.run_id}"

    def outcome(self, wall_s: float) -> dict[str, Any]:
        """What happened: the network, the faults, the runs and their statuses, the rows on
        disk and the checkpoint's round (or why it does not read), the wall time."""
        rows = read_rows(self.results)
        try:
            checkpoint: int | str = read_checkpoint(self.results).server_round
        except Exception as err:  # reported, never raised: the check fails on it
            checkpoint = f"unreadable: {err}"
        return {
            "rounds": self.rounds,
            "nodes": self.nodes,
            "job": self.job,
            "network": self.network,
            "faults": [vars(f) for f in self.injected],
            "runs": self.runs,
            "status": self.runs.get(self.run_id, "unknown"),
            "rows": rows,
            "checkpoint_round": checkpoint,
            "wall_s": round(wall_s, 1),
        }


def read_rows(results: Path) -> list[dict]:
    path = results / "metrics.json"
    return json.loads(path.read_text())["rounds"] if path.exists() else []


def last_round(results: Path) -> int:
    """The last round whose row is on disk (-1: none yet)."""
    try:
        rows = read_rows(results)
    except (OSError, ValueError):  # never part of a file (written atomically); gone meanwhile
        return -1
    return rows[-1]["round"] if rows else -1


def undisturbed(job: str, rounds: int, nodes: int, workdir: Path) -> list[dict]:
    """The job's rows on the in-process engine (``testing.inprocess_grid``): the same ServerApp
    and ClientApp, no deployment, no fault."""
    from client_app.app import app as client_app
    from run_config.declared import parse_overrides
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    values = {
        **parse_overrides(job),
        "num-server-rounds": rounds,
        "min-nodes": nodes,
        "output-dir": str(workdir),
        "run-name": "undisturbed",
    }
    config = run_config(**values)
    server_main(LocalGrid(client_app, config, nodes, keep_messages=False), server_context(config))
    return read_rows(workdir / "undisturbed")


def check(outcome: dict[str, Any], reference: list[dict]) -> dict[str, Any]:
    """The soak's verdicts against the undisturbed ``reference`` rows: each a value and
    whether it passes (``ok``: all of them)."""
    rows, rounds = outcome["rows"], outcome["rounds"]
    # a row on disk when the first fault struck may still change: FFGB's nodes' evaluation of a
    # round rides on the next round's replies, which the fault can hit
    first = min((f["round"] for f in outcome["faults"]), default=rounds + 1)
    before = [r for r in rows if r["round"] < first]
    same = before == [] or all(
        rows_equal(a, b) for a, b in zip(before, reference[: len(before)], strict=True)
    )
    final, want = rows[-1] if rows else {}, reference[-1]
    accuracy = final.get("test_accuracy", float("nan")) - want["test_accuracy"]
    loss = final.get("test_loss", float("nan")) / want["test_loss"] - 1
    verdicts = {
        "completed": outcome["status"] == "finished:completed",
        "every_row_once": [r["round"] for r in rows] == list(range(rounds + 1)),
        "checkpoint_readable": outcome["checkpoint_round"] == rounds,
        "rows_before_first_fault_equal": same,
        "accuracy_within_tolerance": abs(accuracy) <= ACCURACY_TOLERANCE,
        "loss_within_tolerance": abs(loss) <= LOSS_TOLERANCE,
    }
    return {
        **verdicts,
        "ok": all(verdicts.values()),
        "rows_before_first_fault": len(before),
        "final_test_accuracy": final.get("test_accuracy"),
        "undisturbed_test_accuracy": want["test_accuracy"],
        "accuracy_difference": accuracy,
        "final_test_loss": final.get("test_loss"),
        "undisturbed_test_loss": want["test_loss"],
        "loss_relative_difference": loss,
        "failures": sum(r.get("failures", 0) for r in rows),
    }


def rows_equal(a: dict, b: dict, rel: float = 1e-12) -> bool:
    """Two rows equal but for their clocks (floats to ``rel``)."""
    keys = [k for k in a if k not in CLOCKS]
    if a.keys() != b.keys():
        return False
    for k in keys:
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float):
            if abs(x - y) > rel * max(abs(x), abs(y)):
                return False
        elif x != y:
            return False
    return True
