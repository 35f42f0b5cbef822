"""Round latency: the same jobs on the in-process engine, in Flower's simulation and in a
deployment with TLS and SuperNode authentication (one SuperLink, 2 SuperNodes, on loopback),
side by side in one run.

Seven ways to run each job, one after another (never two runs at once); ``compose`` only when
``--ways`` names it:

- ``in-process``: the ServerApp and both ClientApps in this process (``testing.inprocess_grid``),
  the nodes one after the other;
- ``simulation``: ``flwr run`` on Flower's simulation engine (a local SuperLink with Ray,
  ``testing.simulation_link``), 2 SuperNodes of one CPU each, training side by side;
- ``flower``: ``deploy.deployment.Deployment`` with Flower's own parts: ``flower-supernode``, its
  ``--isolation subprocess`` (a fresh ``flwr-clientapp`` interpreter per message), its
  SuperExec task poll (1 s), the ServerApp pulling replies every 3 s (what Flower's deployment
  grid does) and the SuperLink's state in a SQLite file (``--database``);
- ``deployed``: ``deploy.local``'s defaults: ``deploy.supernode`` (Flower's SuperNode with
  prompt waits), warm ClientApps (``deploy.warm_superexec``: forked, a FAB installed once, object
  retries after 0.02 s), the SuperExecs' task poll and the ServerApp's reply poll at 0.1 s, the
  SuperLink's state in memory.
- ``runbook``: the separate-machines runbook's setup (docs/deployment.md) on loopback: as
  ``deployed``, but the SuperNodes dial the nginx perimeter (``deploy.perimeter``) in front of
  the SuperLink, whose state is in a SQLite file (``--database``), as the runbook starts it.
- ``namespaces``: the runbook's setup with the SuperLink (and its perimeter) and each SuperNode
  in a network namespace of its own (``deploy.netns``, veth links, no shared loopback), warm
  ClientApps in each node's namespace: the stand-in for separate machines (root only).
- ``compose``: docker/'s compose deployment with TLS, SuperNode authentication, the nginx
  perimeter and warm SuperExecs (``compose.yml`` + ``compose.tls.yml`` +
  ``compose.perimeter.yml`` + ``compose.warm.yml``, docker/README.md), each job through ``flwr
  run`` against its SuperLink (needs a docker daemon and the README's images).

A round's latency is the difference of consecutive ``wall_time_s`` in the run's
``metrics.json`` (the ServerApp's clock), averaged over rounds 2 to R (round 1 also starts the
ServerApp, installs the FAB and builds the roster).

    python -m benchmarks.latency                 # every family, 4 rounds; about 17 min
    python -m benchmarks.latency --families default --rounds 6

Writes ``results/latency.md`` and ``results/latency.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, ROOT, md_table, parser, write_report

# the default job (pyproject's defaults: FFGB, MLP learners, digits) and one job per family,
# those of the deployment test
FAMILIES = {
    "default": "",
    "fedavg": "algorithm='fedavg' task='digits' local-steps=5",
    "fedfw": "algorithm='fedfw' task='synthetic'",
    "feddr": "algorithm='feddr' task='synthetic'",
    "ffgb-trees": "algorithm='ffgb' task='digits' ffgb.learner='tree'",
    "fedfun": "algorithm='fedfun' task='wine' fedfun.initial-steps=50 fedfun.local-steps=20 "
    "fedfun.hidden='8' fedfun.penalty-samples=50",
    "fedxgb": "algorithm='fedxgb-bagging' task='wine' fedxgb.max-depth=3",
    # a tree level is an exchange: 5-6 exchanges a round (docs/algorithms.md), simulated or not
    "fedxgb-hist": "algorithm='fedxgb-hist' task='wine' fedxgb-hist.max-depth=3",
}
NODES = 2
FLOWER_SUPERNODE = (str(Path(sys.executable).parent / "flower-supernode"),)
DEPLOYMENTS = {  # Deployment options and the ServerApp's reply-poll-interval
    "flower": {
        "options": {
            "warm": False,
            "task_poll_interval": None,
            "supernode_command": FLOWER_SUPERNODE,
            "database": "state.db",
        },
        "reply_poll": 3.0,
    },
    "deployed": {"options": {}, "reply_poll": 0.1},  # deploy.local's defaults
    # the separate-machines runbook (docs/deployment.md) on loopback: the SuperLink's state in
    # SQLite, the SuperNodes dialling the nginx perimeter, prompt waits and warm ClientApps
    "runbook": {"options": {"perimeter": True, "database": "state.db"}, "reply_poll": 0.1},
    "namespaces": {
        "options": {"perimeter": True, "database": "state.db"},
        "reply_poll": 0.1,
        "namespaces": True,
    },
}
WAYS = ("in-process", "simulation", *DEPLOYMENTS)
DOCKER = ROOT / "docker"
COMPOSE = (  # docker-compose, its project (not run-compose.sh's fl-beyond) and files
    ("docker-compose", "-p", "fl-latency")
    + ("-f", "compose.yml", "-f", "compose.tls.yml")
    + ("-f", "compose.perimeter.yml", "-f", "compose.warm.yml")
)
COMPOSE_PORTS = (39401, 39402, 39403, 39405, 39410, 39411, 39412, 39420, 39421, 39422)


def round_seconds(metrics: Path) -> list[float]:
    """Seconds of rounds 2..R from a run's metrics.json."""
    rows = json.loads(metrics.read_text())["rounds"]
    walls = {r["round"]: r["wall_time_s"] for r in rows if r.get("round", 0) >= 1}
    return [walls[t] - walls[t - 1] for t in sorted(walls) if t >= 2 and t - 1 in walls]


