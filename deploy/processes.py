"""The processes a deployment starts, watched: a command run to its end (its output kept for the
error), a process that exited unasked (``ProcessExited``, with its log's last lines), and a log
followed line by line without blocking on it (Flower's colour codes and level prefixes taken out).
"""

from __future__ import annotations

import queue
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")

LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR) *: *")  # Flower's level prefix


def run_checked(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a set-up command; its output in the error if it fails."""
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done


class ProcessExited(RuntimeError):
    """A process of the deployment exited while a run was under way."""


def log_tail(path: Path, lines: int = 3) -> list[str]:
    """The last ``lines`` non-empty lines of a log, colour codes stripped."""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        return [f"unreadable: {err}"]
    return [ANSI.sub("", line).strip() for line in text.splitlines() if line.strip()][-lines:]


def pipe_lines(stream: subprocess.Popen, lines: queue.Queue[str | None]) -> None:
    """Each line ``stream`` prints into ``lines``, then None."""
    for line in stream.stdout:
        lines.put(line)
    lines.put(None)


def next_line(lines: queue.Queue[str | None], check: Callable[[], None]) -> str | None:
    """The next line (None at the end), calling ``check`` every second while none comes."""
    while True:
        try:
            return lines.get(timeout=1.0)
        except queue.Empty:
            check()
