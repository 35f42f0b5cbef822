"""A SuperExec that forks each ServerApp / ClientApp process from a warm parent.

Flower's SuperExec (``flower-superexec``, which ``flower-superlink`` and ``flower-supernode``
start themselves in their default ``--isolation subprocess`` mode) starts a fresh interpreter,
``flwr-serverapp`` per run or ``flwr-clientapp`` per message, and each spends seconds of CPU
importing flwr, torch, scikit-learn and the app before it does anything (most of a deployment
round on 2 cores: benchmarks.latency measures both). This SuperExec, for ``--isolation process``,
imports those libraries once and then runs Flower's own loop (``run_superexec``: ask the Runtime
API for a task token, launch it) with an executor that forks instead. The child runs the console
script's own entry point (``flwr-clientapp``, ``flwr-serverapp``) with the arguments Flower's
subprocess executor would pass, so it pulls its task, installs the FAB, loads the app *from the
FAB* and pushes its result exactly as a fresh process does; only the interpreter start-up and the
third-party imports are shared. The project's own modules are dropped from ``sys.modules`` after
the warm-up, so a child imports the app from the run's FAB (as Flower does), never from this
checkout; once a child has installed a FAB, the parent imports the app from that FAB's folder
itself (``WarmApp``), so the children of later tasks of the same FAB find it imported, and
forgets it before a task of another FAB.

    flower-supernode ... --isolation process --port P
    python -m deploy.warm_superexec --runtime-api-address 127.0.0.1:P --insecure \\
        --parent-pid <SuperNode pid> --preload client_app.app

Children retry an object of their task that the SuperNode does not hold yet after
``--pull-backoff`` seconds (default 0.02, doubling up to Flower's cap of 10 s) instead of
Flower's 1 s (``PULL_INITIAL_BACKOFF``, flwr/supercore/constant.py line 48): a flwr 1.41
SuperNode creates a ClientApp's task before it has pulled the message's objects from the
SuperLink (flwr/supernode/start_client_internal.py lines 386-416), so a ClientApp that starts
at once finds them missing, and Flower's backoff then costs it 1 s, often 1 + 2 s (most of a
ClientApp's time in benchmarks.latency's measurement).

A supported alternative to Flower's SuperExec wherever one runs with ``--isolation process``:
``deploy.local --warm``, the separate-machines runbook (docs/deployment.md), and the docker
compose overlay ``docker/compose.warm.yml`` (this file and the app's packages mounted read-only
into Flower's SuperExec image, which has the libraries: it needs nothing but flwr and the
standard library itself). It takes the arguments of ``flower-superexec`` that those use.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
CLIENTAPP = "flwr-clientapp"  # the console script of a ClientApp task
ENTRY_POINTS: dict = {}  # console script -> its function, loaded before forking
# what torch imports lazily, at first use, and each forked child would import again: at a
# model's first ``to_empty`` (about 1 s) and at an optimiser's first ``step`` (torch._dynamo,
# 315 modules, 0.6 s: most of a deployed FedAvg round on 2 cores). Imported before forking
# whenever torch is installed.
TORCH_LAZY = ("torch.fx.experimental.symbolic_shapes", "torch._dynamo")


def preload(modules: list[str]) -> None:
    """Import ``modules`` (and so their libraries) and torch's lazy imports (``TORCH_LAZY``,
    when torch is installed), then forget the project's own modules."""
    lazy = TORCH_LAZY if importlib.util.find_spec("torch") is not None else ()
    for name in (*modules, *lazy):
        importlib.import_module(name)
    prefix = Path(sys.prefix).resolve()
    own = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)  # some are relative (torch.ops: "_ops.py")
        if "." in name or file is None or not os.path.isabs(file):
            continue
        path = Path(file).resolve()
        if path.is_relative_to(PROJECT) and not path.is_relative_to(prefix):
            own.add(name)
    for name in list(sys.modules):
        if name.partition(".")[0] in own:
            del sys.modules[name]