def in_process(config: str, rounds: int) -> list[float]:
    from client_app.app import app as client_app
    from run_config.declared import parse_overrides
    from server_app.app import run
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    with tempfile.TemporaryDirectory() as tmp:
        values = {
            **parse_overrides(config),
            "num-server-rounds": rounds,
            "output-dir": tmp,
            "run-name": "job",
            "min-nodes": NODES,
        }
        conf = run_config(**values)
        run(LocalGrid(client_app, conf, NODES, keep_messages=False), server_context(conf))
        return round_seconds(Path(tmp) / "job" / "metrics.json")


def deployed(way: str, jobs: dict[str, str], rounds: int, workdir: Path) -> dict[str, Any]:
    """Each job on one TLS + authentication deployment set up ``way``; seconds per round."""
    from deploy.app_files import app_copy
    from deploy.deployment import Deployment
    from deploy.netns import Star
    from deploy.ports import free_port_block

    way_options = DEPLOYMENTS[way]
    options = dict(way_options["options"])
    if "database" in options:
        options["database"] = workdir / way / options["database"]
    star = None
    if way_options.get("namespaces"):
        if os.geteuid() != 0:
            return {name: "needs root (network namespaces)" for name in jobs}
        star = options["star"] = Star(f"flb{os.getpid() % 1000}", NODES)
    app = app_copy(workdir / way / "app")
    deployment = Deployment(
        workdir / way, tls=True, auth=True, base_port=free_port_block(), **options
    )
    results = workdir / way / "results"
    out: dict[str, Any] = {}
    try:
        if star is not None:
            star.create()
        deployment.start_superlink()
        for i in range(NODES):
            deployment.start_supernode(i, NODES)
            if star is None:  # a node's port is on its own namespace's loopback otherwise
                deployment.wait_for_port(deployment.base_port + 10 + 2 * i)  # raises if it exited
        for name, config in jobs.items():
            text = (
                f"{config} num-server-rounds={rounds} min-nodes={NODES} reply-timeout=600 "
                f"reply-poll-interval={way_options['reply_poll']} "
                f"output-dir='{results}' run-name='{name}'"
            )
            run_id = deployment.submit(text, app)
            status = deployment.wait_for_runs([run_id], timeout=1800)[run_id]
            metrics = results / name / "metrics.json"
            out[name] = round_seconds(metrics) if metrics.exists() else f"no metrics ({status})"
            print(f"{way} {name}: {status} {out[name]}", flush=True)
    finally:
        deployment.stop()
        if star is not None:
            star.delete()
    return out


