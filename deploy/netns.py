"""Separate hosts on one machine: a network namespace for the SuperLink and one per SuperNode,
each SuperNode's linked to the SuperLink's by its own veth pair (a star of point-to-point links).

Node i reaches the SuperLink at 10.77.i.1 over the link 10.77.i.0/30; the namespaces share no
loopback, so the SuperNodes can only talk to the SuperLink over those links, as separate
machines would. ``impair`` gives one link a slow or lossy line (``tc netem``). Needs root
(``ip netns``, ``tc``); everything is created and deleted by this object.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

SUBNET = "10.77"
TC = shutil.which("tc") or "/usr/sbin/tc"  # iproute2's; sbin is often not on a user's PATH
NETEM = "delay 50ms 10ms loss 1%"  # a long-distance line that drops a packet in a hundred
FALLBACK_RATE = "rate 2mbit burst 32kbit latency 400ms"  # a slow line, where netem is missing
LOSS = re.compile(r"loss (?:random )?([\d.]+)%")


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

    def ends(self, index: int) -> tuple[str, str]:
        """Node ``index``'s veth pair: its end in the SuperLink's namespace, its end in its own."""
        return f"{self.prefix[:6]}{index}a", f"{self.prefix[:6]}{index}b"

    def impair(self, index: int, netem: str = NETEM) -> str:
        """Node ``index``'s link made slow and lossy both ways, on each end of its veth pair (in
        the node's namespace and the SuperLink's; gone with the namespaces); what was applied.
        ``tc qdisc add dev <end> root netem <netem>`` where the kernel has netem; else (a kernel
        built without ``sch_netem``) what it has: a rate limit (``tc`` ``tbf``, ``FALLBACK_RATE``,
        whose queue is the added delay) and random loss (``iptables`` ``statistic``, the loss
        that ``netem`` names)."""
        link_end, node_end = self.ends(index)
        ends = ((self.node(index), node_end), (self.link, link_end))
        try:
            for namespace, device in ends:
                self._tc(namespace, device, "netem", *netem.split())
            return f"netem {netem}"
        except subprocess.CalledProcessError as err:
            if "unknown" not in err.stderr:
                raise
        loss = LOSS.search(netem)
        for namespace, device in ends:
            self._tc(namespace, device, "tbf", *FALLBACK_RATE.split())
            if loss:
                share = str(float(loss.group(1)) / 100)
                for chain, side in (("INPUT", "-i"), ("OUTPUT", "-o")):
                    subprocess.run(
                        [*self.exec_prefix(namespace), "iptables", "-A", chain, side, device]
                        + ["-m", "statistic", "--mode", "random", "--probability", share]
                        + ["-j", "DROP"],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
        lost = f", loss {loss.group(1)}% each way (iptables)" if loss else ""
        return f"no netem in this kernel: tbf {FALLBACK_RATE}{lost}"

    def _tc(self, namespace: str, device: str, *qdisc: str) -> None:
        subprocess.run(
            [*self.exec_prefix(namespace), TC, "qdisc", "add", "dev", device, "root", *qdisc],
            check=True,
            capture_output=True,
            text=True,
        )

    def create(self) -> None:
        for namespace in [self.link, *(self.node(i) for i in range(self.nodes))]:
            _ip("netns", "add", namespace)
            self.created.append(namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        for i in range(self.nodes):
            a, b = self.ends(i)
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
