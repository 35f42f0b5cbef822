"""The warm SuperExec installs a FAB once per machine (``deploy.warm_superexec``), and two
children installing the same FAB at once wait for one another instead of racing in Flower's
own install (which returns as soon as the folder exists, half copied)."""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

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


def _installed_fab(home, fab: bytes, code: str) -> str:
    """An installed FAB under ``home`` holding the package ``warmfab`` with ``code`` in its
    ``app`` module; returns the FAB's SHA-256."""
    digest = hashlib.sha256(fab).hexdigest()
    folder = home / "apps" / f"publisher.app.1.0.0.{digest[:8]}"
    (folder / "warmfab").mkdir(parents=True)
    (folder / "warmfab" / "__init__.py").write_text("")
    (folder / "warmfab" / "app.py").write_text(code)
    (folder / warm_superexec.INSTALLED_MARK).write_text(digest)
    return digest


def test_the_parent_holds_one_fabs_app_and_forgets_it_for_another(tmp_path, monkeypatch):
    """A child of a task finds its FAB's app imported (Flower's load_app then imports nothing);
    a task of another FAB, of a FAB not installed yet or of an unknown FAB finds none of it."""
    import sys

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    first = _installed_fab(tmp_path, b"first", "VERSION = 1\n")
    second = _installed_fab(tmp_path, b"second", "VERSION = 2\n")
    warm = warm_superexec.WarmApp(["warmfab.app"])
    try:
        warm.ready_for(first)
        assert sys.modules["warmfab.app"].VERSION == 1 and warm.fab_hash == first
        warm.ready_for(first)  # kept, not imported again
        assert sys.modules["warmfab.app"].VERSION == 1
        warm.ready_for(second)
        assert sys.modules["warmfab.app"].VERSION == 2
        for unknown in (hashlib.sha256(b"not installed").hexdigest(), None):
            warm.ready_for(unknown)
            assert "warmfab.app" not in sys.modules and "warmfab" not in sys.modules
            assert not any("publisher.app" in entry for entry in sys.path)
    finally:
        warm.forget()


def test_an_app_that_fails_to_import_is_left_to_the_child(tmp_path, monkeypatch):
    import sys

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    broken = _installed_fab(tmp_path, b"broken", "raise RuntimeError('the app is broken')\n")
    warm = warm_superexec.WarmApp(["warmfab.app"])
    warm.ready_for(broken)
    assert warm.fab_hash is None and "warmfab" not in sys.modules
    assert not any("publisher.app" in entry for entry in sys.path)


def test_the_parent_imports_what_torch_would_import_in_every_child() -> None:
    """torch imports these at first use (an optimiser's first step: torch._dynamo, 0.6 s); a
    warm parent imports them once, so no forked ClientApp pays for them (a fresh interpreter:
    this process has most of them imported already)."""
    script = (
        "import sys; from deploy import warm_superexec as w; w.preload([]); "
        "print(all(m in sys.modules for m in w.TORCH_LAZY))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "True"
    assert "torch._dynamo" in warm_superexec.TORCH_LAZY


def _clientapp_spec(task_id: int) -> SimpleNamespace:
    """What the executor reads of Flower's ``ExecutionSpec`` for a ClientApp task (its task
    type is a ``StrEnum``, equal to its console script's name)."""
    return SimpleNamespace(
        task_type=warm_superexec.CLIENTAPP,
        runtime_api_address="127.0.0.1:1",
        token="token",
        insecure=True,
        root_certificates_path=None,
        runtime_dependency_install=False,
        parent_pid=None,
        fab_hash=None,
        task_id=task_id,
    )


def _events_of_two_clientapps(
    tmp_path, monkeypatch, context_wait: float, after_reply: bool
) -> list[str]:
    """The events of two ClientApp children the executor forks, the second once the first
    began to push its reply (``after_reply``) or at once: each works 0.1 s, pushes its reply
    (Flower's ``push_message``, here a no-op) and then takes 0.3 s to push the Context."""
    tmp_path.mkdir()
    events = tmp_path / "events"

    def event(text: str) -> None:
        with open(events, "a") as out:
            out.write(f"{text}\n")

    def clientapp():
        event("start")
        time.sleep(0.1)
        run_clientapp.push_message(None, None, None)
        time.sleep(0.3)
        event("end")

    monkeypatch.setattr(run_clientapp, "push_message", lambda *args: None)
    monkeypatch.setitem(warm_superexec.ENTRY_POINTS, warm_superexec.CLIENTAPP, clientapp)
    executor = warm_superexec.ForkExecutor(context_wait=context_wait)
    executor.launch(_clientapp_spec(1))
    deadline = time.monotonic() + 10
    while after_reply and not executor.finishing() and time.monotonic() < deadline:
        time.sleep(0.005)
    executor.launch(_clientapp_spec(2))
    while executor.children and time.monotonic() < deadline:
        executor.reconcile()
        time.sleep(0.01)
    assert not executor.children and not executor.finishing()
    return events.read_text().split()


def test_a_clientapp_after_a_reply_starts_once_that_one_pushed_the_context(tmp_path, monkeypatch):
    """Flower's ClientApp pushes the node's Context after its reply, as it exits: a ClientApp
    launched after that reply (the server's next message) starts only once the one before
    has exited, so it never pulls the Context from before the reply (the race that dropped
    fedxgb-hist's iterations); one still working is not waited for; after ``context_wait``
    the next starts anyway."""
    waits = _events_of_two_clientapps(tmp_path / "a", monkeypatch, 10.0, after_reply=True)
    assert waits == ["start", "end", "start", "end"]
    working = _events_of_two_clientapps(tmp_path / "b", monkeypatch, 10.0, after_reply=False)
    assert working == ["start", "start", "end", "end"]
    bounded = _events_of_two_clientapps(tmp_path / "c", monkeypatch, 0.05, after_reply=True)
    assert bounded == ["start", "start", "end", "end"]


def test_flower_s_clientapp_pushes_its_reply_through_the_function_the_mark_wraps():
    """``_mark_finishing`` wraps ``push_message`` of Flower's ClientApp runtime: this fails the
    day Flower renames it or stops calling it before the Context's ``push_task_output``."""
    import inspect

    source = inspect.getsource(run_clientapp.run_clientapp)
    assert "push_message(client, reply_message, context)" in source
    assert source.index("push_message(") > source.index("def on_exit")
    assert "push_task_output(" in source
