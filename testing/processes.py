"""A deployment's processes as the kernel sees them (/proc): the ServerApp processes a
``Deployment``'s warm SuperExec forked, which the tests and the soak harness kill as a crashed
ServerApp."""

from __future__ import annotations

import time
from pathlib import Path

from deploy.deployment import Deployment


def children(pid: int) -> set[int]:
    """Live (not zombie) child processes of ``pid``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()  # state, ppid, ...
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.add(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def server_apps(deployment: Deployment) -> set[int]:
    """The ServerApp processes: forked by the warm SuperExec, a child of the SuperLink."""
    link = deployment.processes["superlink"].pid
    superexecs = [p for p in children(link) if "deploy.warm_superexec" in cmdline(p)]
    if len(superexecs) != 1:
        raise RuntimeError(f"not one warm SuperExec under the SuperLink: {superexecs}")
    return children(superexecs[0])


def new_server_app(deployment: Deployment, before: set[int], timeout: float = 120) -> int:
    """The ServerApp process that is not in ``before``, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = server_apps(deployment) - before
        if new:
            (pid,) = new
            return pid
        time.sleep(0.1)
    raise TimeoutError(f"no new ServerApp process after {timeout} s")
