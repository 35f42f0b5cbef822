"""A perimeter for a SuperLink whose SuperNodes are on other machines: Debian's nginx as a
TLS-terminating reverse proxy that lets through the Fleet API calls a SuperNode makes, and
nothing else.

Why: flwr 1.41's SuperLink serves its Fleet API (SuperNodes), Control API (``flwr run``,
``flwr list``, ``flwr log``, ``flwr supernode register``: the operator's) and Runtime API
(ServerApp SuperExec) on one HTTP port (``--host``/``--port``; ``superlink/main.py`` includes
all three routers in one FastAPI app, and the old ``--fleet-api-address`` /
``--control-api-address`` options are deprecated no-ops for the HTTP APIs). A SuperNode host
that can reach that port with ``ca.crt`` could call the Control API like the operator (SuperNode
authentication signs Fleet calls only; the Control API has no account check unless Flower's
enterprise plugins are installed): register more keys, list runs, read logs, submit a FAB, which
runs code on the SuperLink and on every SuperNode.

So the SuperLink listens on its loopback address (the operator's ``flwr`` and the ServerApp
SuperExec use it there, or through an SSH tunnel), and this proxy, on the address the SuperNodes
reach, presents the SuperLink's own certificate and forwards only ``POST`` to the Fleet paths
that ``flower-supernode`` 1.41 calls (``flwr/supernode/fleet_http_client.py``; with SuperNode
authentication a node never calls ``register-node`` / ``unregister-node``, which the SuperLink
refuses then anyway) to the SuperLink over TLS again (the SuperLink serves one scheme on its one
port, TLS for the operator, so the proxy re-encrypts and verifies it against ``ca.crt``). Every
other path or method gets 403. The signed headers of SuperNode authentication
(``flwr-public-key``, ``flwr-signature``, ``flwr-timestamp``) and Flower's version headers
(``flwr-package-name``, ...) have hyphens, not underscores, so nginx forwards them unchanged with
its defaults. Bodies and replies are streamed (no buffering to disk).

Connections to the SuperLink: nginx keeps them open between calls, but briefly. The SuperLink's
HTTP server (uvicorn, whose keep-alive Flower leaves at its default of 5 s) starts its idle
timer when the reply is written into its buffer, not when the reply has left; a reply that a
slow SuperNode drains for longer than that (the FAB, to a SuperNode on a slow link) is closed
under nginx while nginx still streams it, and the closing TLS connection, reused for the next
call, answers nothing until asyncio's 30 s TLS shutdown timeout ends it (nginx: "upstream
prematurely closed connection", 502; the SuperNode retries): a round stalled by that long
(the soak's first round, benchmarks/README.md, case ``soak``). A connection is therefore reused
only within 2 s of its last reply (``keepalive_timeout``) and 2 s of its opening
(``keepalive_time``): the two together stay under the SuperLink's 5 s, and a reply that took
longer than 2 s to drain ends its connection.

What it forwards is bounded before the SuperLink reads it: the SuperLink parses a Fleet body
before it checks its signature, so an unauthenticated 64 MiB body cost it its size in memory and
more (243 MiB for two). A ``push-object`` body is one object of a message (one array, one
record: Flower splits a message into objects), at most ``max_object_bytes`` (default 16 MiB:
raise it for runs whose replies carry a bigger single array, such as ``fedxgb-cyclic``'s whole
booster near ``fedxgb.max-booster-bytes``); every other Fleet body at most ``MAX_CALL_BYTES``
(a message's header and object tree, a heartbeat, a pull); nginx answers 413 to a larger one
without forwarding it. Each source address may make ``rate`` Fleet calls a second, ``burst``
at once (a SuperNode pulling a message's objects makes tens at a time); beyond, 429.

``Perimeter`` writes the configuration into a unique work folder, runs nginx in the foreground
as its own process (``nginx -p <folder> -c <folder>/nginx.conf -g 'daemon off;'``, its pid file
and logs in that folder) and stops it by PID. ``render`` also makes ``docker/nginx/perimeter.conf``
(``python -m deploy.perimeter --docker``), so both come from one template.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# flwr/supernode/fleet_http_client.py: what an authenticated flower-supernode 1.41 calls, all POST
FLEET_PATHS = (
    "activate-node",
    "deactivate-node",
    "send-node-heartbeat",
    "pull-messages",
    "push-messages",
    "get-run",
    "get-fab",
    "push-object",
    "pull-object",
    "confirm-message-received",
)
# ... and a SuperNode without a key of its own (no SuperNode authentication) also these
SELF_REGISTERING_PATHS = ("register-node", "unregister-node")
# flwr.supercore.constant.MAX_PROTOBUF_STREAM_MESSAGE_LENGTH (2 GiB - 1 byte, protobuf's limit)
MAX_MESSAGE_BYTES = 2_147_483_647
MAX_OBJECT_BYTES = 16 * 2**20  # default bound of one push-object body (one object of a message)
MAX_CALL_BYTES = 4 * 2**20  # bound of every other Fleet body
RATE, BURST = 200, 400  # Fleet calls a second per source address, and at once
DOCKER_CONF = Path(__file__).resolve().parents[1] / "docker" / "nginx" / "perimeter.conf"

TEMPLATE = """\
# @HEADER@
# The Fleet API of a Flower 1.41 or 1.42 SuperLink, and nothing else, for SuperNodes on other
# machines (deploy/perimeter.py explains why and renders this file).
worker_processes 1;
pid @PID@;
error_log @ERROR_LOG@ warn;

