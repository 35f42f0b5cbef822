"""Flower's deployment engine on one host, from the command line: a SuperLink and N SuperNodes as
processes (``deploy.deployment.Deployment``), optionally with TLS and SuperNode authentication,
and a job submitted through ``flwr run``.

    python -m deploy.local --nodes 3 --tls --auth \\
        "algorithm='fedfw' task='synthetic' num-server-rounds=3"

starts everything under a fresh work directory, runs the job (printing a line a round while it
runs), prints the run's status, its results folder (when the run wrote one) and its health
line, exits 0 only when the run completed, and stops every process it started by PID (also on
Ctrl-C or an error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from deploy.deployment import BIN, Deployment
from deploy.netns import Star
from deploy.processes import ProcessExited
from server_app.preflight import EXIT_INVALID, check
from server_app.run_status import COMPLETED, report
from tasks.errors import ConfigError

# the lines of a run's log ``main`` prints while it runs: a line a round, and what went wrong
# (its health line comes after, from its results folder)
PROGRESS = re.compile(r"\[results\]|Invalid run config|The run stops|is left out|is refused")


def new_workdir(path: Path | None) -> Path:
    """A private work folder (mode 0700): ``path`` if it is new or empty (an existing folder
    with files is refused, never emptied), else a new unique one (``tempfile.mkdtemp``)."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="flower-deploy-"))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise SystemExit(f"--workdir {path} is not empty: give a new or empty folder")
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: where the deployment lives and listens, how its processes run, and
    the job's run config."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _add_place_options(parser)
    _add_process_options(parser)
    parser.add_argument("run_config", help="the job's --run-config text")
    return parser.parse_args(argv)


def _add_place_options(parser: argparse.ArgumentParser) -> None:
    """The options of the deployment's size, security, work folder, ports and state."""
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument(
        "--auth", action="store_true", help="SuperNode authentication (needs --tls)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="a new or empty folder for certificates, keys, logs, state and "
        "results (default: a new one, tempfile.mkdtemp)",
    )
    parser.add_argument("--port", type=int, default=39400, help="first of the ports used")
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        help="another name or address for the SuperLink's certificate",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--database",
        type=Path,
        default=None,
        help="the SuperLink's state in this SQLite file, which outlives it (default: in memory; "
        "each message's objects then cost a write, about 0.8 s a round for the default job)",
    )


def _add_process_options(parser: argparse.ArgumentParser) -> None:
    """The options of how the processes run: SuperExecs, SuperNodes, network namespaces, the
    perimeter, and the sites' own files."""
    parser.add_argument(
        "--cold",
        action="store_true",
        help="Flower's own SuperExec: a fresh ServerApp or ClientApp process for each run or "
        "message (default: forked from a warm parent, deploy.warm_superexec, in each "
        "process's network namespace with --netns)",
    )
    parser.add_argument(
        "--flower-supernode",
        action="store_true",
        help="Flower's own flower-supernode with its fixed waits (3 s when no message, 0.5 s "
        "between checks for a reply); default: deploy.supernode, the same with prompt waits",
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="each process in its own network namespace, linked by veth pairs "
        "(separate hosts on one machine; needs root)",
    )
    parser.add_argument(
        "--perimeter",
        action="store_true",
        help="SuperNodes dial an nginx perimeter that forwards only the Fleet "
        "API; the SuperLink listens on loopback (needs --tls; "
        "deploy/perimeter.py)",
    )
    parser.add_argument(
        "--site-files",
        type=Path,
        default=None,
        help="a folder of per-site files <partition-id>.csv (python -m "
        "tasks.sites): SuperNode i gets node config dataset-path of its own "
        "file only (for task='site' runs)",
    )


def main(argv: list[str] | None = None) -> int:
    """Check the run config, start the deployment, run the job, report it and stop every
    process started here: the run's exit status (0: completed, 1: not, 2: an invalid config)."""
    args = parse_args(argv)
    try:  # in seconds, before any process starts: what the ServerApp would refuse
        print(check(args.run_config, args.nodes), flush=True)
    except ConfigError as err:
        print(f"Invalid run config: {err}", file=sys.stderr)
        return EXIT_INVALID
    args.workdir = new_workdir(args.workdir)
    star = Star(f"fl{os.getpid() % 10000}", args.nodes) if args.netns else None
    deployment = _new_deployment(args, star)
    started = time.monotonic()
    # a SIGTERM (``timeout``, a service manager) ends the run as Ctrl-C does: through ``finally``,
    # which stops every process started here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if star is not None:
            star.create()
        _start_processes(deployment, args)
        return _run_job(deployment, args, started)
    except ProcessExited as err:  # the SuperLink or a SuperNode died: no run can finish
        print(f"Run failed: {err}", file=sys.stderr)
        return 1
    finally:
        deployment.stop()
        if star is not None:
            star.delete()
        if not args.keep:
            shutil.rmtree(deployment.home, ignore_errors=True)


def _new_deployment(args: argparse.Namespace, star: Star | None) -> Deployment:
    """The deployment the command line asks for, in ``args.workdir`` (nothing started yet)."""
    return Deployment(
        args.workdir,
        tls=args.tls,
        auth=args.auth,
        base_port=args.port,
        hosts=args.host,
        star=star,
        warm=not args.cold,
        database=args.database,
        perimeter=args.perimeter,
        **(
            {"supernode_command": (str(BIN / "flower-supernode"),)} if args.flower_supernode else {}
        ),
    )


def _start_processes(deployment: Deployment, args: argparse.Namespace) -> None:
    """The SuperLink, then ``args.nodes`` SuperNodes, each given its own site file if any."""
    deployment.start_superlink()
    for i in range(args.nodes):
        own = (
            ""
            if args.site_files is None
            else f"dataset-path='{args.site_files.absolute() / f'{i}.csv'}'"
        )
        deployment.start_supernode(i, args.nodes, node_config=own)


def _run_job(deployment: Deployment, args: argparse.Namespace, started: float) -> int:
    """Submit the job, print its progress until it ends, then its status, time since
    ``started`` and health line: 0 when it completed, else 1."""
    results = args.workdir / "results" / "job"
    run_id = deployment.submit(f"{args.run_config} output-dir='{results.parent}' run-name='job'")
    print(
        f"run {run_id} submitted; its log: {args.workdir / 'logs' / f'{run_id}.log'}",
        flush=True,
    )
    status = deployment.follow(run_id, PROGRESS)
    print(f"run {run_id}: {status}; {time.monotonic() - started:.0f} s")
    config = None
    if (results / "config.json").is_file():
        config = json.loads((results / "config.json").read_text())
    print("\n".join(report(results, config)))
    return 0 if status == COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
