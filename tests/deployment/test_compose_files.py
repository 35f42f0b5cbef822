"""The docker compose files of `docker/` (no container is started here).

Checks that need no tool: the files parse as YAML; every service uses host networking; the
SuperNodes get distinct partition ids and loopback ports, and each SuperExec dials its own
SuperLink / SuperNode; every command line is accepted by flwr 1.41's and 1.42's own argument parsers
(Flower's upstream compose files still use pre-1.41 flags); the TLS overlay mounts the
certificates its flags name and turns on SuperNode authentication; the perimeter overlay puts
nginx (its configuration rendered by deploy.perimeter, checked with `nginx -t`) between the
SuperNodes and the loopback SuperLink; every service runs as FL_UID:FL_GID (default 49999);
the GPU overlay reserves devices on the SuperNode side only; the sites overlay mounts each
site, read-only, into its own node's ClientApp SuperExec alone, at the path its node config
names, and compose refuses it without the sites' paths; the warm overlay runs every SuperExec as
deploy/warm_superexec.py (mounted read-only with the app's packages it preloads, its task poll at
0.1 s) with the arguments of the files before it; the image's requirements follow pyproject.toml
and the extras it carries; the end-to-end script stays off unless FL_DOCKER=1. Where a compose
tool is installed, every file
combination is also validated with `docker compose config` / `docker-compose config` and the
same checks run on the merged result.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: flwr brings tomli
    import tomli as tomllib

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
BASE = "compose.yml"
TLS = "compose.tls.yml"
GPU = "compose.gpu.yml"
PERIMETER = "compose.perimeter.yml"
SITES = "compose.sites.yml"
WARM = "compose.warm.yml"
COMBINATIONS = [
    (BASE,),
    (BASE, TLS),
    (BASE, GPU),
    (BASE, TLS, GPU),
    (BASE, TLS, PERIMETER),
    (BASE, TLS, PERIMETER, GPU),
    (BASE, SITES),
    (BASE, TLS, PERIMETER, SITES),
    (BASE, WARM),
    (BASE, TLS, WARM),
    (BASE, TLS, PERIMETER, SITES, WARM),
]
IMAGE_EXTRAS = ("xgboost",)  # pyproject's extras the SuperExec image carries (requirements.txt)
WARM_SCRIPT = "/opt/fl/deploy/warm_superexec.py"  # where the warm overlay mounts it
SITE_ENV = {
    "FL_SITE_0": "/data/site-zero.csv",
    "FL_SITE_1": "/data/site-one.csv",
    "FL_NODE_CONFIG": "dataset-path='/app/site/data.csv'",
}  # what a sites run exports
PERIMETER_PORT = 39405
N_NODES = 2
DEPRECATED_FLAGS = {
    "--fleet-api-address",
    "--fleet-api-type",
    "--control-api-address",
    "--serverappio-api-address",
    "--clientappio-api-address",
    "--appio-api-address",
    "--plugin-type",
    "--auth-supernode-public-key",
    "--auth-list-public-keys",
    "--executor-type",
}

_VAR = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")


def _substitute(value, env: dict | None = None):
    """Resolve ${VAR:-default} and ${VAR:?error} as compose does in the environment ``env``."""
    env = env or {}
    if isinstance(value, str):
        return _VAR.sub(
            lambda m: (
                env.get(m.group(1))
                or (m.group(3) if m.group(2) == "-" else f"<{m.group(1)} unset>")
            ),
            value,
        )
    if isinstance(value, list):
        return [_substitute(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, env) for k, v in value.items()}
    return value


def _load(name: str, env: dict | None = None) -> dict:
    return _substitute(yaml.safe_load((DOCKER / name).read_text()), env)


def _compose_cmd() -> list[str] | None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], check=False, capture_output=True, timeout=30
        ).returncode
        == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def _opt(cmd: list[str], flag: str) -> str | None:
    """Value of `flag` in a command list (`--flag value` or `--flag=value`)."""
    for i, arg in enumerate(cmd):
        if arg == flag:
            return cmd[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _supernodes(services: dict) -> list[str]:
    return sorted(s for s in services if s.startswith("supernode-"))


def _mounts(service: dict) -> list[tuple[str, str, str]]:
    """(host path, container path, 'ro'/'rw') of each mount, short or long syntax."""
    out = []
    for vol in service.get("volumes", []):
        if isinstance(vol, dict):
            out.append(
                (str(vol.get("source", "")), vol["target"], "ro" if vol.get("read_only") else "rw")
            )
        else:
            parts = vol.split(":")
            out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"))
    return out


# --- checks shared by the raw files and the merged configurations ------------------------------


def _flower(services: dict) -> dict:
    """The Flower services (all but the perimeter's nginx)."""
    return {name: service for name, service in services.items() if name != "perimeter"}


def check_topology(services: dict) -> None:
    """SuperNodes dial the SuperLink's port, or the perimeter's when there is one."""
    perimeter = "perimeter" in services
    services = _flower(services)
    nodes = _supernodes(services)
    assert len(nodes) == N_NODES
    assert set(services) == {
        "superlink",
        "serverapp-superexec",
        *nodes,
        *(f"clientapp-superexec-{n.split('-')[1]}" for n in nodes),
    }
    link = services["superlink"]["command"]
    assert _opt(link, "--isolation") == "process"
    assert "--disable-runtime-dependency-installation" in link
    link_port = int(_opt(link, "--port"))
    assert _opt(link, "--host") == "127.0.0.1"
    assert (
        _port(_opt(services["serverapp-superexec"]["command"], "--runtime-api-address"))
        == link_port
    )

    partitions, listen = [], [link_port]
    for node in nodes:
        cmd = services[node]["command"]
        assert _opt(cmd, "--isolation") == "process"
        fleet_port = PERIMETER_PORT if perimeter else link_port
        assert _opt(cmd, "--superlink") == f"127.0.0.1:{fleet_port}"
        assert _opt(cmd, "--host") == "127.0.0.1"
        cfg = dict(kv.split("=", 1) for kv in shlex.split(_opt(cmd, "--node-config")))
        assert int(cfg["num-partitions"]) == N_NODES
        partitions.append(int(cfg["partition-id"]))
        port = int(_opt(cmd, "--port"))
        listen.append(port)
        # the node's ClientApp SuperExec dials this node's Runtime API, nobody else's
        exec_cmd = services[f"clientapp-superexec-{node.split('-')[1]}"]["command"]
        assert _opt(exec_cmd, "--runtime-api-address") == f"127.0.0.1:{port}"
    assert sorted(partitions) == list(range(N_NODES))
    if perimeter:
        listen.append(PERIMETER_PORT)
    for name, service in services.items():
        health = _opt(service["command"], "--health-server-address")
        assert health and health.startswith("127.0.0.1:"), name
        listen.append(_port(health))
    assert len(listen) == len(set(listen)), f"two services on one loopback port: {listen}"


def check_host_networking(services: dict) -> None:
    for name, service in services.items():
        assert service.get("network_mode") == "host", name
        assert "ports" not in service and "networks" not in service, name


def check_user(services: dict) -> None:
    """Every container runs as FL_UID:FL_GID, by default Flower's `app` user (49999), with a
    HOME it can write (FL_CONTAINER_HOME): run-compose.sh run by another user than root sets
    them to that user's, whose keys certs.sh leaves 0600 (no key readable by others)."""
    for name, service in services.items():
        assert service.get("user") == "49999:49999", name
        if name != "perimeter":  # nginx needs no HOME
            assert service["environment"]["HOME"] == "/app", name


def check_flags(services: dict, parsers: dict) -> None:
    """flwr 1.41's and 1.42's own parsers accept every command line; no deprecated flag is used."""
    for name, service in _flower(services).items():
        cmd = [str(a) for a in service["command"]]
        role = "superexec" if "superexec" in name else name.split("-")[0]
        parsers[role]().parse_args(cmd)
        used = {a.split("=")[0] for a in cmd if a.startswith("--")}
        assert not used & DEPRECATED_FLAGS, (name, used & DEPRECATED_FLAGS)
        if "superexec" in name:
            assert "--allow-runtime-dependency-installation" not in cmd
            assert service["environment"]["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"


def check_sites(services: dict) -> None:
    """Each node's ClientApp SuperExec mounts its own site, read-only, at the path its
    SuperNode's node config names; no other service mounts any site."""
    sites = {SITE_ENV[f"FL_SITE_{i}"]: i for i in range(N_NODES)}
    for name, service in services.items():
        mounted = [m for m in _mounts(service) if m[0] in sites]
        if not name.startswith("clientapp-superexec-"):
            assert not mounted, name
            continue
        node = int(name.rsplit("-", 1)[1])
        ((source, target, mode),) = mounted
        assert (sites[source], mode) == (node, "ro"), name
        config = shlex.split(_opt(services[f"supernode-{node}"]["command"], "--node-config"))
        assert f"dataset-path={target}" in config, (name, config)


def test_sites_overlay(parsers):
    """Over the base file: only the ClientApp SuperExecs' volumes change."""
    base, sites = _load(BASE, SITE_ENV)["services"], _load(SITES, SITE_ENV)["services"]
    assert set(sites) == {f"clientapp-superexec-{i}" for i in range(N_NODES)}
    assert all(set(service) == {"volumes"} for service in sites.values())
    merged = {
        name: {
            **base[name],
            "volumes": base[name].get("volumes", []) + sites.get(name, {}).get("volumes", []),
        }
        for name in base
    }
    check_topology(merged)
    check_sites(merged)
    check_flags(merged, parsers)


def check_insecure(services: dict) -> None:
    for name, service in services.items():
        assert "--insecure" in service["command"], name


def check_tls(services: dict) -> None:
    """TLS everywhere, SuperNode auth on, and each certificate path a flag names is mounted."""
    link = services["superlink"]["command"]
    for flag in ("--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile"):
        assert _opt(link, flag), flag
    assert "--enable-supernode-auth" in link
    node_keys = []
    for name, service in _flower(services).items():
        cmd = service["command"]
        assert "--insecure" not in cmd, name
        mounts = {target: mode for _, target, mode in _mounts(service)}
        paths = [a for a in cmd if str(a).startswith(("/app/certs/", "/app/keys/"))]
        assert paths, name
        for path in paths:
            assert mounts.get(path) == "ro", (name, path)
        for source, _, _ in _mounts(service):
            assert not source.endswith("ca.key"), name  # the CA's key stays on the host
        if name.startswith("supernode-"):
            assert _opt(cmd, "--root-certificates")
            for flag in ("--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile"):
                assert _opt(cmd, flag), (name, flag)  # its Runtime API too
            key = _opt(cmd, "--auth-supernode-private-key")
            node_keys += [src for src, target, _ in _mounts(service) if target == key]
        elif "superexec" in name:
            assert _opt(cmd, "--root-certificates"), name
    assert len(node_keys) == N_NODES and len(set(node_keys)) == N_NODES, node_keys


def check_perimeter(services: dict) -> None:
    """nginx runs the rendered configuration, which listens on the SuperNodes' port, presents
    the SuperLink's certificate and forwards only the Fleet paths to the SuperLink's own
    loopback listener; it mounts that certificate, key and ca.crt read-only, no other key."""
    from deploy.perimeter import FLEET_PATHS, docker_config

    perimeter, link = services["perimeter"], services["superlink"]["command"]
    assert _opt(link, "--host") == "127.0.0.1"  # the SuperLink stays on loopback
    cmd = [str(a) for a in perimeter["command"]]
    assert perimeter["entrypoint"] == ["nginx"] and _opt(cmd, "-g") == "daemon off;"
    conf_path = _opt(cmd, "-c")
    mounts = {target: (source, mode) for source, target, mode in _mounts(perimeter)}
    assert mounts[conf_path] == ("./nginx/perimeter.conf", "ro") or mounts[conf_path][0].endswith(
        "/nginx/perimeter.conf"
    )
    conf = (DOCKER / "nginx" / "perimeter.conf").read_text()
    assert conf == docker_config()
    assert f"listen {PERIMETER_PORT} ssl;" in conf
    assert f"server 127.0.0.1:{_opt(link, '--port')};" in conf
    calls = [path for path in FLEET_PATHS if path != "push-object"]  # it has its own bound
    assert "location ~ ^/v1/fleet/(" + "|".join(calls) + ")$" in conf
    assert "location = /v1/fleet/push-object {" in conf
    for directive in ("ssl_certificate", "ssl_certificate_key", "proxy_ssl_trusted_certificate"):
        path = re.search(rf"^\s*{directive} (\S+);", conf, re.MULTILINE).group(1)
        assert mounts[path][1] == "ro", path
        assert (
            _opt(
                link,
                {
                    "ssl_certificate": "--ssl-certfile",
                    "ssl_certificate_key": "--ssl-keyfile",
                    "proxy_ssl_trusted_certificate": "--ssl-ca-certfile",
                }[directive],
            )
            == path
        )
    assert sorted(mounts) == sorted(
        [conf_path, "/app/certs/ca.crt", "/app/certs/server.pem", "/app/certs/server.key"]
    )


def _app_packages() -> list[str]:
    """The app's packages, those a FAB carries: pyproject's wheel packages."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]


def check_prompt_supernodes(services: dict) -> None:
    """Every SuperNode runs deploy/supernode.py (Flower's SuperNode, its arguments unchanged),
    mounted read-only with the module it imports, both present on the host."""
    for i in range(N_NODES):
        service = services[f"supernode-{i}"]
        assert service["entrypoint"] == ["python", "-m", "deploy.supernode"]
        assert service["working_dir"] == "/opt/fl-node"
        mounts = {target: (source, mode) for source, target, mode in _mounts(service)}
        for script in ("supernode.py", "warm_superexec.py"):
            source, mode = mounts[f"/opt/fl-node/deploy/{script}"]
            host = ROOT / "deploy" / script
            assert mode == "ro" and (DOCKER / source).resolve() == host.resolve() and host.exists()


def check_warm(services: dict) -> None:
    """Every SuperExec runs deploy/warm_superexec.py (its parser accepts the entrypoint's
    arguments with the service's command), preloads its app from the read-only mounts of the
    script and the app's packages, all of which exist on the host, and polls every 0.1 s."""
    from deploy.warm_superexec import parse_args

    superexecs = {name: s for name, s in services.items() if "superexec" in name}
    assert set(superexecs) == {
        "serverapp-superexec",
        *(f"clientapp-superexec-{i}" for i in range(N_NODES)),
    }
    packages = _app_packages()
    for name, service in superexecs.items():
        entry = [str(a) for a in service["entrypoint"]]
        assert entry[:3] == ["python", "-m", "deploy.warm_superexec"], name
        assert service["working_dir"] == "/opt/fl", name
        args = parse_args([*entry[3:], *(str(a) for a in service["command"])])
        app = "server_app.app" if name.startswith("serverapp") else "client_app.app"
        assert args.preload[0] == app and app.split(".")[0] in packages, name
        assert service["environment"]["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.1", name
        mounts = {target: (source, mode) for source, target, mode in _mounts(service)}
        expected = {
            WARM_SCRIPT: ROOT / "deploy" / "warm_superexec.py",
            **{f"/opt/fl/{p}": ROOT / p for p in packages},
        }
        for target, host in expected.items():
            source, mode = mounts[target]
            assert mode == "ro" and (DOCKER / source).resolve() == host.resolve(), (name, target)
            assert host.exists(), host


def check_gpu(services: dict) -> None:
    """GPUs only on the SuperNode side: the ClientApp SuperExecs, where the ClientApps train."""
    reserved = set()
    for name, service in services.items():
        devices = (
            service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        )
        if devices:
            reserved.add(name)
            for dev in devices:
                assert "gpu" in dev["capabilities"], name
                assert dev.get("driver") == "nvidia", name
    assert reserved == {f"clientapp-superexec-{i}" for i in range(N_NODES)}


# --- tests on the files themselves -------------------------------------------------------------


@pytest.fixture(scope="module")
def parsers():
    from flwr.supercore.cli.flower_superexec import _parse_args as superexec
    from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink as superlink
    from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode as supernode

    return {"superlink": superlink, "supernode": supernode, "superexec": superexec}


@pytest.mark.parametrize("name", [BASE, TLS, GPU, PERIMETER, WARM])
def test_files_parse(name):
    data = _load(name)
    assert isinstance(data["services"], dict) and data["services"]
    assert "networks" not in data


def test_base_file(parsers):
    services = _load(BASE)["services"]
    check_topology(services)
    check_host_networking(services)
    check_user(services)
    raw = yaml.safe_load((DOCKER / BASE).read_text())
    for name, service in raw["services"].items():  # the variables run-compose.sh sets
        assert service["user"] == "${FL_UID:-49999}:${FL_GID:-49999}", name
        assert service["environment"]["HOME"] == "${FL_CONTAINER_HOME:-/app}", name
    check_insecure(services)
    check_flags(services, parsers)


def test_tls_overlay_restates_every_command(parsers):
    base, tls = _load(BASE)["services"], _load(TLS)["services"]
    # overlays replace `command` lists whole: a service left out would stay insecure
    assert set(tls) == set(base)
    merged = {name: {**base[name], **tls[name]} for name in base}
    for name, service in merged.items():  # volumes are merged by compose
        service["volumes"] = base[name].get("volumes", []) + tls[name].get("volumes", [])
    check_topology(merged)
    check_tls(merged)
    check_flags(merged, parsers)


def test_perimeter_overlay(parsers):
    """Over the TLS overlay: the SuperNodes' commands restated with the perimeter's port."""
    base, tls = _load(BASE)["services"], _load(TLS)["services"]
    perimeter = _load(PERIMETER)["services"]
    assert set(perimeter) == {"perimeter", *_supernodes(base)}
    merged = {name: {**base[name], **tls[name], **perimeter.get(name, {})} for name in base}
    for name, service in merged.items():
        service["volumes"] = base[name].get("volumes", []) + tls[name].get("volumes", [])
    merged["perimeter"] = perimeter["perimeter"]
    for node in _supernodes(base):  # the same command but for --superlink
        restated, before = perimeter[node]["command"], tls[node]["command"]
        assert _opt(restated, "--superlink") == f"127.0.0.1:{PERIMETER_PORT}"
        assert [a for a in restated if a != f"127.0.0.1:{PERIMETER_PORT}"] == [
            a for a in before if a != _opt(before, "--superlink")
        ]
    check_topology(merged)
    check_tls(merged)
    check_flags(merged, parsers)
    check_user(merged)
    check_host_networking(merged)
    check_perimeter(merged)


def test_perimeter_config_passes_nginx_t(tmp_path):
    """docker/nginx/perimeter.conf, with its paths moved under tmp_path, passes `nginx -t`."""
    from deploy.certificates import make_certificates
    from deploy.perimeter import nginx_binary

    nginx = nginx_binary()
    if nginx is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx missing in CI (.ci/run installs Debian's nginx)")
        pytest.skip("nginx not installed (Debian: apt-get install -y nginx)")
    make_certificates(tmp_path / "certs", [])
    conf = (DOCKER / "nginx" / "perimeter.conf").read_text()
    conf = conf.replace("/tmp/", f"{tmp_path}/").replace("/tmp;", f"{tmp_path};")
    conf = conf.replace("/app/certs/", f"{tmp_path}/certs/")
    conf = conf.replace("/dev/stdout", f"{tmp_path}/access.log")
    conf = re.sub(r"listen \d+ ssl;", "listen 127.0.0.1:1 ssl;", conf)  # -t does not bind
    (tmp_path / "nginx.conf").write_text(conf)
    done = subprocess.run(
        [nginx, "-t", "-p", f"{tmp_path}/", "-e", "stderr", "-c", str(tmp_path / "nginx.conf")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_warm_overlay(parsers):
    """Over the base file, and over the TLS overlay: the warm overlay changes the SuperExecs'
    entrypoint, environment and mounts only, so each keeps the command (the arguments) of the
    files before it."""
    base, tls = _load(BASE)["services"], _load(TLS)["services"]
    warm = _load(WARM)["services"]
    assert set(warm) == {n for n in base if "superexec" in n or n.startswith("supernode-")}
    for name, service in warm.items():
        changed = {"entrypoint", "working_dir", "volumes"}
        assert set(service) == (changed | {"environment"} if "superexec" in name else changed)
    for under in ({}, tls):
        merged = {}
        for name, service in base.items():
            over = {**under.get(name, {}), **warm.get(name, {})}
            merged[name] = {
                **service,
                **over,
                "environment": {**service["environment"], **over.get("environment", {})},
                "volumes": [
                    *service.get("volumes", []),
                    *under.get(name, {}).get("volumes", []),
                    *warm.get(name, {}).get("volumes", []),
                ],
            }
        for name in warm:
            before = under.get(name, base[name])["command"]
            assert merged[name]["command"] == before, name
        check_topology(merged)
        check_flags(merged, parsers)
        check_warm(merged)
        check_prompt_supernodes(merged)
        if under:
            check_tls(merged)


def test_gpu_overlay():
    base, gpu = _load(BASE)["services"], _load(GPU)["services"]
    assert set(gpu) <= set(base)
    check_gpu(gpu)
    for service in gpu.values():
        assert "command" not in service  # keeps the base (or TLS) command


def test_requirements_follow_pyproject():
    """requirements.txt: pyproject's dependencies (flwr without Ray) and IMAGE_EXTRAS' pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [d for extra in IMAGE_EXTRAS for d in project["optional-dependencies"][extra]]
    expected = {d.replace("flwr[simulation]", "flwr") for d in [*project["dependencies"], *extras]}
    lines = (DOCKER / "requirements.txt").read_text().splitlines()
    baked = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    assert baked == expected


def test_run_script_is_opt_in():
    env = {k: v for k, v in os.environ.items() if k != "FL_DOCKER"}
    proc = subprocess.run(
        ["bash", str(DOCKER / "run-compose.sh")],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert "FL_DOCKER=1" in proc.stdout


# --- every combination through the compose tool -------------------------------------------------


@pytest.fixture(scope="module")
def compose_configs() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """`<compose tool> config` of every combination, run side by side (about 0.5 s CPU each)."""
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("no compose tool installed (docker compose plugin or docker-compose)")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUPER", "TORCH", "FL_", "COMPOSE_"))
    }
    procs = {}
    for files in [*COMBINATIONS, ("unset", BASE, SITES)]:
        args = [a for f in files if f != "unset" for a in ("-f", str(DOCKER / f))]
        extra = SITE_ENV if SITES in files and "unset" not in files else {}
        procs[files] = subprocess.Popen(
            [*cmd, "-p", "fl-test", *args, "config"],
            cwd=DOCKER,
            env={**env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    out = {}
    for files, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=60)
        out[files] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


@pytest.mark.parametrize("files", COMBINATIONS, ids=["+".join(c) for c in COMBINATIONS])
def test_compose_config(compose_configs, files, parsers):
    proc = compose_configs[files]
    assert proc.returncode == 0, proc.stderr
    services = yaml.safe_load(proc.stdout)["services"]
    check_topology(services)
    check_host_networking(services)
    check_user(services)
    check_flags(services, parsers)
    if TLS in files:
        check_tls(services)
    else:
        check_insecure(services)
    if PERIMETER in files:
        check_perimeter(services)
    if GPU in files:
        check_gpu(services)
    if SITES in files:
        check_sites(services)
    if WARM in files:
        check_warm(services)


def test_the_sites_overlay_needs_every_sites_path(compose_configs):
    proc = compose_configs[("unset", BASE, SITES)]
    assert proc.returncode != 0 and "FL_SITE_0 must name site 0's data" in proc.stderr
