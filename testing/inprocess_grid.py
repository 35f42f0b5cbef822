"""An in-process Grid that drives the real ServerApp and ClientApp without Ray or processes.

Used by the fast end-to-end tests and by the benchmarks (many rounds, many configs); not part
of the shipped packages.

Each message travels as Flower 1.41's deployment wire carries it: the sender deflates its
content-addressed objects (each distinct object of a push once, as Flower's grid uploads it
once), the receiver inflates the message from those bytes. The ServerApp's half of that
(``deflate_push``, ``inflate``) and the node's half (``LocalGrid.node_step``) are separate calls,
so a benchmark can tell server time from node time. A node's reply comes back with its arrays
unpacked (``server_app.packed_grid.unpacked``, as the ServerApp's ``PackedGrid`` would), so a
test that drives a strategy with this grid alone, or wraps it, reads records as they were
built. Each node keeps its own Context (so
Context.state persists across rounds), and a client exception becomes an error reply, as on
Flower's engines. No Ray, no processes.

With ``together`` > 1 the nodes a push addresses run in lockstep, that many at a time
(``oracles.lockstep``): each node's ClientApp in its own thread, one thread at a time in a
fixed order, their weak-learner fits made as one batched fit; what a node computes is what it
computes alone, to float rounding (one GPU, one process: issue 37's nodes fitted together).

Nodes can come and go between rounds (``leave``, ``join``): a node that left is no longer
listed and each message to it gets the SuperLink's "node unavailable" error reply, as from
Flower; a node that joins is a SuperNode (re)started with a fresh node id and an empty
Context.state. The grid's clock is the round of the messages sent (``server-round`` in their
config, else their group id): a change for round r is in place when the ServerApp asks for the
node ids at the start of round r (after a message of round r - 1) or sends a message of round r.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.server.superlink.linkstate.utils import create_message_error_unavailable_res_message
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.task_identity import TaskIdentity

from functions.protocol import CONFIG, SERVER_ROUND
from oracles.lockstep import Lockstep
from run_config.common import RunSettings
from run_config.declared import with_overrides
from run_config.families import inert_keys
from server_app.grid_wrapper import MessageMaker
from server_app.packed_grid import unpacked

PROJECT_ROOT = Path(__file__).resolve().parents[1]  # the checkout
RUN_ID = 1
SERVER_NODE_ID = 1
CLIENT_EXCEPTION_CODE = 1  # what Flower's runtime reports for a ClientApp exception


def run_config(**overrides: Any) -> dict[str, Any]:
    """Defaults with overrides (keys as in --run-config; an unknown key is a ConfigError), but
    ``plots`` off: drawing them is a large share of a small run's CPU. Tests and benchmarks
    that look at a run's plots ask for them."""
    return with_overrides({"plots": False, **overrides})


