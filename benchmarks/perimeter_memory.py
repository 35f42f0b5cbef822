"""The SuperLink's memory under unauthenticated 64 MiB Fleet bodies sent through the perimeter,
with the perimeter's body bound at Flower's message limit (2 GiB - 1 byte, what it forwarded
before) and at its default ``max_object_bytes`` (16 MiB), side by side in one run.

Each way: a SuperLink with TLS and SuperNode authentication behind ``deploy.perimeter``
(``deploy.deployment.Deployment(perimeter=True)``, no SuperNode), its resident memory once idle,
then ``--bodies`` POSTs of ``--mib`` MiB of zeros to ``/v1/fleet/push-object`` through the
perimeter, with none of Flower's signed headers (what anyone who reaches the port can send), and
the SuperLink's peak resident memory (``VmHWM``) after them.

    python -m benchmarks.perimeter_memory      # about 1 min

Writes ``results/perimeter_memory.md`` and ``results/perimeter_memory.json``.
"""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, md_table, parser, write_report

MIB = 2**20


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``pid``, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def post(port: int, ca: Path, size: int) -> int:
    """POST ``size`` zero bytes to push-object through the perimeter; the status (0: the
    connection was closed first)."""
    context = ssl.create_default_context(cafile=str(ca))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=120)
    try:
        connection.request(
            "POST",
            "/v1/fleet/push-object",
            body=bytes(size),
            headers={"content-type": "application/protobuf"},
        )
        return connection.getresponse().status
    except (ConnectionError, http.client.HTTPException, OSError):
        return 0
    finally:
        connection.close()


def measure(bound: int, mib: int, bodies: int, workdir: Path) -> dict:
    from deploy.deployment import Deployment
    from deploy.ports import free_port_block

    d = Deployment(
        workdir,
        tls=True,
        auth=True,
        perimeter=True,
        base_port=free_port_block(),
        max_object_bytes=bound,
    )
    try:
        d.start_superlink()
        time.sleep(3)
        pid = d.processes["superlink"].pid
        idle = memory_kib(pid)
        statuses = [post(d.proxy_port, d.certs / "ca.crt", mib * MIB) for _ in range(bodies)]
        time.sleep(1)
        after = memory_kib(pid)
    finally:
        d.stop()
    return {
        "bound_bytes": bound,
        "statuses": statuses,
        "idle_rss_mib": idle["VmRSS"] / 1024,
        "peak_after_mib": after["VmHWM"] / 1024,
        "rise_mib": (after["VmHWM"] - idle["VmRSS"]) / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    from deploy.perimeter import MAX_MESSAGE_BYTES, MAX_OBJECT_BYTES

    p = parser(__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--bodies", type=int, default=2)
    args = p.parse_args(argv)
    start = time.monotonic()
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, bound in (("flower-limit", MAX_MESSAGE_BYTES), ("bounded", MAX_OBJECT_BYTES)):
            measured[name] = measure(bound, args.mib, args.bodies, Path(tmp) / name)
            print(name, measured[name], flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "perimeter_memory.json").write_text(json.dumps(measured, indent=1))
    rows = [
        [
            name,
            f"{m['bound_bytes']:,}",
            ", ".join(str(s) for s in m["statuses"]),
            f"{m['idle_rss_mib']:.0f}",
            f"{m['peak_after_mib']:.0f}",
            f"{m['rise_mib']:+.0f}",
        ]
        for name, m in measured.items()
    ]
    table = md_table(
        [
            "perimeter",
            "push-object bound (bytes)",
            f"statuses of {args.bodies} x {args.mib} MiB",
            "SuperLink idle RSS MiB",
            "peak after MiB",
            "rise MiB",
        ],
        rows,
    )
    write_report(
        RESULTS / "perimeter_memory.md",
        "The SuperLink's memory under unauthenticated bodies through the perimeter",
        time.monotonic() - start,
        table,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
