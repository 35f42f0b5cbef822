"""The exit status of the newest Flower run, for scripts: ``flwr run --stream`` exits 0 whatever
became of the run (a ServerApp that raised still ends its stream normally), so ``make run``
follows it with this, which reads Flower's run list and exits 1 unless that run is
``finished:completed``.

    python -m server_app.run_status [CONNECTION]   # e.g. after `flwr run . --stream`

It prints ``run <id>: <status>`` (and Flower's details when it failed). Exit 2 when the list
cannot be read (no SuperLink, no run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

COMPLETED = "finished:completed"


def newest_run(listing: str) -> dict[str, Any]:
    """The most recently submitted run of ``flwr list --format json``'s output; ValueError if
    there is none or the output is not that list."""
    runs = json.loads(listing).get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError("Flower lists no run")
    return max(runs, key=lambda r: (str(r.get("pending-at") or ""), str(r.get("run-id"))))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    flwr = Path(sys.executable).with_name("flwr")
    done = subprocess.run([str(flwr), "list", *args, "--format", "json"], capture_output=True,
                          text=True, check=False)
    try:
        run = newest_run(done.stdout)
    except (ValueError, json.JSONDecodeError, AttributeError) as err:
        print(f"run_status: cannot read Flower's run list ({err}): {done.stderr.strip()[-300:]}",
              file=sys.stderr)
        return 2
    status = run.get("status")
    print(f"run {run.get('run-id')}: {status}")
    if status != COMPLETED:
        print(f"run {run.get('run-id')} did not complete: {run.get('status-details') or status}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
