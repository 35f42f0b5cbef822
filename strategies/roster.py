"""The run's nodes in partition order: learned from a ``query.node`` round in round 1, and kept
up to date when a SuperNode comes back under a new node id.

Flower's node ids are random per run; every node's partition id comes from its node config, so
ordering by it makes sampling and aggregation order the same for the same seed on every engine.
Only a node whose answer is usable (and, with ``node-partitions``, agrees with its pin) enters
the roster: one whose answer is unusable or refused is left out of the run, logged and counted as
a failure of that round, and is not asked again under that node id (it never trains nor receives
anything). A partition is served by one node only: a second node that claims it is a
*claimant*, left out of the run (logged, not counted). Every node left out is kept with its
reason (``Roster.left_out``), and the partitions no node serves are known (``vacant``): the
run's health line names both.

Round 1 admits late nodes: while some partition of the federation has no node, every node that
connected after the first question is asked too, and while fewer nodes are connected than the
federation has partitions, the server waits up to ``join-timeout`` seconds for more (a site
started after ``min-nodes`` were there, a SuperNode restarted during round 1). Then the roster
is fixed for round 1; each family sets itself up on it (FedFW's sizes, the histogram sketches,
FedFun's graph). With sites' own data a node the schema agreement did not see is first vetted as
the agreement would have (``Admission.vet``: its file's facts against the agreed schema and the
other sites).

A restarted SuperNode gets a new node id. At the start of every later round ``refresh`` compares
Flower's connected node ids with the roster (no message when nothing changed): a new id is asked
``query.node`` once and becomes a claimant; a claimant whose partition's node is no longer
connected, and who declares the same facts, takes that node's place (same position in the order,
so sampling and aggregation stay as they were). The strategy then moves its per-node books to
the new id (``FederatedStrategy.rebind``), where the node counts as one that lost its state.

Sites come and go. A claimant for a partition no node of the run serves (never served, or
released) *joins*: it gets a new position at the end of the order (every other position stays),
and the strategy brings it up to date and lets it train from that round on
(``FederatedStrategy.on_join``). With ``leave-after`` = k > 0, a node of the run that is not
connected at the start of k rounds in a row *leaves for good*: its position stays as a
tombstone (id ``tombstone(position)``, negative, so a node id is never in two places) and its
partition is released; the family goes on without it (``FederatedStrategy.on_leave``). A node
that comes back for a released partition, under any id, joins again as a new node.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import TypeVar

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.protocol import NODE, NUM_PARTITIONS, PARTITION_ID, QUERY_NODE
from strategies.screening import exact_records, screen_replies
from tasks.devices import DEVICE_FACTS

Facts = dict[str, int | float | str]
V = TypeVar("V")
Vet = Callable[[Grid, list[int], int], tuple[dict[int, str], int]]


def none_refused(grid: Grid, node_ids: list[int], server_round: int) -> tuple[dict[int, str], int]:
    """The vetting of runs without an agreement: every node may be asked."""
    return {}, 0


@dataclass(frozen=True)
class Admission:
    """Who may enter the roster, and what ``query.node`` carries: ``pinned`` (node id -> the
    partition it alone may serve, from ``node-partitions``), ``left_out`` (node id -> why it is
    not admitted: a site refused by the schema agreement), ``question`` (the content of every
    ``query.node``: with sites' own data, the agreed schema), ``vet`` (called with the nodes
    about to be asked: the refused ones with the reason, and how many of them count as
    failures; with sites' own data, the agreement's check of nodes it did not see) and
    ``join_timeout`` (seconds round 1 waits for late nodes while partitions have none) and
    ``leave_after`` (rounds in a row a node may be away before it leaves the run; 0: never)."""

    pinned: Mapping[int, int] = field(default_factory=dict)
    left_out: Mapping[int, str] = field(default_factory=dict)
    question: Callable[[], RecordDict] = RecordDict
    vet: Vet = none_refused
    join_timeout: float = 0.0
    leave_after: int = 0


CLAIMANTS = "claimants"  # checkpoint keys: the claimants' ids, and their facts under claimant/
CLAIMANT_PREFIX = "claimant/"
LEFT_OUT_NODES, LEFT_OUT_REASONS = "left-out-nodes", "left-out-reasons"
ABSENT = ABSENT_NODES, ABSENT_ROUNDS = "absent-nodes", "absent-rounds"
MAX_PARTITIONS = 1_000_000  # a bound on a declared num-partitions (runs reach 1,000 nodes)
NO_ANSWER = f"no answer to {QUERY_NODE} within reply-timeout"


def place(facts: Facts) -> Facts:
    """The facts that make a node's place (its partition, a family's own facts), without those
    of the machine it runs on (its device: a node back on another machine takes its place)."""
    return {k: v for k, v in facts.items() if k not in DEVICE_FACTS}


def devices(facts: Facts) -> dict[str, str]:
    """A node's device facts as the run's record keeps them (text, at most 100 characters)."""
    return {k: str(facts[k])[:100] for k in DEVICE_FACTS if k in facts}


def _facts(reply: Message) -> Facts:
    """The node's ConfigRecord, with a valid partition id."""
    facts = dict(exact_records(reply.content, {NODE: ConfigRecord})[NODE])
    pid, total = facts.get(PARTITION_ID), facts.get(NUM_PARTITIONS)
    if type(pid) is not int or type(total) is not int or not 0 <= pid < total:
        raise DecodeError(
            f"{PARTITION_ID}={pid!r} is not an int in [0, {NUM_PARTITIONS}={total!r})"
        )
    if total > MAX_PARTITIONS:
        raise DecodeError(f"{NUM_PARTITIONS}={total} is above {MAX_PARTITIONS:,}")
    return facts


