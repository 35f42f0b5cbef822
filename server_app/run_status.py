"""The exit status of the newest Flower run, for scripts: ``flwr run --stream`` exits 0 whatever
became of the run (a ServerApp that raised still ends its stream normally), so ``make run``
follows it with this, which reads Flower's run list and exits 1 unless that run is
``finished:completed``.

    python -m server_app.run_status [--output-dir DIR] [CONNECTION]   # after `flwr run . --stream`

It prints ``run <id>: <status>`` (and Flower's details when it failed), then, when the run's
results folder is found under ``--output-dir`` (the run config's ``output-dir``; default
``~/flower-results``), that folder and the run's health line (``server_app.outcome``). Exit 2
when the list cannot be read (no SuperLink, no run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from server_app.run_info import DEFAULT_OUTPUT_DIR

COMPLETED = "finished:completed"


def newest_run(listing: str) -> dict[str, Any]:
    """The most recently submitted run of ``flwr list --format json``'s output; ValueError if
    there is none or the output is not that list."""
    runs = json.loads(listing).get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError("Flower lists no run")
    return max(runs, key=lambda r: (str(r.get("pending-at") or ""), str(r.get("run-id"))))


def results_of(run_id: str, output_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The results folder under ``output_dir`` whose config.json names Flower run ``run_id``,
    and that config.json, newest folder first; None when there is none."""
    try:
        folders = sorted(
            (p for p in output_dir.iterdir() if p.is_dir()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return None
    for folder in folders:
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("flower_run_id") == str(run_id):
            return folder, config
    return None


def report(folder: Path | None, config: dict[str, Any] | None) -> list[str]:
    """The lines that say where a run's results are and how it ended (its health line), or
    that they are not there."""
    if folder is None or not (folder / "config.json").is_file():
        return ["no results folder: the run stopped before it wrote one"]
    outcome = (config or {}).get("outcome")
    line = outcome.get("line") if isinstance(outcome, dict) else None
    return [f"results: {folder}", line or "the run wrote no health line (it ended abruptly)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help="where the run writes its results folder (default: %(default)s)",
    )
    parser.add_argument("connection", nargs="*", help="Flower connection name, as for flwr list")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    flwr = Path(sys.executable).with_name("flwr")
    done = subprocess.run(
        [str(flwr), "list", *args.connection, "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        run = newest_run(done.stdout)
    except (ValueError, json.JSONDecodeError, AttributeError) as err:
        print(
            f"run_status: cannot read Flower's run list ({err}): {done.stderr.strip()[-300:]}",
            file=sys.stderr,
        )
        return 2
    status = run.get("status")
    print(f"run {run.get('run-id')}: {status}")
    found = results_of(str(run.get("run-id")), args.output_dir.expanduser())
    for line in report(*(found or (None, None))):
        print(line)
    if status != COMPLETED:
        print(
            f"run {run.get('run-id')} did not complete: {run.get('status-details') or status}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
