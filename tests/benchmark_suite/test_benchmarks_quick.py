"""Every benchmark declared with a ``--quick`` smoke version (``benchmarks.cases``) still runs
and writes its report (one of them once failed for months on a grid hook that had gone:
``tests/benchmark_suite/test_benchmark_wire.py``). Each through the runner, as a user runs it, its
reports in a temporary folder."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import main as runner
from benchmarks.cases import CASES, ONE_WORKER, PAPERS

ROOT = Path(__file__).resolve().parents[2]
QUICK = [(c.name, list(c.quick)) for c in CASES if c.quick is not None and not c.quick_in]
POOLED = "fedfw_table3"  # the one that keeps its default pool of 2 worker processes


def test_every_runnable_benchmark_is_a_declared_case():
    runnable = {
        path.stem for path in (ROOT / "benchmarks").glob("*.py") if "__main__" in path.read_text()
    }
    assert runnable - {"__main__", "readme"} == {c.name for c in CASES}
    assert all((ROOT / c.quick_in).is_file() for c in CASES if c.quick_in)


def test_the_papers_tables_and_figures_name_declared_cases():
    names = {c.name for c in CASES}
    for item, where in PAPERS.items():
        assert where in names or where.startswith("no experiment"), item
    for declared in CASES:
        assert all(PAPERS[item] == declared.name for item in declared.papers), declared.name


def test_every_benchmark_with_jobs_runs_them_in_its_own_process_but_one_in_a_pool():
    with_jobs = {
        path.stem
        for path in (ROOT / "benchmarks").glob("*.py")
        if "run_jobs(" in path.read_text() and path.stem != "common"
    }
    assert POOLED in with_jobs
    assert {name for name, args in QUICK if tuple(args) == ONE_WORKER} == with_jobs - {POOLED}


def test_the_runner_lists_every_case_and_the_papers(capsys):
    assert runner(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(f" {c.name} " in listed for c in CASES)
    assert all(item in listed for item in PAPERS)


@pytest.mark.e2e
@pytest.mark.parametrize("name, args", QUICK, ids=[name for name, _ in QUICK])
def test_a_quick_benchmark_runs_and_writes_its_report(name, args, tmp_path):
    env = {**os.environ, "FL_BENCH_QUICK_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", name, "--quick"],
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


# the one case whose command needs a subcommand: it writes or compares rows files, and writing
# the reference rows must be asked for by name
NEEDS_ARGUMENTS = {"same_rows"}


def required_arguments(usage: str) -> str:
    """What a usage line asks for outside its optional ``[...]`` groups."""
    text = " ".join(usage.split()).split(" ", 2)[-1]  # after "usage: prog"
    while re.search(r"\[[^\[\]]*\]", text):
        text = re.sub(r"\[[^\[\]]*\]", "", text)
    return text.strip()


@pytest.mark.parametrize("declared", CASES, ids=[c.name for c in CASES])
def test_a_case_runs_as_declared_without_arguments(declared, capsys, monkeypatch):
    """``python -m benchmarks run NAME`` passes a case only its declared ``full`` arguments: an
    option it requires would fail the run at once (``boosting_ablation``'s ``--out`` once did, in
    a batch of re-runs)."""
    module = importlib.import_module(f"benchmarks.{declared.name}")
    monkeypatch.setattr(sys, "argv", [f"{declared.name}.py", "--help"])
    with pytest.raises(SystemExit):
        module.main()
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.startswith("usage:")
    assert bool(required_arguments(usage)) == (declared.name in NEEDS_ARGUMENTS), usage
