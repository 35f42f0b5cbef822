"""The server's half of a relay's group key (FFGB with ``relay-encryption``): every node of the
federation is to hold one key that the server never learns, under which the nodes seal what the
server relays (``functions.learner_sealing``).

The nodes' sealing keys come from the secure sums' setup stage (``SecureAggregator.set_up``). The
first time, one node makes the group key and wraps it to every node's sealing key (the ``group``
stage, ``client_app.group_key``); later, a node whose sealing key has no wrap (it joined, or came
back with new keys) gets one from a node that holds the key. The server keeps the wraps, by
sealing key, and hands each node its own in every message. It never makes a second key once
anything is sealed under the first: if no node can wrap it any more (every node has new keys, as
after a resumed simulation), the run stops in one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import INFO

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.secagg_crypto import MAX_WRAP_BYTES
from functions.secure_sum import (
    CREATE,
    GROUP,
    OWN_KEY,
    RECIPIENT_KEYS,
    SECAGG,
    WRAP,
    WRAP_FROM,
    WRAPS,
)
from strategies.screening import exact_records, screen_replies
from strategies.secure_sum import SecureAggregator
from tasks.errors import ConfigError


class GroupKey:
    """The nodes' sealing keys and the group key's wrap for each (see the module docstring)."""

    def __init__(self, label: str, seed: int) -> None:
        self.label = label
        self.aggregator = SecureAggregator(label, seed)
        self.wraps: dict[bytes, tuple[bytes, bytes]] = {}  # sealing key -> (wrapper's, token)
        self._failures = 0  # replies of the setup and group stages dropped as malformed

    def forget(self, node: int) -> None:
        """``node`` may have lost its state: its sealing key is asked again (an unchanged key
        keeps its wrap)."""
        self.aggregator.forget(node)

    def holds(self, node: int) -> bool:
        """Whether ``node`` has a wrap of the group key for its current sealing key."""
        return self.aggregator.sealing.get(node) in self.wraps

    def record(self, node: int) -> ConfigRecord:
        """What a message to ``node`` carries: its wrap and the wrapper's sealing key."""
        source, wrap = self.wraps[self.aggregator.sealing[node]]
        return ConfigRecord({WRAP_FROM: source, WRAP: wrap})

    def set_up(
        self,
        grid: Grid,
        server_round: int,
        nodes: Sequence[int],
        members: Sequence[int],
        may_create: bool,
    ) -> tuple[list[int], int]:
        """Sealing keys for the ``nodes`` of the round that have none, then a wrap for each
        that lacks one, from a node of the federation (``members``) that holds the key (or,
        with ``may_create``, when nothing is sealed yet and no node holds a key, made by one of
        ``nodes``). Returns the nodes that hold a wrap and how many replies were dropped as
        malformed; ConfigError if no node of the federation holds one once something is
        sealed."""
        self._failures = self.aggregator.set_up(grid, server_round, nodes)
        sealing = self.aggregator.sealing
        keyed = [n for n in nodes if n in sealing]
        lacking = [n for n in keyed if not self.holds(n)]
        holders = [m for m in members if self.holds(m)]
        if lacking and not holders and may_create:
            self.wraps.clear()
            for maker in keyed:  # one at a time: the first that answers makes the key
                if self._ask(grid, server_round, [maker], keyed, create=True):
                    log(INFO, "%s: node %s made the relay's group key", self.label, maker)
                    break
        elif lacking:  # a holder wraps it; without one, a node may still hold it (a resume)
            candidates = holders or [m for m in members if m in sealing]
            first = candidates[:1]
            if not self._ask(grid, server_round, first, lacking) and candidates[1:]:
                self._ask(grid, server_round, candidates[1:], lacking)
        ready = [n for n in nodes if self.holds(n)]
        if not may_create and not any(self.holds(m) for m in members):
            raise ConfigError(
                "relay-encryption: no node holds the group key the ensemble's learners are "
                "sealed under (every node has new keys, as after a resumed simulation); the "
                "sealed ensemble cannot be opened: start the run afresh"
            )
        return ready, self._failures

    def _ask(
        self,
        grid: Grid,
        server_round: int,
        asked: Sequence[int],
        recipients: Sequence[int],
        create: bool = False,
    ) -> bool:
        """Ask each of ``asked`` to wrap the group key (made afresh with ``create``) to the
        sealing keys of ``recipients``; the first good reply in ``asked`` order is kept.
        Returns whether one was."""
        sealing = self.aggregator.sealing
        keys = [sealing[n] for n in recipients]
        messages = []
        for node in asked:
            request = ConfigRecord({OWN_KEY: sealing[node], RECIPIENT_KEYS: keys, CREATE: create})
            if not create and self.holds(node):
                request[WRAP_FROM], request[WRAP] = self.wraps[sealing[node]]
            messages.append(
                Message(RecordDict({SECAGG: request}), node, GROUP, group_id=str(server_round))
            )

        def decode(reply: Message) -> list[bytes]:
            wraps = exact_records(reply.content, {SECAGG: ConfigRecord})[SECAGG].get(WRAPS)
            if (
                not isinstance(wraps, list)
                or len(wraps) != len(keys)
                or any(not isinstance(w, bytes) or not 0 < len(w) <= MAX_WRAP_BYTES for w in wraps)
            ):
                raise DecodeError(
                    f"group: expected {len(keys)} wraps of at most {MAX_WRAP_BYTES} bytes"
                )
            return wraps

        screened = screen_replies(
            self.label, server_round, grid.send_and_receive(messages), decode, asked
        )
        self._failures += screened.rejected
        for node, wraps in screened.in_order(asked).items():
            self.wraps.update(
                {key: (sealing[node], wrap) for key, wrap in zip(keys, wraps, strict=True)}
            )
            return True
        return False