def compose(jobs: dict[str, str], rounds: int, workdir: Path) -> dict[str, Any]:
    """Each job on docker/'s compose deployment (TLS, SuperNode authentication, the nginx
    perimeter, warm SuperExecs; 2 SuperNodes), submitted with ``flwr run`` as docker/README.md
    does; seconds per round from the bind-mounted results folder. What containers add to the
    same parts on loopback. A reason per job instead when docker or an image is missing."""
    import subprocess

    from deploy.app_files import app_copy

    results, flwr = workdir / "compose" / "results", str(Path(sys.executable).parent / "flwr")
    env = {**os.environ, **_compose_images(), "FL_RESULTS_DIR": str(results), "FLWR": flwr}
    env |= {
        "FLWR_HOME": str(workdir / "compose"),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    }
    if why := _compose_missing(env):
        return {name: why for name in jobs}
    results.mkdir(parents=True, mode=0o750 if os.geteuid() == 0 else 0o700)
    if os.geteuid() == 0:  # the containers' user (Flower's `app`) writes the results
        os.chown(results, 49999, 49999)
    else:  # the containers run as this user (docker/README.md, TLS section)
        env |= {"FL_UID": str(os.getuid()), "FL_GID": str(os.getgid()), "FL_CONTAINER_HOME": "/tmp"}
    (workdir / "compose" / "config.toml").write_text(
        '[superlink]\ndefault = "docker-tls"\n\n[superlink.docker-tls]\naddress = '
        f'"127.0.0.1:39401"\nroot-certificates = "{DOCKER / "certs" / "ca.crt"}"\n'
    )
    app = app_copy(workdir / "compose" / "app")

    def sh(*command: str | Path, cwd: Path = ROOT) -> None:
        subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, timeout=600)

    out: dict[str, Any] = {}
    try:
        sh(DOCKER / "certs.sh")
        sh(*COMPOSE, "up", "-d", "--no-build", "superlink", "serverapp-superexec", cwd=DOCKER)
        sh(DOCKER / "wait-ready.sh", "docker-tls", "0", "120")
        for i in range(NODES):  # SuperNode authentication: register the nodes' keys first
            sh(flwr, "supernode", "register", DOCKER / "keys" / f"supernode-{i}.pub", "docker-tls")
        sh(*COMPOSE, "up", "-d", "--no-build", cwd=DOCKER)
        sh(DOCKER / "wait-ready.sh", "docker-tls", str(NODES), "120")
        for name, config in jobs.items():
            text = (
                f"{config} num-server-rounds={rounds} min-nodes={NODES} reply-timeout=600 "
                f"reply-poll-interval=0.1 output-dir='/app/results' run-name='{name}'"
            )
            command = [flwr, "run", str(app), "docker-tls", "--stream", "--run-config", text]
            done = subprocess.run(command, env=env, capture_output=True, timeout=1800)
            metrics = results / name / "metrics.json"
            out[name] = (
                round_seconds(metrics)
                if metrics.exists()
                else f"no metrics (exit {done.returncode})"
            )
            print(f"compose {name}: {out[name]}", flush=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        why = (error.stderr or b"").decode()[-200:].strip()
        failed = f"{Path(str(error.cmd[0])).name} failed: {why}"
        return {name: out.get(name, failed) for name in jobs}
    finally:
        subprocess.run(
            [*COMPOSE, "down", "--remove-orphans"], cwd=DOCKER, env=env, capture_output=True
        )
    return out


def _compose_images() -> dict[str, str]:
    """The compose files' images: the environment's; else Flower's official SuperLink and
    SuperNode images where present, the local stand-in of docker/README.md otherwise."""
    from importlib.metadata import version

    images, flwr = {}, version("flwr")  # the images of the flwr this project runs
    for role in ("superlink", "supernode"):
        official = f"flwr/{role}:{flwr}"
        fallback = (
            f"local/flwr:{flwr}" if _fails("docker", "image", "inspect", official) else official
        )
        images[f"{role.upper()}_IMAGE"] = os.environ.get(f"{role.upper()}_IMAGE", fallback)
    images["SUPEREXEC_IMAGE"] = os.environ.get(
        "SUPEREXEC_IMAGE", "beyond-averaging/superexec:latest"
    )
    images["PERIMETER_IMAGE"] = os.environ.get(
        "PERIMETER_IMAGE", "beyond-averaging/perimeter:latest"
    )
    return images


def _compose_missing(env: dict[str, str]) -> str | None:
    """Why the compose deployment cannot start here (no daemon answering, a missing image or
    tool, one of its host ports taken), or None."""
    import shutil
    import socket

    def answers(port: int) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    if _fails("docker", "info"):
        return "needs docker (no daemon answers)"
    images = [
        env[key]
        for key in ("SUPERLINK_IMAGE", "SUPERNODE_IMAGE", "SUPEREXEC_IMAGE", "PERIMETER_IMAGE")
    ]
    if missing := [image for image in images if _fails("docker", "image", "inspect", image)]:
        return f"needs the images of docker/README.md (missing: {', '.join(missing)})"
    if shutil.which("docker-compose") is None:
        return "needs docker-compose"
    if busy := [port for port in COMPOSE_PORTS if answers(port)]:
        return f"ports in use: {busy} (another compose deployment?)"
    return None


def _fails(*command: str) -> bool:
    """Whether ``command`` exits non-zero, cannot start or takes over a minute."""
    import subprocess

    try:
        return subprocess.run(command, capture_output=True, timeout=60).returncode != 0
    except (OSError, subprocess.TimeoutExpired):
        return True


def simulated(jobs: dict[str, str], rounds: int, workdir: Path) -> dict[str, Any]:
    """Each job through ``flwr run`` on the simulation engine, 2 SuperNodes; seconds per
    round."""
    from run_config.declared import parse_overrides

    results = workdir / "simulation" / "results"
    out: dict[str, Any] = {}
    for name, config in jobs.items():
        values = {
            **parse_overrides(config),
            "num-server-rounds": rounds,
            "min-nodes": NODES,
            "output-dir": str(results),
            "run-name": name,
        }
        failed = flwr_run_simulated(values, NODES, workdir / "simulation" / name)
        metrics = results / name / "metrics.json"
        out[name] = failed or round_seconds(metrics)
        print(f"simulation {name}: {out[name]}", flush=True)
    return out


def flwr_run_simulated(config: dict[str, Any], nodes: int, workdir: Path) -> str | None:
    """``flwr run`` of a copy of the app with run config ``config`` on a simulation SuperLink
    of its own (Ray, ``nodes`` SuperNodes of one CPU each); None when the run wrote its
    metrics, else why not."""
    import subprocess

    from deploy.app_files import app_copy
    from testing.simulation_link import BIN, simulation_superlink

    app = app_copy(workdir / "app")
    text = " ".join(f"{key}={_toml(value)}" for key, value in config.items())
    with simulation_superlink(workdir / "flwr-home") as (env, connection):
        federation = f"num-supernodes={nodes} client-resources-num-cpus=1"
        command = [str(BIN / "flwr"), "run", str(app), connection, "--stream"]
        command += ["--federation-config", federation, "--run-config", text]
        done = subprocess.run(command, env=env, capture_output=True, timeout=3600, check=False)
    metrics = Path(str(config["output-dir"])) / str(config["run-name"]) / "metrics.json"
    return None if metrics.exists() else f"no metrics (flwr run exited {done.returncode})"


def deploy_local_run(config: dict[str, Any], nodes: int, workdir: Path) -> str | None:
    """One job with run config ``config`` on a fresh ``deploy.local`` deployment of its own
    (its defaults: TLS, SuperNode authentication, warm apps, ``nodes`` SuperNodes on loopback,
    node i serving partition i); None when the run completed, else its status."""
    from deploy.app_files import app_copy
    from deploy.deployment import Deployment
    from deploy.ports import free_port_block

    app = app_copy(workdir / "app")
    deployment = Deployment(workdir, tls=True, auth=True, base_port=free_port_block())
    text = " ".join(f"{key}={_toml(value)}" for key, value in config.items())
    try:
        deployment.start_superlink()
        for i in range(nodes):
            deployment.start_supernode(i, nodes)
        run_id = deployment.submit(f"{text} reply-timeout=3600 reply-poll-interval=0.1", app)
        status = deployment.wait_for_runs([run_id], timeout=3600)[run_id]
    finally:
        deployment.stop()
    return None if status == "finished:completed" else status


def _toml(value: Any) -> str:
    """A run-config value as ``--run-config`` reads it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value + "'"
    return repr(value)


def mean(values: Any) -> float | None:
    return sum(values) / len(values) if isinstance(values, list) and values else None


def report(measured: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name in measured["in-process"]:
        values = [mean(measured.get(w, {}).get(name)) for w in WAYS]
        local, simulation, flower, deployed, runbook, namespaces = values
        shown = [("-" if v is None else f"{v:.2f}") for v in values]
        gaps = [
            "-" if None in (base, way) else f"{way - base:+.2f}"
            for base, way in ((simulation, deployed), (simulation, runbook), (deployed, namespaces))
        ]
        ratio = "-" if None in (flower, deployed) else f"{flower / deployed:.1f}x"
        rows.append([name, *shown, *gaps, ratio])
        if "compose" in measured:  # a column only when asked for (--ways compose)
            docker = mean(measured["compose"].get(name))
            rows[-1] += ["-" if docker is None else f"{docker:.2f}"]
            rows[-1] += ["-" if None in (deployed, docker) else f"{docker - deployed:+.2f}"]
    compose_headers = ["docker compose, perimeter s/round", "compose - deploy.local s"]
    return md_table(
        [
            "job",
            "in-process s/round",
            "simulation (Ray) s/round",
            "deployment, Flower's parts s/round",
            "deployment, deploy.local s/round",
            "runbook on loopback s/round",
            "runbook in network namespaces s/round",
            "deploy.local - simulation s",
            "runbook - simulation s",
            "namespaces - deploy.local s",
            "Flower's parts / deploy.local",
            *(compose_headers if "compose" in measured else []),
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--ways", nargs="+", default=list(WAYS[1:]), choices=[*WAYS[1:], "compose"]
    )  # compose (docker) only when named
    p.add_argument(
        "--name", default="latency", help="results/NAME.md and .json (a partial run: another)"
    )
    args = p.parse_args(argv)
    jobs = {name: FAMILIES[name] for name in args.families}
    start = time.monotonic()
    measured: dict[str, dict[str, Any]] = {"in-process": {}}
    for name, config in jobs.items():
        measured["in-process"][name] = in_process(config, args.rounds)
        print(f"in-process {name}: {measured['in-process'][name]}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        measured["simulation"] = (
            simulated(jobs, args.rounds, Path(tmp))
            if "simulation" in args.ways
            else {name: "not run" for name in jobs}
        )
        for way in DEPLOYMENTS:
            measured[way] = (
                deployed(way, jobs, args.rounds, Path(tmp))
                if way in args.ways
                else {name: "not run" for name in jobs}
            )
        if "compose" in args.ways:
            measured["compose"] = compose(jobs, args.rounds, Path(tmp))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(measured, indent=1))
    write_report(
        RESULTS / f"{args.name}.md",
        "Round latency: in-process, simulation and deployment",
        time.monotonic() - start,
        report(measured),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