events {
    worker_connections 1024;
}

http {
    access_log @ACCESS_LOG@;
    server_tokens off;
    # temporary files (unused while bodies and replies stream) in a folder of our own
    client_body_temp_path @TEMP@/body;
    proxy_temp_path @TEMP@/proxy;
    fastcgi_temp_path @TEMP@/fastcgi;
    uwsgi_temp_path @TEMP@/uwsgi;
    scgi_temp_path @TEMP@/scgi;

    # Fleet calls per source address (limit_req below)
    limit_req_zone $binary_remote_addr zone=fleet:10m rate=@RATE@r/s;
    limit_req_status 429;

    upstream superlink {
        server @UPSTREAM@;  # the SuperLink's own listener (loopback)
        keepalive 16;
        # reused only within 2 s idle and 2 s of age, under the SuperLink's own 5 s keep-alive
        # (deploy/perimeter.py, "Connections to the SuperLink", says why)
        keepalive_timeout 2s;
        keepalive_time 2s;
    }

    server {
        listen @LISTEN@ ssl;
        ssl_certificate @CERT@;  # the SuperLink's certificate: SuperNodes verify it with ca.crt
        ssl_certificate_key @KEY@;
        ssl_protocols TLSv1.2 TLSv1.3;

        # a body larger than its location's bound gets 413 before anything is forwarded;
        # bodies and replies stream both ways, never spooled to disk
        client_max_body_size @MAX_CALL@;
        client_body_buffer_size 1m;
        proxy_request_buffering off;
        proxy_buffering off;
        client_body_timeout 300s;
        send_timeout 300s;
        proxy_connect_timeout 10s;
        proxy_send_timeout 300s;
        proxy_read_timeout 300s;
        keepalive_timeout 75s;
        # Flower's headers (flwr-public-key, flwr-signature, flwr-timestamp, flwr-package-*) have
        # hyphens: passed on as they are (headers with underscores are dropped, nginx's default)

        # one object of a message (an array, a record)
        location = /v1/fleet/push-object {
            client_max_body_size @MAX_OBJECT@;
@FORWARD@
        }

        location ~ ^/v1/fleet/(@PATHS@)$ {
@FORWARD@
        }

        # the Control API (/v1/control/...), the Runtime API (/v1/runtime/...), /health, /docs,
        # any other Fleet path: refused
        location / {
            return 403;
        }
    }
}
"""


FORWARD = """\
            limit_except POST {
                deny all;
            }
            limit_req zone=fleet burst=@BURST@ nodelay;
            proxy_pass https://superlink$uri;  # the matched path only, no query string
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate @CA@;
            proxy_ssl_name @UPSTREAM_NAME@;
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;"""


def render(
    *,
    listen: str,
    upstream: str,
    cert: str,
    key: str,
    ca: str,
    workdir: str,
    upstream_name: str = "localhost",
    auth: bool = True,
    error_log: str | None = None,
    access_log: str | None = None,
    temp: str | None = None,
    header: str = "written by deploy/perimeter.py",
    max_object_bytes: int = MAX_OBJECT_BYTES,
    rate: int = RATE,
    burst: int = BURST,
) -> str:
    """The nginx configuration: TLS on ``listen`` (``[address:]port``) with ``cert``/``key``,
    the Fleet paths forwarded over TLS to ``upstream`` (``address:port``, verified with ``ca``
    as ``upstream_name``); pid file, logs and temporary folders (in ``temp``, an existing
    folder, default ``workdir/tmp``) in ``workdir``."""
    paths = FLEET_PATHS if auth else (*FLEET_PATHS, *SELF_REGISTERING_PATHS)
    paths = tuple(p for p in paths if p != "push-object")  # its own location, its own bound
    values = {
        "FORWARD": FORWARD,
        "HEADER": header,
        "LISTEN": listen,
        "UPSTREAM": upstream,
        "CERT": cert,
        "KEY": key,
        "CA": ca,
        "UPSTREAM_NAME": upstream_name,
        "PATHS": "|".join(paths),
        "MAX_CALL": str(MAX_CALL_BYTES),
        "MAX_OBJECT": str(max_object_bytes),
        "RATE": str(rate),
        "BURST": str(burst),
        "PID": f"{workdir}/nginx.pid",
        "TEMP": temp or f"{workdir}/tmp",
        "ERROR_LOG": error_log or f"{workdir}/error.log",
        "ACCESS_LOG": access_log or f"{workdir}/access.log",
    }
    text = TEMPLATE
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    return text


def nginx_binary() -> str | None:
    """``FL_NGINX``, else nginx on PATH or in /usr/sbin (Debian's, not on a user's PATH)."""
    found = os.environ.get("FL_NGINX") or shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").exists():
        found = "/usr/sbin/nginx"
    return found


@dataclass
class Perimeter:
    """nginx on ``listen`` in front of the SuperLink at ``upstream``, started and stopped by
    this object. ``exec_prefix``: a command to run it in (a network namespace)."""

    listen: str
    upstream: str
    cert: Path
    key: Path
    ca: Path
    auth: bool = True
    upstream_name: str = "localhost"
    workdir: Path | None = None  # default: a new folder (tempfile.mkdtemp)
    exec_prefix: list[str] = field(default_factory=list)
    max_object_bytes: int = MAX_OBJECT_BYTES  # the largest push-object body forwarded
    process: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="flower-perimeter-"))
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.conf = self.workdir / "nginx.conf"

    def write_config(self) -> Path:
        (self.workdir / "tmp").mkdir(mode=0o700, exist_ok=True)
        self.conf.write_text(
            render(
                listen=self.listen,
                upstream=self.upstream,
                cert=str(self.cert),
                key=str(self.key),
                ca=str(self.ca),
                workdir=str(self.workdir),
                upstream_name=self.upstream_name,
                auth=self.auth,
                max_object_bytes=self.max_object_bytes,
            )
        )
        return self.conf

    def _command(self, *extra: str) -> list[str]:
        nginx = nginx_binary()
        if nginx is None:
            raise FileNotFoundError("nginx not found (Debian: apt-get install -y nginx)")
        return [
            *self.exec_prefix,
            nginx,
            "-p",
            f"{self.workdir}/",
            "-e",
            str(self.workdir / "error.log"),
            "-c",
            str(self.conf),
            *extra,
        ]

    def check(self) -> None:
        """``nginx -t``: the configuration parses and its files load."""
        self.write_config()
        done = subprocess.run(self._command("-t", "-q"), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nginx -t failed:\n{done.stdout}{done.stderr}")

    def start(self, timeout: float = 20.0) -> subprocess.Popen:
        """Write the configuration, start nginx in the foreground (its own process group) and
        wait until it has written its pid file and accepts connections on the listening port."""
        self.check()
        pid_file = self.workdir / "nginx.pid"
        pid_file.unlink(missing_ok=True)
        with open(self.workdir / "nginx.out", "w") as log:
            self.process = subprocess.Popen(
                self._command("-g", "daemon off;"),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        host, port = (
            self.listen.rsplit(":", 1) if ":" in self.listen else ("127.0.0.1", self.listen)
        )
        probe = [
            *self.exec_prefix,
            sys.executable,
            "-c",
            "import socket, sys; sys.exit(socket.socket().connect_ex("
            f"({(host if host not in ('0.0.0.0', '*') else '127.0.0.1')!r}, {port})))",
        ]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"nginx exited ({self.process.returncode}): "
                    f"{(self.workdir / 'error.log').read_text()[-2000:]}"
                )
            # nginx writes its pid file once its sockets are bound (not someone else's port)
            if pid_file.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
                return self.process
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"nginx not listening on {self.listen} after {timeout} s")

    def stop(self) -> None:
        """SIGQUIT (graceful), then SIGTERM, then SIGKILL nginx's process group, by PID."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGQUIT, 5.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


