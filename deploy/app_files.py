"""A copy of this project's app files to submit with ``flwr run``: the same FAB as the
checkout's, without Flower walking the checkout's virtual environment.

``flwr run <dir>`` collects every file under ``<dir>`` (``flwr.cli.utils.collect_files``,
flwr 1.41) before it applies .gitignore: for this checkout, .venv's some 50,000 files, seconds
against a fraction of one for a copy and its FAB (``python -m benchmarks.fab_build``,
benchmarks/results/fab_build.md). ``make run``, ``deploy.local``, the tests and the benchmarks
submit a copy. Its own module so that ``make run`` makes the copy
without importing flwr, torch or the app.

    python -m deploy.app_files build/app     # replaces build/app
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def app_copy_ignored() -> tuple[str, ...]:
    """What an app copy leaves out: version control and the names the project's .gitignore
    lists (its virtual environment, caches, results, sites' files). Its FAB applies .gitignore
    again, so a pattern the copy keeps costs only the copying."""
    gitignore = PROJECT / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else []
    names = [line.strip().rstrip("/") for line in lines]
    return (".git", *(n for n in names if n and not n.startswith("#")))


def app_copy(destination: Path, clientapp: str | None = None) -> Path:
    """A copy of this project's app files at ``destination`` (which must not exist) to submit
    with ``flwr run``. ``clientapp``: another ``[tool.flwr.app.components] clientapp`` (e.g. a
    test wrapper of the real one)."""
    shutil.copytree(PROJECT, destination, ignore=shutil.ignore_patterns(*app_copy_ignored()))
    if clientapp is not None:
        pyproject = destination / "pyproject.toml"
        text, count = re.subn(
            r'^clientapp = ".*"$',
            f'clientapp = "{clientapp}"',
            pyproject.read_text(),
            flags=re.MULTILINE,
        )
        if count != 1:
            raise ValueError(f"{pyproject}: expected one clientapp component, found {count}")
        pyproject.write_text(text)
    return destination


def main(argv: list[str] | None = None) -> int:
    """Replace the folder named on the command line with a fresh app copy."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m deploy.app_files DESTINATION", file=sys.stderr)
        return 2
    destination = Path(args[0])
    if destination.resolve() == PROJECT:
        print("deploy.app_files: the destination is the checkout itself", file=sys.stderr)
        return 2
    shutil.rmtree(destination, ignore_errors=True)
    app_copy(destination)
    return 0


if __name__ == "__main__":
    sys.exit(main())
