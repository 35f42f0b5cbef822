"""Separate hosts on one machine: a network namespace for the SuperLink and one per SuperNode,
each SuperNode's linked to the SuperLink's by its own veth pair (a star of point-to-point links).

Node i reaches the SuperLink at 10.77.i.1 over the link 10.77.i.0/30; the namespaces share no
loopback, so the SuperNodes can only talk to the SuperLink over those links, as separate
machines would. Needs root (``ip netns``); everything is created and deleted by this object.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

SUBNET = "10.77"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Star:
    """The namespaces ``<prefix>-link`` and ``<prefix>-node<i>`` and their veth links."""

    prefix: str
    nodes: int
    created: list[str] = field(default_factory=list)

    @property
    def link(self) -> str:
        return f"{self.prefix}-link"

    def node(self, index: int) -> str:
        return f"{self.prefix}-node{index}"

    def link_address(self, index: int) -> str:
        """The SuperLink's address on node ``index``'s link."""
        return f"{SUBNET}.{index}.1"

    def link_addresses(self) -> list[str]:
        return [self.link_address(i) for i in range(self.nodes)]

    def exec_prefix(self, namespace: str) -> list[str]:
        return ["ip", "netns", "exec", namespace]

    def create(self) -> None:
        for namespace in [self.link, *(self.node(i) for i in range(self.nodes))]:
            _ip("netns", "add", namespace)
            self.created.append(namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        for i in range(self.nodes):
            a, b = f"{self.prefix[:6]}{i}a", f"{self.prefix[:6]}{i}b"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", self.link)
            _ip("link", "set", b, "netns", self.node(i))
            _ip("-n", self.link, "addr", "add", f"{SUBNET}.{i}.1/30", "dev", a)
            _ip("-n", self.node(i), "addr", "add", f"{SUBNET}.{i}.2/30", "dev", b)
            _ip("-n", self.link, "link", "set", a, "up")
            _ip("-n", self.node(i), "link", "set", b, "up")

    def delete(self) -> None:
        """Delete every namespace created (their veth ends go with them)."""
        for namespace in reversed(self.created):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self.created.clear()
