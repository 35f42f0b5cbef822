"""The perimeter (deploy/perimeter.py) on loopback: TLS, SuperNode authentication, the SuperLink
on its loopback port and Debian's nginx in front of it for the SuperNodes.

Two SuperNodes connected through the proxy train a short FedAvg job to completion, while a host
holding only ``ca.crt`` and its own registered key, talking to the proxy's address, can neither
register another key, nor list the runs, nor submit a run; raw HTTPS requests to the Control
and Runtime APIs (and anything else but ``POST`` to the SuperNode's Fleet paths) get 403. The
operator's ``flwr`` on the SuperLink's own port does all of it.

Needs nginx (Debian: ``apt-get install -y nginx``; ``.ci/run`` installs it): skipped without
it, except in CI (``CI=true``), where a missing nginx fails.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest

from deploy.app_files import app_copy
from deploy.certificates import make_certificates, make_node_key
from deploy.deployment import BIN, PROJECT, Deployment
from deploy.perimeter import (
    FLEET_PATHS,
    MAX_CALL_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_OBJECT_BYTES,
    Perimeter,
    nginx_binary,
    render,
)
from deploy.ports import free_port_block

pytestmark = pytest.mark.serial  # live processes on timers: one at a time in stage 2
NODES = 2
JOB = (
    f"algorithm='fedavg' task='synthetic' num-server-rounds=2 min-nodes={NODES} "
    "reply-timeout=300 local-steps=5"
)
OUTSIDER = "outside"  # the connection of a host that has ca.crt and its own key only


@pytest.fixture(scope="module")
def nginx() -> str:
    found = nginx_binary()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx missing in CI (.ci/run installs Debian's nginx)")
        pytest.skip("nginx not installed (Debian: apt-get install -y nginx)")
    return found


def test_flower_limits_and_supernode_paths_are_the_ones_flwr_uses():
    """The proxy's paths are exactly the Fleet calls of flwr's SuperNode HTTP client (with a
    key of its own, it never self-registers); push-object bodies are bounded by the perimeter's
    ``max_object_bytes``, every other body by ``MAX_CALL_BYTES``, both below Flower's message
    limit; calls are rate-limited per source address."""
    import flwr.supernode.fleet_http_client as client
    from flwr.supercore.constant import MAX_PROTOBUF_STREAM_MESSAGE_LENGTH

    assert MAX_MESSAGE_BYTES == MAX_PROTOBUF_STREAM_MESSAGE_LENGTH
    called = set(re.findall(r'path="/v1/fleet/([a-z-]+)"', Path(client.__file__).read_text()))
    assert called == {*FLEET_PATHS, "register-node", "unregister-node"}
    conf = render(listen="1", upstream="u:2", cert="c", key="k", ca="a", workdir="/w")
    assert MAX_OBJECT_BYTES < MAX_PROTOBUF_STREAM_MESSAGE_LENGTH
    assert f"client_max_body_size {MAX_CALL_BYTES};" in conf
    object_location = conf.split("location = /v1/fleet/push-object {")[1].split("}\n")[0]
    assert f"client_max_body_size {MAX_OBJECT_BYTES};" in object_location
    assert conf.count("limit_req zone=fleet") == 2 and "limit_req_zone" in conf
    bigger = render(
        listen="1", upstream="u:2", cert="c", key="k", ca="a", workdir="/w", max_object_bytes=99
    )
    assert "client_max_body_size 99;" in bigger
    assert "underscores_in_headers" not in conf  # Flower's headers have hyphens


def test_nginx_reuses_a_superlink_connection_only_while_the_superlink_keeps_it():
    """The SuperLink's uvicorn (Flower passes no keep-alive of its own) closes a connection
    ``timeout_keep_alive`` s after writing a reply: nginx's idle bound plus its age bound stay
    under that, so nginx never sends a call on a connection the SuperLink is closing."""
    import importlib
    import inspect

    import uvicorn

    superlink = importlib.import_module("flwr.superlink.cli.flower_superlink")  # the module
    assert "timeout_keep_alive" not in Path(superlink.__file__).read_text()
    closes_after = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    conf = render(listen="1", upstream="u:2", cert="c", key="k", ca="a", workdir="/w")
    upstream = conf.split("upstream superlink {")[1].split("}")[0]
    idle = int(re.search(r"keepalive_timeout (\d+)s;", upstream)[1])
    age = int(re.search(r"keepalive_time (\d+)s;", upstream)[1])
    assert idle + age < closes_after


def test_the_docker_config_is_rendered_from_the_same_template():
    from deploy.perimeter import DOCKER_CONF, docker_config

    assert DOCKER_CONF.read_text() == docker_config()


def _outsider_home(d: Deployment, root: Path) -> dict[str, str]:
    """FLWR_HOME of a SuperNode host: ca.crt only, a connection to the proxy's address."""
    home = root / "outsider-home"
    home.mkdir()
    (root / "ca.crt").write_bytes((d.certs / "ca.crt").read_bytes())
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{OUTSIDER}"\n\n[superlink.{OUTSIDER}]\n'
        f'address = "127.0.0.1:{d.proxy_port}"\nroot-certificates = "{root / "ca.crt"}"\n'
    )
    return {**d.env, "FLWR_HOME": str(home)}