def counting(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` (with an ``algorithm``) less the keys that would have no effect in that
    run, which the ServerApp refuses (``run_config.families.inert_keys``): for tests and
    benchmarks that keep one dict of small settings for every family."""
    inert = inert_keys(RunSettings.from_run_config(run_config(**overrides)))
    return {k: v for k, v in overrides.items() if k not in inert}


def enter_run() -> None:
    """Give this process the task identity of the in-process run (Flower refuses to build a
    Message outside a running app)."""
    TaskIdentity.run_id = RUN_ID
    TaskIdentity.node_id = SERVER_NODE_ID
    TaskIdentity.task_id = 1


Wire = tuple[str, dict[str, bytes]]  # a message's object id and its objects' bytes


def deflate_push(messages: Iterable[Message]) -> list[Wire]:
    """The messages as Flower's grid pushes them: each message's id is its object id, and each
    distinct object of the push is deflated once (a record shared by many messages, once)."""
    deflated: dict[str, bytes] = {}
    out = []
    with no_object_id_recompute():
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id
            objects = get_all_nested_objects(message)
            for object_id, obj in objects.items():
                if object_id not in deflated:
                    deflated[object_id] = obj.deflate()
            out.append((message.object_id, {i: deflated[i] for i in objects}))
    return out


def inflate(wire: Wire) -> Message:
    """The message a receiver rebuilds from the bytes it pulled (Flower's inflation)."""
    message_id, contents = wire
    message = inflate_object_from_contents(message_id, dict(contents))
    message.metadata.__dict__["_message_id"] = message_id
    return message


def round_of(message: Message) -> int | None:
    """The round a message belongs to: its config's ``server-round``, else its group id."""
    config = message.content.config_records.get(CONFIG)
    if config is not None and type(config.get(SERVER_ROUND)) is int:
        return config[SERVER_ROUND]
    group = message.metadata.group_id
    return int(group) if group.isdigit() else None


class LocalGrid(MessageMaker):
    """Runs ``client_app`` synchronously for ``num_nodes`` nodes with their own node config."""

    def __init__(
        self,
        client_app: ClientApp,
        config: dict[str, Any],
        num_nodes: int,
        node_configs: list[dict[str, Any]] | None = None,
        keep_messages: bool = True,
        together: int = 1,
    ) -> None:
        """``keep_messages``: record every message sent in ``down`` (tests inspect them; long
        benchmark runs turn it off, or the traffic stays in memory). ``together``: how many
        nodes' messages of a push run in lockstep, their oracle fits made together
        (``oracles.lockstep``; 1: one node after another, the default)."""
        if together < 1:
            raise ValueError(f"together must be at least 1, got {together}")
        enter_run()
        self.keep_messages = keep_messages
        self.together = together
        self.client_app = client_app
        # Flower's node ids are random uint64s; straddle 2**63 so code that puts ids into
        # numpy arrays (silently float64 for such a mix) fails here as it would on the engine
        self.node_ids = [(1 << 63) + 977 * (i - num_nodes // 2) for i in range(num_nodes)]
        self.contexts = {
            node_id: Context(
                run_id=RUN_ID,
                node_id=node_id,
                node_config={
                    "partition-id": i,
                    "num-partitions": num_nodes,
                    **((node_configs or [{}] * num_nodes)[i]),
                },
                state=RecordDict(),
                run_config=dict(config),
            )
            for i, node_id in enumerate(self.node_ids)
        }
        self.config = dict(config)
        self.replies: dict[str, Message] = {}
        self.down: list[Message] = []
        self.gone: set[int] = set()  # nodes that left (their Contexts stay, for inspection)
        self.round = 0  # the latest round of a message sent
        self._changes: list[tuple[int, str, int]] = []  # (round, "leave" or "join", node id)

    # -- nodes that come and go ----------------------------------------------------------------
    def partition_node(self, partition_id: int) -> int:
        """The first node that served ``partition_id``."""
        return next(
            n for n, c in self.contexts.items() if c.node_config["partition-id"] == partition_id
        )

    def leave(self, node_id: int, from_round: int) -> None:
        """Node ``node_id`` is gone from round ``from_round`` on."""
        self._changes.append((from_round, "leave", node_id))

    def join(self, partition_id: int, from_round: int) -> int:
        """A SuperNode for ``partition_id`` with a fresh node id (below every id so far, so
        ordering by node id would put it first) and an empty state, from round ``from_round``
        on; returns its node id."""
        node_id = min(self.contexts) - 977
        first = self.contexts[self.partition_node(partition_id)]
        self.contexts[node_id] = Context(
            run_id=RUN_ID,
            node_id=node_id,
            node_config=dict(first.node_config),
            state=RecordDict(),
            run_config=dict(self.config),
        )
        self._changes.append((from_round, "join", node_id))
        return node_id

    def _advance(self, server_round: int) -> None:
        """Carry out the changes due by ``server_round``."""
        for change in [c for c in self._changes if c[0] <= server_round]:
            self._changes.remove(change)
            _, kind, node_id = change
            if kind == "leave":
                self.node_ids.remove(node_id)
                self.gone.add(node_id)
            else:
                self.node_ids.append(node_id)

    def set_run(self, run) -> None:
        raise NotImplementedError("LocalGrid has a fixed run")

    @property
    def run(self):
        raise NotImplementedError("LocalGrid has a fixed run")

    def get_node_ids(self) -> Iterable[int]:
        self._advance(self.round + 1)
        return list(self.node_ids)

    def node_step(self, wire: Wire) -> Wire:
        """The node's half of a delivery: inflate the message, run the ClientApp, deflate its
        reply (or the SuperLink's "node unavailable" reply for a node that left)."""
        received = inflate(wire)
        if received.metadata.dst_node_id in self.gone:  # the SuperLink answers (from node 1)
            return deflate_push(
                [create_message_error_unavailable_res_message(received.metadata, "node_unavail")]
            )[0]
        context = self.contexts[received.metadata.dst_node_id]
        try:
            reply = self.client_app(received, context)
        except Exception as err:  # mirrors Flower's runtime behaviour
            reply = Message(
                Error(CLIENT_EXCEPTION_CODE, f"{type(err).__name__}: {err}"), reply_to=received
            )
        return deflate_push([reply])[0]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        wires = deflate_push(messages)
        for message in messages:
            server_round = round_of(message)
            if server_round is not None:
                self.round = max(self.round, server_round)
                self._advance(self.round)
            if self.keep_messages:
                self.down.append(message)
        for start in range(0, len(wires), self.together):
            group = wires[start : start + self.together]
            if len(group) == 1:
                replies = [self.node_step(group[0])]
            else:
                replies = Lockstep().run([partial(self.node_step, wire) for wire in group])
            for wire, reply in zip(group, replies, strict=True):
                self.replies[wire[0]] = unpacked(inflate(reply))
        return [wire[0] for wire in wires]

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return list(self.pull_messages(list(self.push_messages(messages))))


def server_context(config: dict[str, Any]) -> Context:
    """The ServerApp's Context for a run with ``config``."""
    return Context(
        run_id=RUN_ID,
        node_id=SERVER_NODE_ID,
        node_config={},
        state=RecordDict(),
        run_config=dict(config),
    )
