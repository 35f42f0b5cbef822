"""Where results go and what config.json records about the run."""

from __future__ import annotations

import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from run_config.common import RunSettings

DEFAULT_OUTPUT_DIR = Path.home() / "flower-results"


def results_directory(settings: RunSettings) -> Path:
    """``<output-dir>/<run-name>``; defaults: ~/flower-results and algorithm-task-timestamp.

    A given ``run-name`` may name an existing folder (a resumed run writes on into it). A default
    name is claimed by creating the folder: a second run of the same algorithm and task started
    in the same second (two users, parallel tests) gets ``-2``, ``-3``, ... instead of writing
    over the first one's files."""
    base = Path(settings.output_dir).expanduser() if settings.output_dir else DEFAULT_OUTPUT_DIR
    base = base.resolve()
    if settings.run_name:
        return base / settings.run_name
    stem = f"{settings.algorithm}-{settings.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True, exist_ok=True)
    for suffix in ("", *(f"-{n}" for n in range(2, 1000))):
        try:
            (base / f"{stem}{suffix}").mkdir()
        except FileExistsError:
            continue
        return base / f"{stem}{suffix}"
    raise OSError(f"{base} already has 999 results folders named {stem}[-N]")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    """The commit of the checkout the app runs from, if it runs from one (in-process runs; Flower's
    engines run an installed copy, so ``make run`` passes the commit as ``git-commit``)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def flower_app(grid: Grid) -> dict[str, str] | None:
    """The FAB Flower's engine runs (its id, version and SHA-256 hash), where the engine has one:
    under plain ``flwr run`` the app has no ``.git``, and this is what names its code. None
    in-process (``testing.inprocess_grid`` runs the checkout)."""
    try:
        run = grid.run
    except NotImplementedError:
        return None
    if not getattr(run, "fab_hash", ""):
        return None
    return {"fab_id": run.fab_id, "fab_version": run.fab_version, "fab_hash": run.fab_hash}


def code_of(config: dict[str, Any]) -> str:
    """What names the code of a run from its config.json: its commit, else its FAB's hash (its
    first 12 hex digits, with the app's id and version), else "unknown"."""
    if config.get("git_commit"):
        return str(config["git_commit"])
    app = config.get("flower_app")
    if isinstance(app, dict) and app.get("fab_hash"):
        return f"FAB {str(app['fab_hash'])[:12]} ({app.get('fab_id')} {app.get('fab_version')})"
    return "unknown"


def run_config_record(
    settings: RunSettings,
    num_nodes: int,
    global_function: dict[str, Any],
    sites: dict[str, Any] | None = None,
    run_id: int | None = None,
    app: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The contents of config.json (``sites``: with sites' own data, the agreed schema, the
    partitions that took part and every node left out with the reason; ``run_id``: Flower's,
    by which ``server_app.run_status`` finds the folder of a run; ``app``: the FAB the engine
    runs, ``flower_app``)."""
    return {
        "flower_run_id": None if run_id is None else str(run_id),
        "run_config": dict(sorted(settings.raw.items())),
        "global_function": global_function,
        "num_nodes": num_nodes,
        **({"sites": sites} if sites is not None else {}),
        "versions": {
            "flwr": _version("flwr"),
            "torch": _version("torch"),
            "project": _version("flower-beyond-averaging"),
        },
        "git_commit": settings.git_commit or _git_commit(),
        "flower_app": app,
    }
