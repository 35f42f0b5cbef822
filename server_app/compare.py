"""Compare finished runs: their curves on one figure, by round and by bytes moved, and a table of
final and best metrics with what differs between their configs.

    python -m server_app.compare RUN_DIR [RUN_DIR ...] [--out compare.png] [--metric KEY]

Each RUN_DIR is a results folder (``metrics.json`` and ``config.json``). The metric is the first
of ``server_app.results.METRIC_KEYS`` that every run reports, unless ``--metric`` names one. The
bytes axis is the cumulative payload of every message, as in each run's own plot
(``server_app.results.cumulative_traffic``). The files are read as data and checked: a folder
that is not a results folder, or a file that does not hold what a run writes, is an error naming
it (exit 2), before anything is drawn.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server_app.results import BYTES_AXIS, METRIC_KEYS, cumulative_traffic, summarise, write_atomic
from server_app.run_info import code_of

IGNORED = ("output-dir", "run-name", "git-commit", "resume-from")  # not what a run computes


class RunFolderError(ValueError):
    """A folder that is not a readable results folder; the message names the file."""


@dataclass(frozen=True)
class FinishedRun:
    """A results folder: its name, rows, run config and the code that made it
    (``run_info.code_of``)."""

    name: str
    rounds: list[dict[str, Any]]
    run_config: dict[str, Any]
    code: str = "unknown"


def read_run(folder: Path) -> FinishedRun:
    """The rows and run config of a results folder, checked."""
    folder = Path(folder)
    metrics, config = (_json(folder / name) for name in ("metrics.json", "config.json"))
    rounds = metrics.get("rounds") if isinstance(metrics, dict) else None
    if not isinstance(rounds, list) or not all(isinstance(r, dict) for r in rounds):
        raise RunFolderError(f"{folder / 'metrics.json'}: expected {{'rounds': [rows]}}")
    for row in rounds:
        for key, value in row.items():
            if not (isinstance(value, (int, float)) or value is None) or (
                isinstance(value, float) and math.isinf(value)
            ):
                raise RunFolderError(
                    f"{folder / 'metrics.json'}: {key}={value!r} is not a finite number"
                )
    run_config = config.get("run_config") if isinstance(config, dict) else None
    if not isinstance(run_config, dict):
        raise RunFolderError(f"{folder / 'config.json'}: expected a 'run_config' object")
    return FinishedRun(folder.name, rounds, run_config, code_of(config))


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: no such file (not a results folder?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFolderError(f"{path}: unreadable ({type(err).__name__}: {err})") from None


def common_metric(runs: list[FinishedRun], wanted: str | None = None) -> str:
    """The metric every run reports (``wanted``, or the first of ``METRIC_KEYS``)."""

    def has(run: FinishedRun, key: str) -> bool:
        return any(r.get(key) is not None for r in run.rounds)

    candidates = [wanted] if wanted else list(METRIC_KEYS)
    for key in candidates:
        if all(has(run, key) for run in runs):
            return key
    raise RunFolderError(
        f"no metric in common among {candidates} ({', '.join(run.name for run in runs)})"
    )


def config_differences(runs: list[FinishedRun]) -> dict[str, list[Any]]:
    """Each run-config key whose value differs between the runs: its value in each run."""
    keys = sorted({k for run in runs for k in run.run_config} - set(IGNORED))
    return {
        key: [run.run_config.get(key) for run in runs]
        for key in keys
        if len({json.dumps(run.run_config.get(key)) for run in runs}) > 1
    }


def table(runs: list[FinishedRun], metric: str) -> str:
    """A markdown table: each run's final and best metric, rounds, MB moved (``summarise``, as
    its own metrics.json has them) and its values of the keys that differ."""
    differences = config_differences(runs)
    head = ["run", "code", f"final {metric}", f"best {metric}", "rounds", "MB moved"]
    head += list(differences)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, run in enumerate(runs):
        summary = summarise(run.rounds)
        moved = (summary["bytes_up_total"] + summary["bytes_down_total"]) / 1e6
        cells = [
            run.name,
            run.code,
            _figure(summary.get(f"final_{metric}")),
            _figure(summary.get(f"best_{metric}")),
            str(summary["rounds"]),
            f"{moved:.2f}",
            *(json.dumps(v[i]) for v in differences.values()),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _figure(value: float | None) -> str:
    """A table's number: 4 decimals, or "none" (a diverged run's final value)."""
    return "none" if value is None or not math.isfinite(value) else f"{value:.4f}"


def traffic_scale(ax, xs: list[float]) -> None:  # a matplotlib Axes
    """The bytes axis: logarithmic, so runs that move kilobytes and gigabytes share it, but
    linear below the smallest traffic of any round (symlog), so that round 0, before any byte
    moved, is drawn at 0 instead of being clipped off a log axis."""
    positive = [x for x in xs if x > 0]
    ax.set_xscale("symlog", linthresh=min(positive) if positive else 1.0, linscale=0.5)


def draw(runs: list[FinishedRun], metric: str, out: Path) -> Path:
    """One figure, two panels: ``metric`` by round and by cumulative bytes, one line a run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_round, by_bytes) = plt.subplots(1, 2, figsize=(10, 4))
    traffic = []
    for run in runs:
        rows = [r for r in run.rounds if r.get(metric) is not None]
        ys = [r[metric] for r in rows]
        by_round.plot([r["round"] for r in rows], ys, marker="o", markersize=3, label=run.name)
        xs = cumulative_traffic(run.rounds, metric)
        by_bytes.plot(xs, ys, marker="o", markersize=3, label=run.name)
        traffic += xs
    label = metric.replace("_", " ")
    for ax, xlabel in ((by_round, "round"), (by_bytes, BYTES_AXIS)):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    traffic_scale(by_bytes, traffic)
    by_round.legend(fontsize=7)
    fig.suptitle(f"{label} of {len(runs)} runs, by round and by bytes moved", fontsize=9)
    fig.tight_layout()
    write_atomic(out, lambda handle: fig.savefig(handle, format="png", dpi=100))
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="results folders")
    parser.add_argument("--out", type=Path, default=Path("compare.png"), help="the figure")
    parser.add_argument("--metric", choices=METRIC_KEYS, help="default: the first in common")
    args = parser.parse_args(argv)
    try:
        runs = [read_run(folder) for folder in args.runs]
        metric = common_metric(runs, args.metric)
    except RunFolderError as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2
    print(table(runs, metric))
    print(f"figure: {draw(runs, metric, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