def _warn_left_out(label: str, server_round: int, node: int, reason: str) -> None:
    """The warning that ``node`` is left out of the run, and why (as both paths that leave
    a node out say it)."""
    log(WARNING, "%s round %d: node %s is left out: %s", label, server_round, node, reason)


def _ask(
    grid: Grid, label: str, server_round: int, node_ids: list[int], admission: Admission
) -> tuple[dict[int, Facts], int, dict[int, str]]:
    """``query.node`` to ``node_ids`` (but those ``admission`` leaves out or its vetting
    refuses): the usable answers that agree with the pins, how many replies were dropped or
    refused (error replies are counted by the metered grid), and why each other asked node has
    no usable answer."""
    for node in node_ids:
        if node in admission.left_out:
            _warn_left_out(label, server_round, node, admission.left_out[node])
    vetted, rejected = admission.vet(
        grid, [n for n in node_ids if n not in admission.left_out], server_round
    )
    questions = [
        Message(admission.question(), node, QUERY_NODE, group_id=str(server_round))
        for node in node_ids
        if node not in admission.left_out and node not in vetted
    ]
    screened = screen_replies(
        label, server_round, grid.send_and_receive(questions), _facts, node_ids
    )
    answers = screened.accepted
    refused = refuse_unpinned(label, server_round, answers, admission.pinned)
    for node in refused:
        del answers[node]
    unanswered = {
        m.metadata.dst_node_id: screened.reasons.get(m.metadata.dst_node_id, NO_ANSWER)
        for m in questions
        if m.metadata.dst_node_id not in answers and m.metadata.dst_node_id not in refused
    }
    for node, reason in unanswered.items():
        log(
            WARNING,
            "%s round %d: node %s gave no usable answer to %s; it is left out: %s",
            label,
            server_round,
            node,
            QUERY_NODE,
            reason,
        )
    unanswered.update(vetted)  # the vetting and the pins said why themselves
    unanswered.update(refused)
    return answers, rejected + screened.rejected + len(refused), unanswered


def partitions_named(partitions: list[int], shown: int = 10) -> str:
    """``partitions`` as a log or health line names them: the first ``shown``, and how many
    more (a federation may declare up to ``MAX_PARTITIONS``)."""
    listed = ", ".join(map(str, partitions[:shown]))
    more = len(partitions) - shown
    return listed + (f" and {more} more" if more > 0 else "")


def federation(facts: Iterable[Facts]) -> tuple[int, list[int]]:
    """The federation's size, the ``num-partitions`` most nodes declared (the smaller on a tie:
    one node cannot make a federation larger than the others say; 0 without nodes), and its
    partitions that none of ``facts``' nodes serves."""
    facts = list(facts)
    declared = Counter(int(f[NUM_PARTITIONS]) for f in facts)
    if not declared:
        return 0, []
    total = max(declared, key=lambda count: (declared[count], -count))
    served = {f[PARTITION_ID] for f in facts}
    return total, [p for p in range(total) if p not in served]


