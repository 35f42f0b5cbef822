"""A deployment of Flower's engine on one host, driven from Python: a SuperLink and SuperNodes as
processes, each stopped by PID, jobs submitted through ``flwr run``.

Each process gets its own loopback ports (``deploy.ports``); certificates (a CA and a server
certificate whose SANs are 127.0.0.1, localhost and any ``--host``) and SuperNode keys are made
by ``deploy.certificates``, and each key is registered with ``flwr supernode register`` before
its SuperNode starts. ``Deployment`` is what ``python -m deploy.local`` and the deployment tests
drive: they add an unregistered SuperNode, kill nodes mid-run, give a node extra
``--node-config`` (a hostile peer) and submit jobs from another app directory (``app_copy``: a
FAB whose ClientApp may be a test wrapper). Jobs are submitted from a copy of the project's app
files in the work directory (``app_files``, removed by ``stop``): ``flwr run .`` would walk every
file of the checkout's .venv first. ``warm=True`` (the default; ``--cold`` for Flower's own
SuperExec) runs the SuperLink and each SuperNode, in its own network namespace with ``star``,
with ``--isolation process`` and ``deploy.warm_superexec``, which forks every ServerApp and
ClientApp process from a parent that has imported torch and the app's libraries once, instead of
starting a fresh interpreter per run and per message (seconds of CPU each: benchmarks.latency).
``perimeter=True`` (``--perimeter``, needs TLS) keeps the SuperLink on its loopback port and puts
nginx (``deploy.perimeter``) on another port in front of it for the SuperNodes: only their Fleet
API calls pass, the Control API (the ``flwr`` CLI) stays on the SuperLink's own port.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploy.app_files import app_copy
from deploy.certificates import make_certificates, make_node_key
from deploy.netns import Star
from deploy.perimeter import MAX_OBJECT_BYTES, Perimeter
from deploy.processes import (
    ANSI,
    LEVEL,
    ProcessExited,
    log_tail,
    next_line,
    pipe_lines,
    run_checked,
)

BIN = Path(sys.executable).parent  # flower-superlink, flower-supernode and flwr of this venv

PROJECT = Path(__file__).resolve().parents[1]

CONNECTION = "deploy"


@dataclass
class Deployment:
    """One SuperLink and its SuperNodes on loopback, all started and stopped by this object."""

    workdir: Path
    tls: bool = False
    auth: bool = False
    base_port: int = 39400
    hosts: list[str] = field(default_factory=list)
    star: Star | None = None  # separate hosts: each process in its own network namespace
    # ServerApp and ClientApp processes forked from a warm parent (deploy.warm_superexec)
    warm: bool = True
    # seconds between a SuperExec's asks for a task (FLWR_SUPEREXEC_TASK_POLL_INTERVAL; Flower's
    # default is 1 s); None: Flower's default
    task_poll_interval: float | None = 0.1
    # the SuperNode's command: Flower's own SuperNode with prompt waits (deploy.supernode), or
    # ``(BIN / "flower-supernode",)`` for Flower's fixed ones
    supernode_command: tuple[str, ...] = (sys.executable, "-m", "deploy.supernode")
    # the SuperLink's state (runs, nodes, registered keys, messages' objects): Flower's in-memory
    # one, or a SQLite file that outlives the SuperLink (each object then costs a write: the
    # default job's round took 2.85 s against 2.05 s in memory, benchmarks/README.md)
    database: Path | None = None
    # SuperNodes dial an nginx perimeter (deploy.perimeter) that forwards only the Fleet API;
    # the SuperLink listens on loopback, where the flwr CLI (Control API) reaches it
    perimeter: bool = False
    max_object_bytes: int = MAX_OBJECT_BYTES  # the largest push-object body the perimeter forwards
    # a SuperNode's reconnection attempts and seconds before it gives up on an unreachable
    # SuperLink (``--max-retries``, ``--max-wait-time``); None: Flower's default, no limit (a
    # SuperNode that rides out a restart of the SuperLink)
    max_retries: int | None = 3
    max_wait_time: float | None = 20.0
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)  # processes stopped on purpose (``kill``)
    may_exit: set[str] = field(default_factory=set)  # processes meant to exit (refused nodes)
    node_ids: dict[str, int] = field(default_factory=dict)  # registered key name -> node id

    def __post_init__(self) -> None:
        if self.auth and not self.tls:
            raise ValueError("SuperNode authentication needs TLS (flwr 1.41)")
        if self.perimeter and not self.tls:
            raise ValueError("the perimeter terminates TLS: it needs tls=True")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "flwr-home"
        self.certs = self.workdir / "certs"
        self.keys = self.workdir / "keys"
        self.address = f"127.0.0.1:{self.base_port}"
        self.proxy_port = self.base_port + 5  # the perimeter's, when there is one
        self.proxy: Perimeter | None = None
        self._app: Path | None = None
        if self.star is not None:
            self.hosts = [*self.hosts, *self.star.link_addresses()]

    # -- environment ----------------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            # no calls out of a loopback deployment (Flower's usage telemetry, its update
            # check), and none waited for when a process exits
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            **(
                {}
                if self.task_poll_interval is None
                else {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(self.task_poll_interval)}
            ),
        }

    def _tls_flags(self, server: bool) -> list[str]:
        if not self.tls:
            return ["--insecure"]
        if server:
            return [
                "--ssl-ca-certfile",
                str(self.certs / "ca.crt"),
                "--ssl-certfile",
                str(self.certs / "server.pem"),
                "--ssl-keyfile",
                str(self.certs / "server.key"),
            ]
        return ["--root-certificates", str(self.certs / "ca.crt")]

    def _write_connection(self) -> None:
        """The ``flwr`` CLI's connection to this SuperLink's Control API."""
        self.home.mkdir(parents=True, exist_ok=True)
        security = (
            f'root-certificates = "{self.certs / "ca.crt"}"' if self.tls else "insecure = true"
        )
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.address}"\n{security}\n'
        )

    def _in_link(self, args: list[str]) -> list[str]:
        """``args`` run where the SuperLink runs (its namespace, if any)."""
        return self._in(None if self.star is None else self.star.link, args)

    def _in(self, namespace: str | None, args: list[str]) -> list[str]:
        """``args`` run in network ``namespace`` (None: this one)."""
        return args if namespace is None else [*self.star.exec_prefix(namespace), *args]

    def _flwr(self, *args: str) -> subprocess.CompletedProcess:
        """A ``flwr`` CLI command against this SuperLink."""
        return run_checked(self._in_link([str(BIN / "flwr"), *args]), env=self.env, cwd=PROJECT)

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        self.killed.discard(name)  # a node started again under its name is watched again
        # closed with the process; appended to, so a restart under the same name keeps the log
        log = open(self.workdir / f"{name}.log", "a")
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.workdir,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    # -- processes ------------------------------------------------------------------------------
    def _with_warm_superexec(
        self, args: list[str], runtime_port: int, preload: str, tls: bool, namespace: str | None
    ) -> list[str]:
        """``args`` with ``--isolation process``, run by a shell that first starts
        ``deploy.warm_superexec`` for its Runtime API in the background: the two share the
        process group (stopping or killing one stops both) and the SuperExec exits with it. In
        network ``namespace`` the shell runs there, so both share its loopback."""
        superexec = [
            sys.executable,
            "-m",
            "deploy.warm_superexec",
            "--runtime-api-address",
            f"127.0.0.1:{runtime_port}",
            "--preload",
            preload,
            *(["--root-certificates", str(self.certs / "ca.crt")] if tls else ["--insecure"]),
        ]
        script = (
            f"cd {shlex.quote(str(PROJECT))} && {shlex.join(superexec)} --parent-pid $$ "
            f"& exec {shlex.join([*args, '--isolation', 'process'])}"
        )
        return self._in(namespace, ["sh", "-c", script])

    def start_superlink(self) -> None:
        """Fleet, Runtime and Control APIs all on base_port (flwr 1.41 serves them over one
        HTTP port), the health server on +1. With ``warm``, its ServerApps are forked by
        ``deploy.warm_superexec``."""
        if self.tls:
            make_certificates(self.certs, self.hosts)
        self._write_connection()
        self._launch_superlink()
        if self.perimeter:
            self.start_perimeter()

    def restart_superlink(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Stop the SuperLink's process group with ``how`` (its SuperExec and the ServerApps
        forked from it go with it, as on a restarted host) and start it again on the same port
        and certificates: what an operator's restart does. With ``database`` it reopens the same
        SQLite file; without, it starts empty. The perimeter, a separate service, stays up."""
        self.kill("superlink", how)
        self._launch_superlink()

    def _launch_superlink(self) -> None:
        p = self.base_port
        # in its own namespace the SuperLink listens on its links too, unless behind a perimeter
        host = "127.0.0.1" if self.star is None or self.perimeter else "0.0.0.0"
        args = [
            str(BIN / "flower-superlink"),
            *self._tls_flags(server=True),
            "--disable-runtime-dependency-installation",
            "--host",
            host,
            "--port",
            str(p),
            "--health-server-address",
            f"127.0.0.1:{p + 1}",
            *([] if self.database is None else ["--database", str(self.database)]),
            *(["--enable-supernode-auth"] if self.auth else []),
        ]
        link = None if self.star is None else self.star.link
        if self.warm:
            args = self._with_warm_superexec(args, p, "server_app.app", self.tls, link)
        else:
            args = self._in(link, args)
        self._start("superlink", args)
        self.wait_for_port(p)

    def start_perimeter(self) -> None:
        """nginx on the SuperNodes' side (``proxy_port``; on every address of the SuperLink's
        namespace with ``star``), TLS with the SuperLink's certificate, only the Fleet API
        forwarded to the SuperLink's loopback listener (re-encrypted, verified with ca.crt)."""
        listen = (
            f"127.0.0.1:{self.proxy_port}" if self.star is None else f"0.0.0.0:{self.proxy_port}"
        )
        self.proxy = Perimeter(
            listen=listen,
            upstream=self.address,
            cert=self.certs / "server.pem",
            key=self.certs / "server.key",
            ca=self.certs / "ca.crt",
            auth=self.auth,
            workdir=self.workdir / "perimeter",
            exec_prefix=[] if self.star is None else self.star.exec_prefix(self.star.link),
            max_object_bytes=self.max_object_bytes,
        )
        self.proxy.start()

    @property
    def fleet_port(self) -> int:
        """The port SuperNodes dial: the perimeter's, else the SuperLink's."""
        return self.proxy_port if self.perimeter else self.base_port

    def register(self, name: str) -> Path:
        """Make ``name``'s key pair and register its public key with the SuperLink (the node id
        the SuperLink gave it goes to ``node_ids``)."""
        key = make_node_key(self.keys, name)
        done = self._flwr("supernode", "register", f"{key}.pub", CONNECTION, "--format", "json")
        self.node_ids[name] = int(json.loads(done.stdout)["node-id"])
        return key

    def start_supernode(
        self,
        index: int,
        num_partitions: int,
        registered: bool = True,
        name: str | None = None,
        slot: int | None = None,
        node_config: str = "",
        warm: bool | None = None,
    ) -> subprocess.Popen:
        """SuperNode ``index`` (partition ``index``) with the ports of ``slot`` (default: the
        index); with auth, its key (registered first unless ``registered`` is false: the
        SuperLink must refuse it); ``node_config``: more
        ``--node-config`` pairs. When ``warm`` (default: the deployment's), its ClientApps are
        forked by ``deploy.warm_superexec``, started beside it in its process group (killing the
        node kills them too)."""
        warm = self.warm if warm is None else warm
        name = name or f"supernode-{index}"
        port = self.base_port + 10 + 2 * (index if slot is None else slot)
        superlink = (
            f"127.0.0.1:{self.fleet_port}"
            if self.star is None
            else f"{self.star.link_address(index)}:{self.fleet_port}"
        )
        args = [
            *self.supernode_command,
            *self._tls_flags(server=False),
            "--superlink",
            superlink,
            "--port",
            str(port),
            "--health-server-address",
            f"127.0.0.1:{port + 1}",
            "--node-config",
            f"partition-id={index} num-partitions={num_partitions} {node_config}".strip(),
            *([] if self.max_retries is None else ["--max-retries", str(self.max_retries)]),
            *([] if self.max_wait_time is None else ["--max-wait-time", str(self.max_wait_time)]),
        ]
        if self.auth:
            key = self.register(name) if registered else make_node_key(self.keys, name)
            args += ["--auth-supernode-private-key", str(key)]
        if not registered:  # the SuperLink refuses it: its exit is what the caller expects
            self.may_exit.add(name)
        namespace = None if self.star is None else self.star.node(index)
        if warm:  # its Runtime API is plain HTTP on loopback, as in subprocess isolation
            args = self._with_warm_superexec(args, port, "client_app.app", False, namespace)
        else:
            args = self._in(namespace, args)
        return self._start(name, args)

    def wait_for_port(self, port: int, timeout: float = 60.0) -> None:
        """Until something listens on ``port`` of the SuperLink's loopback."""
        probe = self._in_link(
            [
                sys.executable,
                "-c",
                f"import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', {port})))",
            ]
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if subprocess.run(probe, capture_output=True).returncode == 0:
                return
            self.check_alive()
            time.sleep(0.3)
        raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")

    def exited(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def check_alive(self) -> None:
        """ProcessExited naming each process that exited unasked (not through ``kill``), with
        the last lines of its log."""
        dead = {
            n: code
            for n, code in self.exited().items()
            if n not in self.killed and n not in self.may_exit
        }
        if dead:
            raise ProcessExited(
                "; ".join(
                    f"{name} exited with code {code} (the end of {self.workdir / f'{name}.log'}: "
                    f"{' | '.join(log_tail(self.workdir / f'{name}.log'))})"
                    for name, code in dead.items()
                )
            )

    def app_files(self) -> Path:
        """This project's app files, copied once into the work directory (``app_copy``): what
        a job submits unless it names another app (``deploy.app_files``: the same FAB as the
        checkout's, without ``flwr run`` walking the checkout's .venv)."""
        if self._app is None:
            self._app = app_copy(self.workdir / "app")
        return self._app

    def flwr_run(
        self, run_config: str, timeout: float = 600.0, app: Path | None = None
    ) -> subprocess.CompletedProcess:
        """Submit a job with ``flwr run <app> deploy --stream`` and wait for it to end."""
        return subprocess.run(
            self._in_link(
                [
                    str(BIN / "flwr"),
                    "run",
                    str(app or self.app_files()),
                    CONNECTION,
                    "--stream",
                    "--run-config",
                    run_config,
                ]
            ),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=PROJECT,
            timeout=timeout,
        )

    def _run_args(self, run_config: str, app: Path | None) -> list[str]:
        return self._in_link(
            [
                str(BIN / "flwr"),
                "run",
                str(app or self.app_files()),
                CONNECTION,
                "--format",
                "json",
                "--run-config",
                run_config,
            ]
        )

    def submit(self, run_config: str, app: Path | None = None) -> str:
        """Start a job without waiting for it (``flwr run <app> ... --format json``); its run
        id. ``app``: the app directory whose FAB is built (default: this project's,
        ``app_files``)."""
        done = run_checked(self._run_args(run_config, app), env=self.env, cwd=PROJECT)
        return json.loads(done.stdout)["run-id"]

    def submit_all(self, run_configs: list[str], app: Path | None = None) -> list[str]:
        """``submit`` each job, the ``flwr run`` commands side by side; the run ids in order."""
        started = [
            subprocess.Popen(
                self._run_args(c, app),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=self.env,
                cwd=PROJECT,
            )
            for c in run_configs
        ]
        outputs = [(p, *p.communicate()) for p in started]
        for process, out, err in outputs:
            if process.returncode != 0:
                raise RuntimeError(f"flwr run failed ({process.returncode}):\n{out}{err}")
        return [json.loads(out)["run-id"] for _, out, _ in outputs]

    def stop_run(self, run_id: str) -> None:
        """``flwr stop``: Flower marks the run ``finished:stopped`` at once (an operator's first
        step when its ServerApp died; see docs/deployment.md)."""
        self._flwr("stop", str(run_id), CONNECTION, "--format", "json")

    def statuses(self) -> dict[str, str]:
        """Run id -> Flower's status text (e.g. ``finished:completed``)."""
        done = self._flwr("list", CONNECTION, "--format", "json")
        return {r["run-id"]: r["status"] for r in json.loads(done.stdout)["runs"]}

    def wait_for_runs(self, run_ids: list[str], timeout: float = 600.0) -> dict[str, str]:
        """Wait until every run in ``run_ids`` has finished; their final statuses.

        Each run's log is streamed (``flwr log <id> --stream``, which ends when the run does) into
        ``logs/<id>.log`` of the work directory, so no ``flwr`` command polls meanwhile (each
        starts an interpreter); then Flower's run list is polled until all are finished.
        ``ProcessExited`` as soon as a process of the deployment exits unasked (``check_alive``:
        a SuperNode that could not start would otherwise leave its runs waiting for it)."""
        deadline = time.monotonic() + timeout
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        streams = []
        for run_id in run_ids:
            with open(logs / f"{run_id}.log", "a") as out:
                streams.append(
                    subprocess.Popen(
                        self._in_link(
                            [str(BIN / "flwr"), "log", str(run_id), CONNECTION, "--stream"]
                        ),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=self.env,
                        cwd=PROJECT,
                    )
                )
        try:
            for stream in streams:
                while stream.poll() is None and time.monotonic() < deadline:
                    self.check_alive()
                    try:
                        stream.wait(min(2.0, max(0.1, deadline - time.monotonic())))
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            for stream in streams:
                if stream.poll() is None:
                    stream.kill()
                    stream.wait()
        while True:
            statuses = self.statuses()
            if all(statuses.get(r, "").startswith("finished") for r in run_ids):
                return {r: statuses[r] for r in run_ids}
            if time.monotonic() >= deadline:
                raise TimeoutError(f"runs still going after {timeout} s: {statuses}")
            self.check_alive()
            time.sleep(2)

    def runs(self) -> str:
        """Flower's run list (``flwr list``)."""
        return self._flwr("list", CONNECTION).stdout

    def follow(self, run_id: str, shown: re.Pattern[str], timeout: float = 3600.0) -> str:
        """Stream run ``run_id``'s log (``flwr log <id> --stream``, which ends when the run
        does) into ``logs/<id>.log`` of the work directory, printing the lines ``shown`` matches
        as they come (a line a round); then its final status."""
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        stream = subprocess.Popen(
            self._in_link([str(BIN / "flwr"), "log", str(run_id), CONNECTION, "--stream"]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=PROJECT,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=pipe_lines, args=(stream, lines), daemon=True).start()
        try:
            with open(logs / f"{run_id}.log", "a") as out:
                while (line := next_line(lines, self.check_alive)) is not None:
                    out.write(line)
                    if shown.search(line):
                        print(LEVEL.sub("", ANSI.sub("", line)).rstrip(), flush=True)
        finally:
            if stream.poll() is None:
                stream.kill()
            stream.wait()
        return self.wait_for_runs([run_id], timeout)[run_id]

    def kill(self, name: str, how: signal.Signals = signal.SIGKILL) -> None:
        """Signal one process and its group with ``how`` and wait for it: SIGKILL (the
        default) is a node that dies, SIGTERM one that is stopped (a SuperNode then tells the
        SuperLink it leaves); SIGKILL after 10 s if it has not exited."""
        self.killed.add(name)
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):  # its whole group has exited already
            os.killpg(process.pid, how)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        """SIGTERM then SIGKILL every process this object started (their process groups), and
        the perimeter's nginx; remove the app copy (``app_files``)."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self.proxy is not None:
            self.proxy.stop()
        if self._app is not None:
            shutil.rmtree(self._app, ignore_errors=True)
            self._app = None
