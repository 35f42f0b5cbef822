"""Every benchmark with a ``--quick`` smoke version still runs and writes its report (one of them
once failed for months on a grid hook that had gone: ``tests/test_benchmark_wire.py``). Each in
a subprocess, as a user runs it, its reports in a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the benchmarks that run their jobs through ``benchmarks.common.run_jobs`` run them in their
# own process (``--workers 1``: a worker process would spend about 7 s of CPU starting up), but
# for one that keeps its default pool of 2 worker processes
ONE_WORKER = ["--workers", "1"]
POOLED = "fedfw_table3"
QUICK = [
    ("ensemble_eval", []),
    ("fab_build", []),
    ("fedfun_tables", ONE_WORKER),
    ("fedfw_downlink", ONE_WORKER),
    ("fedfw_l1_optimum", []),
    ("fedfw_participation", ONE_WORKER),
    ("fedfw_seeds", ONE_WORKER),
    ("fedfw_table1", ONE_WORKER),
    ("fedfw_table3", []),
    ("fedfw_wire", ONE_WORKER),
    ("hist_time", []),
    ("learner_decode", []),
    ("ffgb_distillation", ONE_WORKER),
    ("ffgb_figure1", ONE_WORKER),
    ("ffgb_heterogeneous", ONE_WORKER),
    ("ffgb_mnist", ONE_WORKER),
    ("oracle_speed", []),
    ("dp_tradeoff", ONE_WORKER),
    ("privacy", []),
    ("privacy_dlg", []),
    ("secure_cost", []),
    ("tree_fit", []),
    # two of its workloads (tests/test_benchmark_devices.py checks every one's run config)
    ("devices", ["--devices", "cpu", "--only", "the default job|FedFW"]),
]

# quick versions that are a serial e2e test's run already (live deployments on timers, which
# this module's parallel e2e tests must not start beside others)
RUN_ELSEWHERE = {"soak": "tests/test_soak.py"}


def test_the_list_names_every_benchmark_with_a_quick_version():
    with_quick = {
        path.stem for path in (ROOT / "benchmarks").glob("*.py") if "args.quick" in path.read_text()
    }
    assert with_quick == {name for name, _ in QUICK} | set(RUN_ELSEWHERE)
    assert all((ROOT / test).is_file() for test in RUN_ELSEWHERE.values())


def test_every_benchmark_with_jobs_runs_them_in_its_own_process_but_one_in_a_pool():
    with_jobs = {
        path.stem
        for path in (ROOT / "benchmarks").glob("*.py")
        if "run_jobs(" in path.read_text() and path.stem != "common"
    }
    assert POOLED in with_jobs
    assert {name for name, args in QUICK if args == ONE_WORKER} == with_jobs - {POOLED}


@pytest.mark.e2e
@pytest.mark.parametrize("name, args", QUICK, ids=[name for name, _ in QUICK])
def test_a_quick_benchmark_runs_and_writes_its_report(name, args, tmp_path):
    env = {**os.environ, "FL_BENCH_QUICK_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert " failed: " not in done.stdout, done.stdout[-3000:]  # a row it reports, not raises
    reports = list(tmp_path.glob("*.md"))
    assert reports, f"benchmarks.{name} --quick wrote no report in {tmp_path}"
    assert all("- command: " in report.read_text() for report in reports)