def _late_nodes(
    grid: Grid,
    label: str,
    server_round: int,
    admission: Admission,
    asked: set[int],
    answers: dict[int, Facts],
) -> tuple[list[int], dict[int, Facts], int, dict[int, str]]:
    """Round 1's wait for late nodes (see the module docstring): the node ids asked after the
    first question, their usable answers, how many were unusable or refused, and why the
    others have none."""
    deadline = time.monotonic() + admission.join_timeout
    late: list[int] = []
    found: dict[int, Facts] = {}
    rejected, reasons = 0, {}
    said = -1.0
    while True:
        total, vacant = federation([*answers.values(), *found.values()])
        connected = set(grid.get_node_ids())
        new = sorted(connected - asked)
        if vacant and new and (not late or time.monotonic() < deadline):  # bounded: new ids
            # may keep coming (without authentication anyone may connect)
            log(INFO, "%s round %d: asking the late nodes %s", label, server_round, new)
            usable, dropped, unusable = _ask(grid, label, server_round, new, admission)
            asked.update(new)
            late += new
            found.update(usable)
            rejected += dropped
            reasons.update(unusable)
            continue
        left = deadline - time.monotonic()
        if not vacant or len(connected) >= total or left <= 0:
            return late, found, rejected, reasons
        if said < 0 or said - left >= 10:
            said = left
            log(
                INFO,
                "%s round %d: %d of %d nodes connected, no node for partitions %s; waiting "
                "up to %.0f s more for late nodes (join-timeout)",
                label,
                server_round,
                len(connected),
                total,
                partitions_named(vacant),
                left,
            )
        time.sleep(min(1.0, left))


def refuse_unpinned(
    label: str, server_round: int, answers: dict[int, Facts], pinned: Mapping[int, int]
) -> dict[int, str]:
    """The nodes whose claim contradicts ``node-partitions`` (``pinned``: node id -> partition)
    with the reason, logged; none when nothing is pinned."""
    if not pinned:
        return {}
    refused = {}
    for node, facts in answers.items():
        if pinned.get(node) == facts[PARTITION_ID]:
            continue
        refused[node] = f"claims partition {facts[PARTITION_ID]}, but node-partitions " + (
            f"gives it partition {pinned[node]}" if node in pinned else "does not list it"
        )
        log(
            WARNING,
            "%s round %d: node %s %s; it is refused",
            label,
            server_round,
            node,
            refused[node],
        )
    return refused


def tombstone(position: int) -> int:
    """The id a released position keeps in the order: negative (no node id is), one per
    position."""
    return -1 - position


def is_tombstone(node: int) -> bool:
    return node < 0


@dataclass(frozen=True)
class Changes:
    """What a round's ``refresh`` changed: (old, new) node ids rebound (roster order), the
    nodes that joined (each appended, in this order) and those released (their ids before)."""

    rebinds: list[tuple[int, int]] = field(default_factory=list)
    joined: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def rekeyed(mapping: Mapping[int, V], old: int, new: int) -> dict[int, V]:
    """``mapping`` with key ``old`` renamed ``new`` in the same position (the order of per-node
    books decides sums and sampling)."""
    return {new if key == old else key: value for key, value in mapping.items()}


