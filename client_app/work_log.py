"""An opt-in log of the messages a node answers, for benchmarks: how long each took in the
ClientApp and how much CPU it used, how much of both was the family's own work, and how big the
node's state was. The CPU seconds are the node's work where nodes share cores (a deployment of
many SuperNodes on one machine), whose wall seconds also count the waits for a core.

Set ``FL_NODE_WORK_LOG`` to a file path and every ClientApp process that inherits it appends
one JSON line per message (``O_APPEND``: whole lines from concurrent processes). The rest of a
message's time (Flower's runtime, the engine's transport, waiting) is what the server waits for
beyond it: ``benchmarks.hist_time`` splits a round so. Unset (the default), nothing is written.
The file stays on the node's own machine and holds timings and sizes only, no data.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from flwr.app import Context, Message

from functions.records import payload_bytes

ENV = "FL_NODE_WORK_LOG"
_current = threading.local()  # the message being answered on this thread: its work seconds


def _clocks() -> tuple[float, float]:
    """Wall and CPU (this process's) seconds, from arbitrary origins."""
    return time.perf_counter(), time.process_time()


@contextmanager
def logged(message: Message, context: Context) -> Iterator[None]:
    """Time answering ``message`` (everything inside the block) and append its line."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    _current.work = _current.work_cpu = 0.0
    wall, cpu = _clocks()
    try:
        yield
    finally:
        now_wall, now_cpu = _clocks()
        line = {
            "run": message.metadata.run_id,
            "node": message.metadata.dst_node_id,
            "round": message.metadata.group_id,
            "type": message.metadata.message_type,
            "seconds": now_wall - wall,
            "cpu_seconds": now_cpu - cpu,
            "work_seconds": _current.work,
            "work_cpu_seconds": _current.work_cpu,
            "state_bytes": payload_bytes(context.state),
        }
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


def work() -> AbstractContextManager[None]:
    """Count the block as the family's own work of the message being logged, if any."""
    return _counted(1.0)


def aside() -> AbstractContextManager[None]:
    """Leave the block out of the family's own work that encloses it (the node's data, read
    on first use within the family's procedure, is the ClientApp's part)."""
    return _counted(-1.0)


@contextmanager
def _counted(sign: float) -> Iterator[None]:
    """Add the block's wall and CPU seconds, times ``sign``, to the message's work."""
    wall, cpu = _clocks()
    try:
        yield
    finally:
        if hasattr(_current, "work"):
            now_wall, now_cpu = _clocks()
            _current.work += sign * (now_wall - wall)
            _current.work_cpu += sign * (now_cpu - cpu)


def read(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """The lines of a work log (none when it does not exist)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
