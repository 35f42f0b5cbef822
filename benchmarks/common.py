"""Shared code of the FedFW benchmarks: run jobs on the in-process engine, read their rows,
pick hyper-parameters, write markdown reports with the machine and commit they ran on.

A job runs the project's real ServerApp and ClientApp through ``testing.inprocess_grid``
(Flower's message serialisation both ways, one Context per node, no Ray), exactly as the
end-to-end tests do, and its rows are read back from ``<out>/<run-name>/metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
HPARAMS_FILE = RESULTS / "hparams.json"  # written by fedfw_table1, read by the others


@dataclass(frozen=True)
class Job:
    """One federated run: ``num_nodes`` clients and run-config ``overrides``."""

    name: str
    num_nodes: int
    overrides: dict[str, Any] = field(default_factory=dict)
    wire: bool = False  # also measure Flower's serialised message sizes
    node_configs: tuple[dict[str, Any], ...] = ()  # per node (partition order): node config


# -- running --------------------------------------------------------------------------------
def _wire_grid_class():
    """LocalGrid that also records the size of every message as Flower serialises it."""
    from flwr.common.serde import message_to_proto, recorddict_to_proto

    from testing.inprocess_grid import LocalGrid, Wire, inflate

    class WireGrid(LocalGrid):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.wire: list[dict] = []

        def node_step(self, wire: Wire) -> Wire:
            reply_wire = super().node_step(wire)
            # as both travel: the ServerApp's and the ClientApp's records packed
            message, reply = inflate(wire), inflate(reply_wire)
            self.wire.append(
                {
                    "type": message.metadata.message_type,
                    "down_content": recorddict_to_proto(message.content).ByteSize(),
                    "down_message": message_to_proto(message).ByteSize(),
                    "up_content": (
                        0 if reply.has_error() else recorddict_to_proto(reply.content).ByteSize()
                    ),
                    "up_message": message_to_proto(reply).ByteSize(),
                }
            )
            return reply_wire

    return WireGrid


def _run_in_this_process(job: dict, out_dir: str, diverged_ok: bool = False) -> dict:
    """Run one job (in a worker process) and return its rows and wall time.

    With ``job["wire"]`` true the result also has ``wire``: for every delivered message the
    bytes of its content (Flower's RecordDict protobuf) and of the whole Message protobuf.
    With ``diverged_ok`` a run that diverges returns its rows up to then and ``diverged`` (the
    run's sentence) instead of raising ``RunDiverged``: a grid point that blows up loses.
    """
    import logging

    logging.disable(logging.WARNING)  # Flower logs every round at INFO; keep WARNING+ quiet too
    from client_app.app import app as client_app
    from server_app.app import RunDiverged
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, counting, run_config, server_context

    # a benchmark's base settings serve several families: each run gets the keys that count
    config = run_config(
        **{"output-dir": out_dir, "run-name": job["name"], **counting(job["overrides"])}
    )
    start = time.perf_counter()
    grid = (_wire_grid_class() if job.get("wire") else LocalGrid)(
        client_app,
        config,
        job["num_nodes"],
        keep_messages=False,
        node_configs=list(job.get("node_configs") or []) or None,
    )
    diverged = None
    try:
        server_main(grid, server_context(config))
    except RunDiverged as err:
        if not diverged_ok:
            raise
        diverged = str(err)
    wall = time.perf_counter() - start
    run_dir = Path(out_dir) / job["name"]
    rows = json.loads((run_dir / "metrics.json").read_text())["rounds"]
    result = {"name": job["name"], "rows": rows, "wall_s": wall}
    if diverged:
        result["diverged"] = diverged
    if job.get("wire"):
        result["wire"] = grid.wire
        (run_dir / "wire.json").write_text(json.dumps(grid.wire))
    saved = {**job, "wall_s": wall, **({"diverged": diverged} if diverged else {})}
    (run_dir / "job.json").write_text(json.dumps(saved, indent=1))
    return result


# what a job saved before a field existed had: its default
JOB_DEFAULTS: dict[str, Any] = {"wire": False, "node_configs": []}


def _cached(job: dict, out_dir: Path) -> dict | None:
    run_dir = out_dir / job["name"]
    try:
        saved = json.loads((run_dir / "job.json").read_text())
        rows = json.loads((run_dir / "metrics.json").read_text())["rounds"]
    except (OSError, ValueError, KeyError):
        return None
    if {k: saved.get(k, JOB_DEFAULTS.get(k)) for k in job} != job:
        return None
    hit = {"name": job["name"], "rows": rows, "wall_s": saved["wall_s"], "cached": True}
    if "diverged" in saved:
        hit["diverged"] = saved["diverged"]
    if job.get("wire"):
        try:
            hit["wire"] = json.loads((run_dir / "wire.json").read_text())
        except (OSError, ValueError):
            return None
    return hit


def run_jobs(
    jobs: list[Job],
    out_dir: Path,
    workers: int = 2,
    reuse: bool = False,
    diverged_ok: bool = False,
) -> dict[str, dict]:
    """Run ``jobs`` on up to ``workers`` processes; {name: {"rows", "wall_s"}}. With one
    worker they run one after another in this process: no worker process spends its start-up
    (about 7 s of CPU importing flwr, torch and the app on 2 cores) on a smoke run's few jobs.

    ``reuse`` takes a job's earlier result from ``out_dir`` when it ran with the same spec.
    ``diverged_ok``: a run that diverges gives its rows up to then and ``diverged``, rather
    than stopping every job.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("job names must be unique")
    results: dict[str, dict] = {}
    todo = []
    for job in jobs:
        spec = json.loads(json.dumps(asdict(job)))
        hit = _cached(spec, out_dir) if reuse else None
        if hit:
            results[job.name] = hit
        else:
            todo.append(spec)
    for result in _results(todo, str(out_dir), workers, diverged_ok):
        results[result["name"]] = result
        last = result["rows"][-1]
        # FedFun's rows give the mean of the node models' accuracies
        accuracy = last.get("test_accuracy", last.get("test_accuracy_mean", float("nan")))
        print(
            f"  {result['name']:<48} {result['wall_s']:6.1f} s  acc={accuracy:.4f}  "
            f"train_loss={last.get('train_loss', float('nan')):.4f}"
            + ("  diverged" if "diverged" in result else ""),
            flush=True,
        )
    return {name: results[name] for name in names}


def _results(
    specs: list[dict], out_dir: str, workers: int, diverged_ok: bool = False
) -> Iterator[dict]:
    """Each spec's result as it finishes: in this process with one worker, else in a pool."""
    if workers <= 1:
        yield from (_run_in_this_process(spec, out_dir, diverged_ok) for spec in specs)
    elif specs:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = [
                pool.submit(_run_in_this_process, spec, out_dir, diverged_ok) for spec in specs
            ]
            yield from (future.result() for future in as_completed(futures))


def available_algorithms() -> list[str]:
    """The algorithms registered in run_config/families.py right now."""
    from run_config.families import algorithm_names

    return list(algorithm_names())


# -- reading rows ---------------------------------------------------------------------------
def train_rows(rows: list[dict]) -> list[dict]:
    """Rows of training rounds (round >= 1); round 0 is the initial evaluation."""
    return [r for r in rows if r.get("round", 0) >= 1]


def final(rows: list[dict], key: str) -> float:
    """The last row's ``key``; NaN when it has none (a diverged run's last row holds nulls)."""
    value = rows[-1].get(key)
    return float("nan") if value is None else float(value)


def best(rows: list[dict], key: str, lowest: bool = False) -> float:
    values = [r[key] for r in train_rows(rows) if key in r]
    if not values:
        return float("nan")
    return float(min(values) if lowest else max(values))


def at_round(rows: list[dict], round_: int, key: str) -> float:
    for r in rows:
        if r.get("round") == round_:
            return float(r.get(key, float("nan")))
    return float("nan")


def pick(results: dict[str, float]) -> str:
    """The key with the smallest finite value (NaN/inf lose)."""
    finite = {k: v for k, v in results.items() if math.isfinite(v)}
    if not finite:
        raise ValueError(f"no finite value to pick from: {results}")
    return min(finite, key=finite.get)


def load_hparams(constraint: str) -> dict[str, Any]:
    """Hyper-parameters fedfw_table1 chose for the ``constraint`` ball (empty when it has not
    run)."""
    try:
        return json.loads(HPARAMS_FILE.read_text())[constraint]
    except (OSError, ValueError, KeyError):
        return {}


def save_hparams(values: dict[str, dict[str, Any]]) -> None:
    """The values fedfw_table1 chose, one dict per constraint ball, beside this process's command
    and machine (the provenance benchmarks/README.md gives for the file)."""
    HPARAMS_FILE.parent.mkdir(parents=True, exist_ok=True)
    saved = {**values, "command": command_line(), "machine": machine_info()}
    HPARAMS_FILE.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")


# -- formatting -----------------------------------------------------------------------------
def pct(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.{digits}f}"


def num(value: float, fmt: str = ".4f") -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A GitHub markdown table; the first column is left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join([":--"] + ["--:"] * (len(headers) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _run(cmd: list[str], strip: bool = True) -> str:
    try:
        out = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        ).stdout
        return out.strip() if strip else out
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict[str, str]:
    """CPU, cores, RAM, git commit (and whether the tree had changes), versions, date."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        ram = f"{kib / 2**20:.1f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    status = [s for s in _run(["git", "status", "--porcelain"], strip=False).splitlines() if s]
    changed = [s for s in status if not s.startswith("??")]
    untracked = [s for s in status if s.startswith("??")]
    dirty = (
        "clean"
        if not status
        else f"{len(changed)} modified, {len(untracked)} untracked paths: "
        + ", ".join(s[3:] for s in status)
    )
    versions = []
    for mod in ("flwr", "torch", "numpy", "scipy"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            pass
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        # the process's CPU affinity: ``nproc`` would report OMP_NUM_THREADS, which benchmarks
        # set to 1 for their workers
        "cpu": f"{cpu} ({len(os.sched_getaffinity(0))} cores available)",
        "ram": ram,
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": ", ".join(versions),
        "commit": _run(["git", "rev-parse", "--short", "HEAD"]) or "unknown",
        "working tree": dirty,
        "load average (1/5/15 min) when the report was written": " / ".join(
            f"{v:.2f}" for v in os.getloadavg()
        ),
    }


def command_line() -> str:
    """This process's command as a shell would take it again (arguments with spaces quoted)."""
    module = Path(sys.argv[0]).stem
    return f"python -m benchmarks.{module} {shlex.join(sys.argv[1:])}".rstrip()


def write_report(
    path: Path,
    title: str,
    wall_s: float,
    body: str,
    *,
    command: str | None = None,
    info: dict[str, Any] | None = None,
) -> None:
    """``body`` under a header giving the command, machine, commit, date and wall time (this
    process's, or ``command`` and ``info`` kept from the run when a report is re-rendered)."""
    info = info if info is not None else machine_info()
    header = [
        f"# {title}",
        "",
        f"- command: `{command or command_line()}` (from the repository root, venv active)",
        f"- wall time: {wall_s / 60:.1f} min ({wall_s:.0f} s)",
    ]
    header += [f"- {k}: {v}" for k, v in info.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header) + "\n\n" + body.rstrip() + "\n")
    print(f"wrote {path}")


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke version (< 1 min); writes under benchmarks/results/quick/",
    )
    p.add_argument("--workers", type=int, default=2, help="parallel runs (default 2)")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="reuse finished runs with an identical spec from an earlier invocation",
    )
    return p


def results_dir(quick: bool) -> Path:
    """Where a benchmark writes its reports: ``results/``, or for ``--quick`` smoke runs
    ``results/quick/`` (git-ignored) or the folder ``FL_BENCH_QUICK_DIR`` names (tests)."""
    if not quick:
        return RESULTS
    return Path(os.environ.get("FL_BENCH_QUICK_DIR") or RESULTS / "quick")


def runs_dir(quick: bool, bench: str) -> Path:
    """Raw run folders (metrics.json, config.json; no plots: run config ``plots`` is off in
    ``testing.inprocess_grid.run_config``) of one benchmark."""
    return results_dir(quick) / "runs" / bench