def prompt_object_pulls(backoff: float) -> None:
    """Flower's object pulls (a task's message and FAB in a ClientApp, replies in a ServerApp)
    retry a missing object after ``backoff`` seconds, then doubling, instead of 1 s."""
    from flwr.supercore.inflatable import inflatable_utils

    for pull in (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree):
        pull.__kwdefaults__["initial_backoff"] = backoff


INSTALLED_MARK = ".fl-installed"  # in a FAB's install folder: the SHA-256 of the FAB's bytes
# where Flower's ClientApp and ServerApp processes install the run's FAB (``install_from_fab``)
RUNTIMES = ("flwr.supernode.runtime.run_clientapp", "flwr.superlink.runtime.run_serverapp")


def install_fabs_once() -> None:
    """A child skips the install of FAB bytes this machine has installed before.

    Flower installs the run's FAB for every message: it extracts the archive to a temporary
    folder and checks every file's hash (0.07 s alone, 0.25 s beside a training node on 2
    cores) and then keeps the folder it installed the first time (``validate_and_install``
    returns when the install folder exists). Here the first install, Flower's own, leaves the
    SHA-256 of the FAB's bytes in its folder; a later child whose FAB has the same SHA-256
    (the same bytes) takes that folder without extracting again. Installs take a lock file
    beside the folders: two children of concurrent runs installing the same FAB would otherwise
    race in Flower's own code, the second loading the app from a folder the first is still
    copying (``ModuleNotFoundError``, seen in tests/deployment/test_deployment_sites.py)."""
    import fcntl
    import hashlib

    from flwr.cli import install
    from flwr.common.config import get_flwr_home
    from flwr.common.constant import APP_DIR

    flowers_install = install.install_from_fab

    def install_once(fab_file, install_dir=None, skip_prompt=False):  # Flower's signature
        if not isinstance(fab_file, bytes):
            return flowers_install(fab_file, install_dir, skip_prompt)
        digest = hashlib.sha256(fab_file).hexdigest()
        apps = (install_dir or get_flwr_home()) / APP_DIR
        apps.mkdir(parents=True, exist_ok=True)
        with open(apps / ".fl-install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            folder = installed_folder(digest, install_dir)
            if folder is not None:
                return folder
            folder = flowers_install(fab_file, install_dir, skip_prompt)
            (folder / INSTALLED_MARK).write_text(digest)
            return folder

    for runtime in RUNTIMES:  # the modules (their packages export functions of the same name)
        importlib.import_module(runtime).install_from_fab = install_once


def _entry_point(command: str):
    """The function behind one of flwr's console scripts (``flwr-clientapp``, ...)."""
    if command not in ENTRY_POINTS:
        (script,) = entry_points(group="console_scripts", name=command)
        ENTRY_POINTS[command] = script.load()
    return ENTRY_POINTS[command]


def _run_child(command: str, argv: list[str]) -> None:
    """In the forked child: run the console script ``command`` with ``argv``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        sys.argv = [command, *argv]
        _entry_point(command)()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # report whatever it was, then exit
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _mark_finishing(pipe: int) -> None:
    """In a ClientApp child: write its pid into ``pipe`` just before Flower's ``flwr-clientapp``
    pushes its reply (its module's ``push_message``), so the parent knows it is finishing."""
    runtime = importlib.import_module(RUNTIMES[0])
    push_message = runtime.push_message

    def marked_push(*args, **kwargs):
        os.write(pipe, os.getpid().to_bytes(8, "little"))
        return push_message(*args, **kwargs)

    runtime.push_message = marked_push


def installed_folder(fab_hash: str, install_dir: Path | None = None) -> Path | None:
    """The folder this machine installed the FAB of SHA-256 ``fab_hash`` in (``install_once``'s
    mark says so) under ``install_dir`` (default: Flower's home), or None."""
    from flwr.common.config import get_flwr_home
    from flwr.common.constant import APP_DIR, FAB_HASH_TRUNCATION

    apps = (install_dir or get_flwr_home()) / APP_DIR
    for folder in apps.glob(f"*.{fab_hash[:FAB_HASH_TRUNCATION]}"):
        mark = folder / INSTALLED_MARK
        if mark.is_file() and mark.read_text() == fab_hash:
            return folder
    return None


class WarmApp:
    """The app's own modules, imported in the parent from one installed FAB, so that a child
    running a task of that FAB finds them in ``sys.modules``: Flower's ``load_app`` imports a
    module only when it is not there (flwr/supercore/object_ref.py, ``load_app``), and each
    child would otherwise import the app again (0.1 s a message, benchmarks/README.md, case
    `latency`). Keyed by the task's FAB hash (``ExecutionSpec.fab_hash``): a task of another
    FAB makes the parent forget these modules first, so a child never runs another FAB's code;
    until a child has installed a FAB, its children import it themselves, as before."""

    def __init__(self, modules: list[str]) -> None:
        self.modules = modules  # the --preload list: the app's entry modules
        self.fab_hash: str | None = None
        self.folder: Path | None = None

    def ready_for(self, fab_hash: str | None) -> None:
        """Hold the modules of FAB ``fab_hash`` (installed by an earlier child), or none."""
        if fab_hash is not None and fab_hash == self.fab_hash:
            return
        self.forget()
        folder = installed_folder(fab_hash) if fab_hash and self.modules else None
        if folder is None:
            return
        sys.path.insert(0, str(folder))
        self.folder = folder
        try:
            for name in self.modules:  # libraries in the list are imported already
                module = importlib.import_module(name)
                top = name.partition(".")[0]
                ours = (folder / top).is_dir() or (folder / f"{top}.py").is_file()
                if ours and not Path(module.__file__).resolve().is_relative_to(folder.resolve()):
                    raise ImportError(f"{name} came from {module.__file__}, not the FAB")
        except Exception:  # the children import it themselves, and say what is wrong
            self.forget()
            return
        self.fab_hash = fab_hash

    def forget(self) -> None:
        """Drop the modules imported from the FAB's folder, and the folder from sys.path."""
        if self.folder is None:
            return
        root = self.folder.resolve()
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and os.path.isabs(file) and Path(file).resolve().is_relative_to(root):
                del sys.modules[name]
        while str(self.folder) in sys.path:
            sys.path.remove(str(self.folder))
        self.fab_hash = self.folder = None


class ForkExecutor:
    """Flower's executor protocol (``flwr.supercore.superexec.executor.types.Executor``): each
    launch is a fork running the task's console script with the subprocess executor's
    arguments, from a parent holding the task's app already imported when it can
    (``WarmApp``).

    A ClientApp child is forked only once the ClientApp children that have begun to push their
    reply have exited (up to ``context_wait`` seconds). Flower's ``flwr-clientapp`` pushes its
    reply first and the node's ``Context`` after it, as it exits
    (flwr/supernode/runtime/run_clientapp.py, ``push_message`` then ``push_task_output``); the
    SuperNode forwards the reply at once, so the server's next message to the node (the next
    tree level of fedxgb-hist, the next stage of a secure sum) can start a ClientApp that
    pulls the ``Context`` as it was before the last reply: seen as fedxgb-hist's dropped
    iterations at 1,000,000 rows, a node "holding no gradients" of the round it had just
    answered. A child writes its pid into the executor's pipe before it pushes its reply
    (``_mark_finishing``); one still working, or stuck before its reply, is not waited for."""

    def __init__(self, warm: WarmApp | None = None, context_wait: float = 10.0) -> None:
        self.children: set[int] = set()
        self.warm = warm
        self.context_wait = context_wait
        self.marked: set[int] = set()  # children that began to push their reply
        self._marks, self._mark = os.pipe()  # read end, write end (children write their pid)
        os.set_blocking(self._marks, False)

    def get_eligible_capacity(
        self, supported_task_types, *, insecure=False, root_certificates_path=None
    ):
        del insecure, root_certificates_path
        return supported_task_types, set()

    def wait_for_capacity(
        self, task_type=None, *, fab_hash=None, insecure=False, root_certificates_path=None
    ) -> None:
        del task_type, fab_hash, insecure, root_certificates_path

    def launch(self, spec):
        from flwr.supercore.constant import TASK_TYPE_TO_APPIO_API_ADDRESS_ARG, TASK_TYPE_TO_COMMAND
        from flwr.supercore.superexec.executor.types import LaunchResult

        argv = [
            TASK_TYPE_TO_APPIO_API_ADDRESS_ARG[spec.task_type],
            spec.runtime_api_address,
            "--token",
            spec.token,
        ]
        if spec.insecure:
            argv.append("--insecure")
        elif spec.root_certificates_path is not None:
            argv += ["--root-certificates", spec.root_certificates_path]
        if spec.parent_pid is not None:
            argv += ["--parent-pid", str(spec.parent_pid)]
        if spec.runtime_dependency_install:
            argv.append("--allow-runtime-dependency-installation")
        if self.warm is not None:
            self.warm.ready_for(getattr(spec, "fab_hash", None))
        command = TASK_TYPE_TO_COMMAND[spec.task_type]
        if command == CLIENTAPP:
            self.await_finishing()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            if command == CLIENTAPP:
                _mark_finishing(self._mark)
            _run_child(command, argv)
        self.marked.discard(pid)  # an exited child's, of the same pid
        self.children.add(pid)
        return LaunchResult.accepted()

    def await_finishing(self) -> None:
        """Wait until the ClientApp children that began to push their reply have exited, so
        each has pushed the node's ``Context`` (see the class docstring), for
        ``context_wait`` seconds at the most."""
        deadline = time.monotonic() + self.context_wait
        while (finishing := self.finishing()) and time.monotonic() < deadline:
            time.sleep(0.005)
        if finishing:
            print(
                f"warm_superexec: ClientApp(s) {sorted(finishing)} still pushing the node's "
                f"Context after {self.context_wait:g} s; the next starts beside them",
                file=sys.stderr,
            )

    def finishing(self) -> list[int]:
        """The children that began to push their reply and have not exited."""
        self.reconcile()
        try:
            while records := os.read(self._marks, 8 * 512):  # whole 8-byte pids: atomic writes
                self.marked.update(
                    int.from_bytes(records[i : i + 8], "little") for i in range(0, len(records), 8)
                )
        except BlockingIOError:  # none left to read
            pass
        self.marked &= self.children
        return sorted(self.marked)

    def reconcile(self) -> None:
        """Reap the children that have exited."""
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)

    def close(self) -> None:
        self.reconcile()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``flower-superexec``'s arguments, ``--pull-backoff`` and ``--preload``
    (separate from ``main`` so the compose files' commands can be checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime-api-address", required=True)
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--root-certificates", default=None)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--health-server-address", default=None)
    parser.add_argument(
        "--pull-backoff",
        type=float,
        default=0.02,
        help="seconds before a child retries an object not there yet, doubling (Flower's: 1)",
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        help="a module to import before forking (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Warm up, then run Flower's SuperExec loop with the forking executor."""
    args = parse_args(argv)
    preload(args.preload)
    prompt_object_pulls(args.pull_backoff)
    install_fabs_once()
    for command in (CLIENTAPP, "flwr-serverapp"):
        _entry_point(command)
    loop = importlib.import_module("flwr.supercore.superexec.run_superexec")
    executor = ForkExecutor(WarmApp(args.preload))
    loop.get_executor = lambda *_, **__: executor  # Flower's loop, our executor
    loop.run_superexec(
        runtime_api_address=args.runtime_api_address,
        insecure=args.insecure,
        root_certificates_path=args.root_certificates,
        parent_pid=args.parent_pid,
        health_server_address=args.health_server_address,
        runtime_dependency_install=False,
    )


if __name__ == "__main__":
    main()
