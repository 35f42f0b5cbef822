"""Loopback ports for a deployment's processes: a block of free ones below the kernel's ephemeral
range, so a port the deployment chose is not handed to an outgoing connection meanwhile.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where /proc does not say)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(size: int = 40, low: int = 20000, high: int = 30000) -> int:
    """A base port whose next ``size`` ports are free on 127.0.0.1, below the kernel's
    ephemeral range (so no outgoing connection takes one meanwhile: ``high`` is lowered to
    its start; a SuperNode once lost its port to one)."""
    high = min(high, ephemeral_low())
    if high - size <= low:
        raise RuntimeError(f"no room for {size} ports in [{low}, {high}) below the ephemeral range")
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(low, high - size)
        sockets = []
        try:
            for port in range(base, base + size):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no block of {size} free ports in [{low}, {high})")
