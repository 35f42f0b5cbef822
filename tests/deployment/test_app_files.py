"""deploy.app_files: the copy ``make run``, ``deploy.local`` and the tests submit builds the
checkout's FAB, and its command replaces its folder and refuses the checkout itself."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_files

from deploy import app_files

# flwr 1.41 builds a FAB with a pathspec pattern class that pathspec deprecates
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")


def fab_digest(files: dict) -> str:
    return hashlib.sha256(build_fab_from_files(files)[0]).hexdigest()


def test_a_copy_builds_the_checkout_s_fab(tmp_path):
    copy = app_files.app_copy(tmp_path / "app")
    # the checkout's files as flwr run collects them, but for .venv and .git, left out here
    # only to keep the test fast: the FAB leaves them out too (the whole checkout's FAB,
    # build_fab_from_disk, had the copy's sha256, 2026-11-28)
    ignored = app_files.app_copy_ignored()
    checkout = {}
    for folder, subfolders, names in os.walk(app_files.PROJECT):
        subfolders[:] = [d for d in subfolders if d not in (".git", ".venv")]
        for name in names:
            path = Path(folder) / name
            if not path.is_symlink():
                checkout[path.relative_to(app_files.PROJECT).as_posix()] = path
    copied = {p.relative_to(copy).as_posix(): p for p in copy.rglob("*") if p.is_file()}
    assert ".venv" in ignored and "pyproject.toml" in copied
    assert not any(name.startswith((".git/", ".venv/")) for name in copied)
    assert fab_digest(copied) == fab_digest(checkout)


def test_the_command_replaces_its_folder_and_refuses_the_checkout(tmp_path, capsys):
    destination = tmp_path / "build" / "app"
    destination.mkdir(parents=True)
    (destination / "stale.py").write_text("x = 1\n")
    assert app_files.main([str(destination)]) == 0
    assert not (destination / "stale.py").exists()
    assert (destination / "pyproject.toml").read_text() == (
        app_files.PROJECT / "pyproject.toml"
    ).read_text()
    assert app_files.main([str(app_files.PROJECT)]) == 2
    assert "the checkout itself" in capsys.readouterr().err
    assert (app_files.PROJECT / "pyproject.toml").is_file()
    assert app_files.main([]) == 2
