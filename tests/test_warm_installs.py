"""The warm SuperExec installs a FAB once per machine (``deploy.warm_superexec``), and two
children installing the same FAB at once wait for one another instead of racing in Flower's
own install (which returns as soon as the folder exists, half copied)."""

from __future__ import annotations

import hashlib
import importlib
import threading
import time

from flwr.cli import install

from deploy import warm_superexec

run_clientapp, run_serverapp = map(importlib.import_module, warm_superexec.RUNTIMES)


def test_concurrent_installs_of_one_fab_run_flowers_install_once(tmp_path, monkeypatch):
    calls = []

    def slow_install(fab_file, install_dir=None, skip_prompt=False):
        digest = hashlib.sha256(fab_file).hexdigest()
        folder = install_dir / "apps" / f"publisher.app.1.0.0.{digest[:8]}"
        calls.append(folder)
        folder.mkdir(parents=True, exist_ok=True)
        time.sleep(0.3)  # copying the files: another child must not take the folder meanwhile
        (folder / "copied").write_text("all")
        return folder

    monkeypatch.setattr(install, "install_from_fab", slow_install)
    for runtime in (run_clientapp, run_serverapp):  # put back after the test
        monkeypatch.setattr(runtime, "install_from_fab", runtime.install_from_fab)
    warm_superexec.install_fabs_once()

    found = []

    def child(runtime):
        found.append(runtime.install_from_fab(b"the FAB", tmp_path, True))

    children = [threading.Thread(target=child, args=(r,)) for r in (run_clientapp, run_serverapp)]
    for thread in children:
        thread.start()
    for thread in children:
        thread.join(10)
    assert len(calls) == 1
    assert len(found) == 2 and all((folder / "copied").is_file() for folder in found)
    assert run_clientapp.install_from_fab(b"the FAB", tmp_path, True) == found[0]  # once more
    assert len(calls) == 1
    assert run_clientapp.install_from_fab(b"another FAB", tmp_path, True) != found[0]
    assert len(calls) == 2