def main(argv: list[str] | None = None) -> int:
    """``--docker``: rewrite docker/nginx/perimeter.conf. Otherwise write the configuration for
    ``--listen`` / ``--upstream`` / ``--certs`` into ``--workdir``, check it (``nginx -t``) and
    become nginx in the foreground (exec: the PID stays), for a service manager or a terminal."""
    args = parse_args(argv)
    if args.docker:
        DOCKER_CONF.parent.mkdir(parents=True, exist_ok=True)
        DOCKER_CONF.write_text(docker_config())
        return 0
    perimeter = _perimeter_of(args)
    perimeter.check()
    print(
        f"[perimeter] {perimeter.conf} checked; nginx on {args.listen} -> https://"
        f"{args.upstream} (Fleet API only); logs in {perimeter.workdir}",
        flush=True,
    )
    if args.check:
        return 0
    command = perimeter._command("-g", "daemon off;")
    os.execv(command[0], command)
    return 0  # not reached


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``main``: what to write (``--docker``, or the addresses,
    certificates, work folder and bounds of one perimeter) and whether to run it."""
    parser = argparse.ArgumentParser(
        description="nginx in front of a Flower 1.41 SuperLink: "
        "only the SuperNodes' Fleet API passes."
    )
    parser.add_argument(
        "--docker", action="store_true", help="(re)write docker/nginx/perimeter.conf and exit"
    )
    parser.add_argument(
        "--listen",
        default="0.0.0.0:9091",
        help="[address:]port the SuperNodes dial (default 0.0.0.0:9091)",
    )
    parser.add_argument(
        "--upstream",
        default="127.0.0.1:9092",
        help="the SuperLink's own --host:--port (default 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--certs",
        type=Path,
        default=Path("certs"),
        help="folder with ca.crt, server.pem, server.key (the SuperLink's)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="folder for nginx.conf, pid file, logs (default: a new one)",
    )
    parser.add_argument(
        "--upstream-name",
        default="localhost",
        help="a name in the SuperLink's certificate, verified on the upstream "
        "connection (default localhost: make_certificates and certs.sh "
        "put it in)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="SuperLink without --enable-supernode-auth: also forward "
        "register-node / unregister-node (nodes register themselves)",
    )
    parser.add_argument(
        "--max-object-bytes",
        type=int,
        default=MAX_OBJECT_BYTES,
        help="the largest push-object body forwarded: one object of a message, such as one "
        f"array (default {MAX_OBJECT_BYTES:,}; larger gets 413 before the SuperLink reads it)",
    )
    parser.add_argument("--check", action="store_true", help="write and check, do not run")
    return parser.parse_args(argv)


def _perimeter_of(args: argparse.Namespace) -> Perimeter:
    """The perimeter the command line describes: the SuperLink's certificate and key from
    ``--certs``, its paths resolved (nginx runs with its own prefix folder)."""
    certs = args.certs.resolve()
    return Perimeter(
        listen=args.listen,
        upstream=args.upstream,
        cert=certs / "server.pem",
        key=certs / "server.key",
        ca=certs / "ca.crt",
        auth=not args.no_auth,
        upstream_name=args.upstream_name,
        workdir=None if args.workdir is None else args.workdir.resolve(),
        max_object_bytes=args.max_object_bytes,
    )


def docker_config() -> str:
    """The configuration of docker/compose.perimeter.yml's ``perimeter`` service: every port,
    the SuperNodes' door 39405 on all addresses; the SuperLink at 127.0.0.1:39401 (host
    networking); the certificates where the overlay mounts them; its files under /tmp."""
    return render(
        listen="39405",
        upstream="127.0.0.1:39401",
        cert="/app/certs/server.pem",
        key="/app/certs/server.key",
        ca="/app/certs/ca.crt",
        workdir="/tmp",
        temp="/tmp",
        error_log="stderr",
        access_log="/dev/stdout",
        header="docker/compose.perimeter.yml; made by `python -m deploy.perimeter "
        "--docker` (do not edit by hand)",
    )


if __name__ == "__main__":
    sys.exit(main())
