"""The run's nodes in partition order, learned once from a ``query.node`` round.

Flower's node ids are random per run; every node's partition id comes from its node config, so
ordering by it makes sampling and aggregation order the same for the same seed on every engine.
A node whose answer is unusable is kept, after the others (ordered by node id), and counted as a
failure of the round that asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import INFO, WARNING

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.protocol import NODE, NUM_PARTITIONS, PARTITION_ID, QUERY_NODE
from strategies.screening import exact_records, screen_replies

Facts = dict[str, int | float | str]


def _facts(reply: Message) -> Facts:
    """The node's ConfigRecord, with a valid partition id."""
    facts = dict(exact_records(reply.content, {NODE: ConfigRecord})[NODE])
    pid, total = facts.get(PARTITION_ID), facts.get(NUM_PARTITIONS)
    if type(pid) is not int or type(total) is not int or not 0 <= pid < total:
        raise DecodeError(f"{PARTITION_ID}={pid!r} is not an int in [0, {NUM_PARTITIONS}={total!r})")
    return facts


@dataclass
class Roster:
    """Node ids in the run's fixed order, and what each node said about itself."""

    node_ids: list[int]
    facts: dict[int, Facts]

    @classmethod
    def query(cls, grid: Grid, label: str, server_round: int) -> tuple[Roster, int]:
        """Ask every connected node; return the roster and how many answers were unusable."""
        node_ids = sorted(grid.get_node_ids())
        questions = [Message(RecordDict(), node, QUERY_NODE, group_id=str(server_round))
                     for node in node_ids]
        replies = grid.send_and_receive(questions)
        screened = screen_replies(label, server_round, replies, _facts, node_ids)
        facts, rejected = screened.accepted, screened.rejected
        owner: dict[int, int] = {}
        for node in sorted(facts):
            pid = facts[node][PARTITION_ID]
            if pid in owner:
                log(WARNING, "%s: nodes %s and %s both claim partition %d; %s goes last", label,
                    owner[pid], node, pid, node)
                del facts[node]
                rejected += 1
            else:
                owner[pid] = node
        last = len(node_ids)
        order = sorted(node_ids, key=lambda n: (facts[n][PARTITION_ID] if n in facts else last, n))
        log(INFO, "%s: %d nodes; partitions in order: %s", label, len(order),
            [facts[n][PARTITION_ID] if n in facts else "?" for n in order])
        return cls(order, facts), rejected  # error replies: counted by the metered grid

    def to_record(self) -> ConfigRecord:
        """The order and the facts (node ids as text: they do not fit a signed int64)."""
        record = ConfigRecord({"node-ids": [str(n) for n in self.node_ids]})
        for node, facts in self.facts.items():
            record.update({f"{node}/{key}": value for key, value in facts.items()})
        return record

    @classmethod
    def from_record(cls, record: ConfigRecord) -> Roster:
        node_ids = [int(n) for n in record["node-ids"]]
        facts: dict[int, Facts] = {}
        for key, value in record.items():
            if key != "node-ids":
                node, _, name = key.partition("/")
                facts.setdefault(int(node), {})[name] = value
        return cls(node_ids, facts)