def _refused(done: subprocess.CompletedProcess) -> str:
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "403" in out or "Forbidden" in out, out
    return out


def _https(d: Deployment, method: str, path: str, size: int = 0) -> int:
    context = ssl.create_default_context(cafile=str(d.certs / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", d.proxy_port, context=context, timeout=30)
    try:
        connection.request(
            method,
            path,
            body=bytes(size) if method == "POST" else None,
            headers={"content-type": "application/protobuf"},
        )
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.e2e
def test_supernodes_train_through_the_perimeter_which_refuses_everything_else(nginx, tmp_path):
    d = Deployment(
        tmp_path / "deploy",
        tls=True,
        auth=True,
        perimeter=True,
        warm=True,
        base_port=free_port_block(low=20000, high=30000),
    )
    app = app_copy(tmp_path / "app")
    results = tmp_path / "results"
    try:
        d.start_superlink()
        assert d.proxy is not None and d.proxy.process.poll() is None
        for i in range(NODES):
            d.start_supernode(i, NODES)
        run_id = d.submit(f"{JOB} output-dir='{results}' run-name='job'", app)
        waiter: dict = {}
        thread = threading.Thread(target=lambda: waiter.update(d.wait_for_runs([run_id], 600)))
        thread.start()

        # meanwhile, a SuperNode host: ca.crt and its own key, registered by the operator
        outside = tmp_path / "outsider"
        own = make_node_key(outside, "own")
        d._flwr("supernode", "register", f"{own}.pub", "deploy")
        other = make_node_key(outside, "other")
        env = _outsider_home(d, outside)

        def flwr(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [str(BIN / "flwr"), *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=PROJECT,
                timeout=120,
            )

        _refused(flwr("supernode", "register", f"{other}.pub", OUTSIDER))
        _refused(flwr("list", OUTSIDER))
        _refused(flwr("run", str(app), OUTSIDER, "--run-config", "num-server-rounds=1"))
        for path in (
            "/v1/control/list-runs",
            "/v1/control/register-node",
            "/v1/control/start-run",
            "/v1/control/stream-logs",
            "/v1/runtime/get-nodes",
            "/v1/runtime/pull-messages",
            "/v1/fleet/register-node",
            "/health",
            "/docs",
            "/v1/fleet/pull-messages/../../control/list-runs",
        ):
            assert _https(d, "POST", path) == 403, path
        assert _https(d, "GET", "/v1/fleet/pull-messages") == 403
        assert _https(d, "GET", "/v1/control/list-runs") == 403
        # bodies over their bound are refused before the SuperLink reads them
        assert _https(d, "POST", "/v1/fleet/push-object", MAX_OBJECT_BYTES + 1) == 413
        assert _https(d, "POST", "/v1/fleet/push-messages", MAX_CALL_BYTES + 1) == 413

        thread.join(600)
        assert waiter == {run_id: "finished:completed"}
        # the operator, on the SuperLink's own (loopback) port, still sees and controls it all
        listed = json.loads(d._flwr("list", "deploy", "--format", "json").stdout)["runs"]
        assert [r["status"] for r in listed] == ["finished:completed"]  # the outsider's: none
        nodes = json.loads(d._flwr("supernode", "list", "deploy", "--format", "json").stdout)
        assert len(nodes["nodes"]) == NODES + 1  # the two and the outsider's own key, no other
    finally:
        d.stop()
    assert d.proxy.process.poll() is not None  # nginx stopped by PID
    rows = json.loads((results / "job" / "metrics.json").read_text())["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(r["failures"] == 0 and r["participants"] == NODES for r in rows[1:])
    # the SuperNodes' Fleet calls went through the proxy, signed headers and all
    access = (d.workdir / "perimeter" / "access.log").read_text()
    for path in (
        "activate-node",
        "pull-messages",
        "push-messages",
        "get-fab",
        "pull-object",
        "push-object",
        "send-node-heartbeat",
    ):
        assert re.search(rf'"POST /v1/fleet/{path} HTTP/1.1" 200 ', access), path
    assert not re.search(r'"POST /v1/fleet/[a-z-]+ HTTP/1.1" 401 ', access)  # auth never failed


@pytest.mark.e2e
def test_perimeter_runs_nginx_as_its_own_process_and_stops_it_by_pid(nginx, tmp_path):
    make_certificates(tmp_path / "certs", [])
    certs = tmp_path / "certs"
    port = free_port_block(size=2)

    def perimeter(name: str, listen_port: int, cert: Path = certs / "server.pem") -> Perimeter:
        return Perimeter(
            listen=f"127.0.0.1:{listen_port}",
            upstream=f"127.0.0.1:{port + 1}",
            cert=cert,
            key=certs / "server.key",
            ca=certs / "ca.crt",
            workdir=tmp_path / name,
        )

    good = perimeter("good", port)
    process = good.start()
    try:
        assert int((tmp_path / "good" / "nginx.pid").read_text()) == process.pid
        assert (tmp_path / "good" / "tmp").stat().st_mode & 0o777 == 0o700
        busy = perimeter("busy", port)  # the port is taken: nginx exits, start says so
        with pytest.raises(RuntimeError, match="nginx exited"):
            busy.start()
    finally:
        good.stop()
    assert process.poll() is not None
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free again
    bad = perimeter("bad", port, cert=tmp_path / "missing.pem")
    with pytest.raises(RuntimeError, match="nginx -t failed"):
        bad.start()
    assert bad.process is None


def test_a_perimeter_without_a_work_folder_gets_a_new_one():
    a = Perimeter(listen="1", upstream="u:2", cert=Path("c"), key=Path("k"), ca=Path("a"))
    b = Perimeter(listen="1", upstream="u:2", cert=Path("c"), key=Path("k"), ca=Path("a"))
    try:
        assert a.workdir != b.workdir and a.workdir.stat().st_mode & 0o777 == 0o700
    finally:
        a.workdir.rmdir()
        b.workdir.rmdir()


def test_the_perimeter_needs_tls():
    with pytest.raises(ValueError, match="needs tls"):
        Deployment(Path("/nonexistent-never-made"), perimeter=True)


@pytest.mark.skipif(
    os.environ.get("FL_NETNS") != "1" or os.geteuid() != 0,
    reason="opt-in: set FL_NETNS=1 and run as root (creates network namespaces)",
)
@pytest.mark.e2e
def test_supernodes_in_their_own_namespaces_reach_only_the_perimeter(nginx, tmp_path):
    """Separate hosts on one machine (deploy.netns): the SuperLink listens on its namespace's
    loopback, nginx on every address of that namespace; each SuperNode, in a namespace of its
    own, reaches the perimeter's port over its link and not the SuperLink's."""
    from deploy.netns import Star

    star = Star(f"flp{os.getpid() % 1000}", NODES)
    d = Deployment(
        tmp_path, tls=True, auth=True, perimeter=True, star=star, base_port=free_port_block()
    )
    results = tmp_path / "results"
    try:
        star.create()
        d.start_superlink()
        for i in range(NODES):
            for port, reachable in ((d.base_port, False), (d.proxy_port, True)):
                probe = [
                    *star.exec_prefix(star.node(i)),
                    "python3",
                    "-c",
                    "import socket, sys; s = socket.socket(); s.settimeout(3); "
                    f"sys.exit(s.connect_ex(('{star.link_address(i)}', {port})))",
                ]
                assert (subprocess.run(probe, capture_output=True).returncode == 0) == reachable
            d.start_supernode(i, NODES)
        done = d.flwr_run(f"{JOB} output-dir='{results}' run-name='job'")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        d.stop()
        star.delete()
    rows = json.loads((results / "job" / "metrics.json").read_text())["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2]