@dataclass
class Roster:
    """Node ids in the run's fixed order, what each node said about itself, the connected
    nodes left out (claimants: their facts, or None for an unusable answer) and why every node
    asked is not in the run (``left_out``; the sites' agreement keeps its own)."""

    node_ids: list[int]
    facts: dict[int, Facts]
    claimants: dict[int, Facts | None] = field(default_factory=dict)
    left_out: dict[int, str] = field(default_factory=dict)
    absent: dict[int, int] = field(default_factory=dict)  # node -> rounds in a row not connected

    @property
    def active(self) -> list[int]:
        """The nodes of the run, in order (the released positions left out)."""
        return [n for n in self.node_ids if not is_tombstone(n)]

    def size(self) -> int:
        """The federation's number of partitions, as its nodes (released ones too) declare."""
        return federation(self.facts.values())[0]

    def vacant(self) -> list[int]:
        """The partitions of the federation that no node of the run serves: 0 .. the
        ``num-partitions`` most of its nodes declared (the smaller on a tie: one node cannot
        make a federation larger than the others say)."""
        served = {self.facts[n][PARTITION_ID] for n in self.active}
        return [p for p in range(self.size()) if p not in served]

    @classmethod
    def query(
        cls, grid: Grid, label: str, server_round: int, admission: Admission = Admission()
    ) -> tuple[Roster, int]:
        """Ask every connected node; return the roster and how many answers were unusable or
        refused (a claim against ``admission.pinned``, or its vetting); round 1 waits for late
        nodes (the module docstring)."""
        node_ids = sorted(grid.get_node_ids())
        answers, rejected, left_out = _ask(grid, label, server_round, node_ids, admission)
        late, found, dropped, unusable = _late_nodes(
            grid, label, server_round, admission, set(node_ids), answers
        )
        node_ids += late
        answers.update(found)
        left_out.update(unusable)
        rejected += dropped
        facts: dict[int, Facts] = {}
        claimants: dict[int, Facts | None] = {n: None for n in node_ids if n not in answers}
        if not answers:
            raise RuntimeError(
                f"{label}: no node gave a usable answer to {QUERY_NODE}; nothing to train with"
            )
        owner: dict[int, int] = {}
        for node in sorted(answers):
            pid = answers[node][PARTITION_ID]
            if pid in owner:
                log(
                    WARNING,
                    "%s: nodes %s and %s both claim partition %d; %s is left out while "
                    "%s is connected",
                    label,
                    owner[pid],
                    node,
                    pid,
                    node,
                    owner[pid],
                )
                claimants[node] = answers[node]
                left_out[node] = f"partition {pid} is served by node {owner[pid]}"
            else:
                owner[pid], facts[node] = node, answers[node]
        order = sorted(facts, key=lambda n: facts[n][PARTITION_ID])
        log(
            INFO,
            "%s: %d nodes; partitions in order: %s",
            label,
            len(order),
            [facts[n][PARTITION_ID] for n in order],
        )
        roster = cls(order, {n: facts[n] for n in order}, claimants, left_out)
        if vacant := roster.vacant():
            log(
                WARNING,
                "%s: no node serves partitions %s; the run goes on without them",
                label,
                partitions_named(vacant),
            )
        return roster, rejected

    def refresh(
        self,
        grid: Grid,
        label: str,
        server_round: int,
        admission: Admission = Admission(),
    ) -> tuple[Changes, int]:
        """Take returning SuperNodes in, new ones for free partitions, and release the nodes
        absent ``admission.leave_after`` rounds in a row (0: never): what changed
        (``Changes``), and how many ``query.node`` answers were unusable or refused
        (``admission``, as in ``query``). Only node ids never seen before are asked."""
        connected = set(grid.get_node_ids())
        left = self._release_absent(connected, admission.leave_after, label, server_round)
        new, rejected = self._ask_new(grid, label, server_round, connected, admission)
        owner = {self.facts[n][PARTITION_ID]: n for n in self.active}
        size = self.size()
        rebinds, joined = [], []
        usable = [n for n, f in self.claimants.items() if f is not None]
        for node in sorted(usable, key=lambda n: (self.claimants[n][PARTITION_ID], n)):
            claim = self.claimants[node]
            pid, old = claim[PARTITION_ID], owner.get(claim[PARTITION_ID])
            reason = None
            if old is None:
                reason = self._join(node, claim, size, label, server_round)
                if reason is None:
                    owner[pid] = node
                    joined.append(node)
                    continue
            elif old in connected:
                reason = f"partition {pid} is served by node {old}"
            elif place(claim) != place(self.facts[old]):
                reason = f"its facts {claim} differ from those of partition {pid}'s node {old}"
            if reason is not None:
                self.left_out[node] = reason
                if node in new:
                    _warn_left_out(label, server_round, node, reason)
                continue
            self._take_place(node, old, pid, label, server_round)
            owner[pid] = node
            rebinds.append((old, node))
        position = {n: i for i, n in enumerate(self.node_ids)}
        rebinds.sort(key=lambda pair: position[pair[1]])
        return Changes(rebinds, joined, left), rejected

    def _ask_new(
        self,
        grid: Grid,
        label: str,
        server_round: int,
        connected: set[int],
        admission: Admission,
    ) -> tuple[list[int], int]:
        """Forget the claimants no longer connected and ask each node id never seen before its
        ``query.node`` (once): it becomes a claimant (None: its answer was unusable) or is left
        out. The new ids, and how many answers were unusable or refused."""
        self.claimants = {n: f for n, f in self.claimants.items() if n in connected}
        new = sorted(connected.difference(self.node_ids, self.claimants))
        rejected = 0
        if new:
            answers, rejected, unanswered = _ask(grid, label, server_round, new, admission)
            self.claimants.update({n: answers.get(n) for n in new})
            self.left_out.update(unanswered)
        return new, rejected

    def _take_place(self, node: int, old: int, pid: int, label: str, server_round: int) -> None:
        """The claimant ``node`` takes the place of ``old``, partition ``pid``'s node, which is
        no longer connected: its position and facts pass to the new id (the old id's count of
        absent rounds is dropped)."""
        del self.claimants[node]
        self.left_out.pop(node, None)
        self.node_ids[self.node_ids.index(old)] = node
        self.facts = rekeyed(self.facts, old, node)
        self.absent.pop(old, None)
        log(
            INFO,
            "%s round %d: node %s takes the place of node %s (partition %d), which is "
            "no longer connected; it is brought up to date",
            label,
            server_round,
            node,
            old,
            pid,
        )

    def _release_absent(
        self, connected: set[int], leave_after: int, label: str, server_round: int
    ) -> list[int]:
        """Count each node's rounds in a row not connected; release those at ``leave_after``
        (0: none): their positions become tombstones, their partitions free. The run keeps at
        least one node (its last, which a family's state needs). The released node ids, in
        order."""
        self.absent = {n: self.absent.get(n, 0) + 1 for n in self.active if n not in connected}
        if leave_after <= 0:
            return []
        left = [n for n in self.active if self.absent.get(n, 0) >= leave_after]
        left = left[: len(self.active) - 1]
        for node in left:
            position, pid = self.node_ids.index(node), self.facts[node][PARTITION_ID]
            self.node_ids[position] = tombstone(position)
            self.facts = rekeyed(self.facts, node, tombstone(position))
            del self.absent[node]
            log(
                WARNING,
                "%s round %d: node %s (partition %d) was not connected for %d rounds "
                "(leave-after); it leaves the run for good and partition %d is free",
                label,
                server_round,
                node,
                pid,
                leave_after,
                pid,
            )
        return left

    def _join(
        self, node: int, claim: Facts, size: int, label: str, server_round: int
    ) -> str | None:
        """Admit ``node`` for a partition no node of the run serves, at a new last position;
        why not when its claim does not fit the federation (its declared size)."""
        if claim[NUM_PARTITIONS] != size:
            return (
                f"it declares {NUM_PARTITIONS}={claim[NUM_PARTITIONS]}, the federation's "
                f"nodes {size}"
            )
        del self.claimants[node]
        self.left_out.pop(node, None)
        self.node_ids.append(node)
        self.facts[node] = claim
        log(
            INFO,
            "%s round %d: node %s joins the run for partition %d (no node of the run serves "
            "it); it is brought up to date and trains from this round",
            label,
            server_round,
            node,
            claim[PARTITION_ID],
        )
        return None

    # -- checkpoint -----------------------------------------------------------------------------
    def to_record(self) -> ConfigRecord:
        """The order, the facts and the claimants (node ids as text: they do not fit a signed
        int64)."""
        record = ConfigRecord(
            {
                "node-ids": [str(n) for n in self.node_ids],
                CLAIMANTS: [str(n) for n in self.claimants],
                LEFT_OUT_NODES: [str(n) for n in self.left_out],
                LEFT_OUT_REASONS: list(self.left_out.values()),
                ABSENT_NODES: [str(n) for n in self.absent],
                ABSENT_ROUNDS: list(self.absent.values()),
            }
        )
        for node, facts in self.facts.items():
            record.update({f"{node}/{key}": value for key, value in facts.items()})
        for node, facts in self.claimants.items():
            record.update(
                {f"{CLAIMANT_PREFIX}{node}/{key}": value for key, value in (facts or {}).items()}
            )
        return record

    @classmethod
    def from_record(cls, record: ConfigRecord) -> Roster:
        node_ids = [int(n) for n in record["node-ids"]]
        claimants: dict[int, Facts | None] = {int(n): None for n in record.get(CLAIMANTS, [])}
        left_out = dict(
            zip(map(int, record.get(LEFT_OUT_NODES, [])), record.get(LEFT_OUT_REASONS, []))
        )
        absent = dict(zip(map(int, record.get(ABSENT_NODES, [])), record.get(ABSENT_ROUNDS, [])))
        facts: dict[int, Facts] = {}
        for key, value in record.items():
            if key in ("node-ids", CLAIMANTS, LEFT_OUT_NODES, LEFT_OUT_REASONS, *ABSENT):
                continue
            book = facts
            if key.startswith(CLAIMANT_PREFIX):
                key, book = key[len(CLAIMANT_PREFIX) :], claimants
            node, _, name = key.partition("/")
            if book.get(int(node)) is None:
                book[int(node)] = {}
            book[int(node)][name] = value
        return cls(node_ids, facts, claimants, left_out, absent)


def moved(nodes: Iterable[int], old: int, new: int) -> list[int]:
    """``nodes`` with ``old`` replaced by ``new`` in its place."""
    return [new if n == old else n for n in nodes]
