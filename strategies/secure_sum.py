"""The server's half of a secure sum: any strategy whose server needs only the sum of its nodes'
replies calls ``SecureAggregator.exchange`` with the messages it would have sent and the fields
it sums, and gets back the sums, who is in them, and every reply's other records
(``functions.secure_sum`` describes the stages; ``client_app.secure_sum`` is the node's half).

The server sees public keys, sealed shares it cannot open, commitments (SHA-256 of random
secrets), masked vectors that are uniformly random to it, and, at the end, the shares that
remove the masks of the sum and of nothing else: the self-mask seeds of the nodes whose vectors
arrived and the masking keys of the nodes that dropped after sharing them. Nodes may drop at any
stage; the sum is recovered while every secret it needs keeps a majority of its holders. A reply
that is malformed (a masked vector of the wrong length or type, shares sealed to nodes that are
not the sender's neighbours, a share that does not match its dealer's commitment) is dropped
with its reason and counted, as a node that failed. Honest-but-curious server: a server that
lies to nodes about who dropped is out of this protocol's scope (SecAgg+'s consistency round is
not run).

Each ``unmask`` request also asks the nodes whose vectors arrived for the next sum's keys; the
next sum over those nodes (or fewer, while every neighbourhood keeps its threshold) uses them
and skips its own ``keys`` exchange.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.params import record_to_arrays
from functions.secagg_crypto import (
    DIGEST_BYTES,
    KEY_BYTES,
    MASK_PURPOSE,
    SEED_BYTES,
    agreements,
    digest,
    join_shares,
    mask,
    public_of,
    share_bytes,
)
from functions.secure_sum import (
    ALIVE,
    DESTINATIONS,
    DROPPED,
    KEY_SHARE_COMMITMENTS,
    KEYS,
    MASKED,
    MASKING_KEY,
    ME,
    NEIGHBOUR_KEYS,
    NEIGHBOURS,
    NEXT,
    NONFINITE,
    OWN_KEY,
    OWNERS,
    SEALED,
    SEALING_KEY,
    SECAGG,
    SEED_COMMITMENT,
    SEED_SHARE_COMMITMENTS,
    SETUP,
    SHARES,
    SUM,
    THRESHOLD,
    UNMASK,
    VECTOR,
    SumField,
    SumLayout,
    byte_strings,
)
from strategies.screening import exact_records, screen_replies

MAX_SEALED_BYTES = 512  # a sealed pair of shares with its header is about 200 bytes


class SecureSumFailed(RuntimeError):
    """Too few nodes remain to reveal a sum of several nodes, or a secret cannot be rebuilt:
    the sum is not known (one sentence, for the round's log and health line)."""


def neighbourhoods(count: int, rng: np.random.Generator) -> tuple[list[list[int]], int]:
    """SecAgg+'s graph over ``count`` positions: a ring in a random order where each position's
    neighbours are the ``shares // 2`` on either side (everyone when ``count`` is small), with
    ``shares`` = 2 ceil(log2 count) + 1; and the threshold, a majority of a secret's holders."""
    shares = min(count, 2 * math.ceil(math.log2(max(count, 2))) + 1)
    if shares >= count:
        return [[q for q in range(count) if q != p] for p in range(count)], count // 2 + 1
    order = rng.permutation(count)
    place = np.empty(count, np.int64)
    place[order] = np.arange(count)
    half = shares // 2
    graph = [
        sorted(int(order[(place[p] + d) % count]) for d in range(-half, half + 1) if d)
        for p in range(count)
    ]
    return graph, shares // 2 + 1


@dataclass
class Keyed:
    """What a node's ``keys`` reply committed it to."""

    masking_key: bytes
    sealed: dict[int, bytes]  # by destination position
    seed_commitment: bytes
    seed_share_commitments: list[bytes]  # neighbours' (in the request's order), then its own
    key_share_commitments: list[bytes]


@dataclass
class Keying:
    """A sum's members (their positions are their places here), its graph and threshold, and
    the keys of the members that sent them."""

    sum_id: int
    members: list[int]
    graph: list[list[int]]
    threshold: int
    keyed: dict[int, Keyed] = field(default_factory=dict)

    @property
    def position(self) -> dict[int, int]:
        return {n: p for p, n in enumerate(self.members)}

    def serves(self, nodes: Sequence[int]) -> bool:
        """Whether a sum over ``nodes`` can use these keys: every node keyed, and every
        neighbourhood keeping its threshold among them."""
        keyed = set(nodes)
        if not keyed <= set(self.keyed):
            return False
        position = self.position
        return all(
            sum(self.members[q] in keyed for q in self.graph[position[n]]) + 1 >= self.threshold
            for n in nodes
        )

    def requests(self, sealing: dict[int, bytes]) -> dict[int, ConfigRecord]:
        """Each member's ``keys`` request."""
        return {
            node: ConfigRecord(
                {
                    SUM: self.sum_id,
                    ME: p,
                    NEIGHBOURS: self.graph[p],
                    NEIGHBOUR_KEYS: [sealing[self.members[q]] for q in self.graph[p]],
                    OWN_KEY: sealing[node],
                    THRESHOLD: self.threshold,
                }
            )
            for p, node in enumerate(self.members)
        }

    def read_keys(self, record: object, node: int) -> Keyed:
        """A member's ``keys`` reply, checked (``DecodeError`` otherwise)."""
        if not isinstance(record, ConfigRecord):
            raise DecodeError("secagg: keys must come as a ConfigRecord")
        neighbours = self.graph[self.position[node]]
        if record.get(SUM) != self.sum_id:
            raise DecodeError(f"secagg: keys of sum {record.get(SUM)!r}, not {self.sum_id}")
        destinations = record.get(DESTINATIONS)
        if destinations != neighbours:
            extra = sorted(set(destinations or []) - set(neighbours))
            raise DecodeError(
                f"secagg: shares sealed to positions {destinations!r}, not to its "
                f"neighbours {neighbours}" + (f" (no neighbour: {extra})" if extra else "")
            )
        sealed = byte_strings(record, SEALED, len(neighbours))
        if any(len(s) > MAX_SEALED_BYTES for s in sealed):
            raise DecodeError(f"secagg: a sealed share longer than {MAX_SEALED_BYTES} bytes")
        holders = len(neighbours) + 1
        return Keyed(
            _bytes(record, MASKING_KEY, KEY_BYTES),
            dict(zip(neighbours, sealed)),
            _bytes(record, SEED_COMMITMENT, DIGEST_BYTES),
            byte_strings(record, SEED_SHARE_COMMITMENTS, holders, DIGEST_BYTES),
            byte_strings(record, KEY_SHARE_COMMITMENTS, holders, DIGEST_BYTES),
        )


@dataclass
class SecureOutcome:
    """A secure sum's result: the summed fields by ``SumField.key`` (empty when ``error``), the
    nodes whose vectors are in them, the other records of their replies, and what failed."""

    sums: dict[str, np.ndarray] = field(default_factory=dict)
    contributors: list[int] = field(default_factory=list)
    replies: dict[int, Message] = field(default_factory=dict)
    failures: int = 0  # replies dropped as malformed (error replies are the grid's to count)
    reasons: dict[int, str] = field(default_factory=dict)  # of every node left out
    nonfinite: list[int] = field(default_factory=list)  # nodes that refused NaN or inf values
    exchanges: int = 0  # with the nodes, this sum's own message included
    error: str = ""


STREAM = 1 << 40  # sums a stream may number: a node refuses a sum not after its last one


class SecureAggregator:
    """Runs secure sums for one strategy: keeps each node's sealing key for the run, numbers
    the sums and holds the next sum's keys. ``seed`` draws each sum's neighbourhoods (what is
    summed does not depend on it). A run's aggregators that follow one another (the sites'
    agreement's, then the strategy's) number their sums in ``stream`` 0, then 1, so that each
    sum's number is after every earlier one's, as a node requires."""

    def __init__(self, label: str, seed: int, stream: int = 1) -> None:
        self.label, self.seed = label, seed
        self.sealing: dict[int, bytes] = {}  # node id -> its public sealing key
        self.last_sum = stream * STREAM
        self.prepared: Keying | None = None  # the next sum's keys, made during the last unmask

    def forget(self, node: int) -> None:
        """``node`` lost its state (a rebind or a resumed run): it is set up again."""
        self.sealing.pop(node, None)
        self.prepared = None

    def set_up(self, grid: Grid, server_round: int, nodes: Sequence[int]) -> int:
        """The setup stage alone, for the nodes of ``nodes`` without a sealing key (a relay
        whose nodes seal to each other, ``functions.sealed_relay``); returns how many replies
        were dropped as malformed (a node that failed keeps no key)."""
        out = SecureOutcome()
        _Sum(self, grid, server_round, out, None)._setup(
            [n for n in nodes if n not in self.sealing]
        )
        return out.failures

    def keying(self, members: list[int]) -> Keying:
        """A new sum's number, graph and threshold over ``members``."""
        self.last_sum += 1
        rng = np.random.default_rng([self.seed, self.last_sum])
        graph, threshold = neighbourhoods(len(members), rng)
        return Keying(self.last_sum, members, graph, threshold)

    def exchange(
        self,
        grid: Grid,
        server_round: int,
        messages: Sequence[Message],
        fields: Sequence[SumField],
        weight: str = "",
        check: Callable[[Message], None] | None = None,
    ) -> SecureOutcome:
        """Send ``messages`` (one per node, the family's own) as a secure sum of ``fields``
        (weighted by the field ``weight``, if given): the outcome's ``sums`` hold the sum over
        the nodes in ``contributors``; ``error`` says why there is none. ``check`` judges what
        a reply holds besides its masked vector (an evaluation riding on it) before the vector
        is taken: a reply it refuses is dropped whole, as a plain reply would be (without it,
        a reply must hold nothing else)."""
        out = SecureOutcome()
        try:
            _Sum(self, grid, server_round, out, check).run(list(messages), fields, weight)
        except SecureSumFailed as err:  # each caller reports it (a warning, or its own error)
            out.error, out.sums, out.contributors = str(err), {}, []
        return out


class _Sum:
    """One secure sum's stages (``SecureAggregator.exchange``)."""

    def __init__(
        self,
        owner: SecureAggregator,
        grid: Grid,
        server_round: int,
        out: SecureOutcome,
        check: Callable[[Message], None] | None,
    ) -> None:
        self.owner, self.grid, self.server_round, self.out = owner, grid, server_round, out
        self.check = check

    def _send(self, messages: list[Message], decode, nodes: list[int]) -> dict:
        """Send ``messages``; the decoded replies of ``nodes`` that passed, in their order,
        and every other node's reason kept."""
        self.out.exchanges += 1
        replies = self.grid.send_and_receive(messages)
        screened = screen_replies(self.owner.label, self.server_round, replies, decode, nodes)
        self.out.failures += screened.rejected
        self.out.nonfinite += [n for n in screened.errors if NONFINITE in screened.reasons[n]]
        for node in nodes:
            if node not in screened.accepted:
                self.out.reasons.setdefault(
                    node, screened.reasons.get(node, "no reply within the reply timeout")
                )
        return screened.in_order(nodes)

    def _ask(self, stage: str, requests: dict[int, RecordDict], decode) -> dict:
        messages = [
            Message(content, n, stage, group_id=str(self.server_round))
            for n, content in requests.items()
        ]
        return self._send(messages, decode, list(requests))

    def run(self, messages: list[Message], fields: Sequence[SumField], weight: str) -> None:
        nodes = [m.metadata.dst_node_id for m in messages]
        prepared, self.owner.prepared = self.owner.prepared, None
        if prepared is not None and prepared.serves(nodes):
            keying = prepared  # its keys in its members' order, whatever order they came in
            keying.keyed = {n: prepared.keyed[n] for n in prepared.members if n in nodes}
        else:
            self._setup([n for n in nodes if n not in self.owner.sealing])
            keying = self.owner.keying([n for n in nodes if n in self.owner.sealing])
            self._enough(keying.members, "could be set up for")
            keying.keyed = self._keys(keying)
        self.keying = keying
        layout = SumLayout.of(fields, len(keying.keyed), weight)
        by_node = {m.metadata.dst_node_id: m for m in messages}
        vectors = self._vectors([by_node[n] for n in keying.keyed], layout)
        dropped = [n for n in keying.keyed if n not in vectors]
        seeds, keys = self._unmask(vectors, dropped)
        total = self._unmasked(vectors, dropped, seeds, keys, layout.length)
        self.out.sums = layout.split(total)
        self.out.contributors = [n for n in nodes if n in vectors]

    def _enough(self, nodes: list[int], stage: str) -> None:
        if len(nodes) < 2:
            raise SecureSumFailed(
                f"only {len(nodes)} node(s) {stage} secure sum {self.owner.last_sum}: a sum of "
                "fewer than 2 nodes would be a node's own"
            )

    # -- the stages ----------------------------------------------------------------------------
    def _setup(self, nodes: list[int]) -> None:
        def decode(reply: Message) -> bytes:
            record = exact_records(reply.content, {SECAGG: ConfigRecord})[SECAGG]
            key = _bytes(record, SEALING_KEY, KEY_BYTES)
            if key in self.owner.sealing.values():
                raise DecodeError("secagg: a sealing key another node holds")
            return key

        if nodes:
            requests = {n: RecordDict({SECAGG: ConfigRecord()}) for n in nodes}
            self.owner.sealing.update(self._ask(SETUP, requests, decode))

    def _keys(self, keying: Keying) -> dict[int, Keyed]:
        def decode(reply: Message) -> Keyed:
            record = exact_records(reply.content, {SECAGG: ConfigRecord})[SECAGG]
            return keying.read_keys(record, reply.metadata.src_node_id)

        requests = keying.requests(self.owner.sealing)
        keyed = self._ask(KEYS, {n: RecordDict({SECAGG: r}) for n, r in requests.items()}, decode)
        for node in keying.members:
            if node not in keyed:  # it may have lost its key: set it up again next time
                self.owner.forget(node)
        self._enough(list(keyed), "shared keys for")
        return keyed

    def _vectors(self, messages: list[Message], layout: SumLayout) -> dict[int, np.ndarray]:
        """The family's messages, each with its node's secagg record (its neighbours that
        shared keys, their masking keys, the shares sealed to it, the layout); the masked
        vectors of the replies that passed, each reply's other records kept in ``replies``."""
        keying, keyed = self.keying, self.keying.keyed
        position, sent, declared = keying.position, [], layout.to_config()
        for message in messages:
            node = message.metadata.dst_node_id
            p = position[node]
            neighbours = [q for q in keying.graph[p] if keying.members[q] in keyed]
            record = ConfigRecord(
                {
                    SUM: keying.sum_id,
                    NEIGHBOURS: neighbours,
                    NEIGHBOUR_KEYS: [keyed[keying.members[q]].masking_key for q in neighbours],
                    SEALED: [keyed[keying.members[q]].sealed[p] for q in neighbours],
                    **declared,
                }
            )
            content = RecordDict({**message.content, SECAGG: record})
            metadata = message.metadata
            sent.append(Message(content, node, metadata.message_type, group_id=metadata.group_id))

        def decode(reply: Message) -> np.ndarray:
            record = reply.content.get(MASKED)
            if record is None:
                raise DecodeError(f"secagg: no {MASKED!r} record in the reply")
            arrays = record_to_arrays(record, max_bytes=8 * layout.length)
            vector = arrays.get(VECTOR)
            shape = (layout.length,)
            if set(arrays) != {VECTOR} or vector.dtype != np.uint64 or vector.shape != shape:
                raise DecodeError(f"secagg: the masked vector must be uint64 {shape} alone")
            del reply.content[MASKED]
            (self.check or _nothing_else)(reply)
            self.out.replies[reply.metadata.src_node_id] = reply
            return vector

        vectors = self._send(sent, decode, list(keyed))
        self.out.replies = {n: self.out.replies[n] for n in vectors}
        self._enough(list(vectors), "sent a vector to")
        return vectors

    def _holder(self, owner: int, holder: int) -> int:
        """Which of ``owner``'s shares ``holder`` holds (positions; its own is the last)."""
        neighbours = self.keying.graph[owner]
        return len(neighbours) if holder == owner else neighbours.index(holder)

    def _unmask(
        self, vectors: dict[int, np.ndarray], dropped: list[int]
    ) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
        """Ask the nodes whose vectors arrived for their shares of their alive neighbours'
        seeds and of their dropped neighbours' masking keys, each share checked against its
        dealer's commitment, and for the next sum's keys. The verified shares by owner
        position: (seeds, masking keys)."""
        keying = self.keying
        position = keying.position
        alive = {position[n] for n in vectors}
        gone = {position[n] for n in dropped}
        following = self.owner.keying(list(vectors))
        asks = following.requests(self.owner.sealing)
        requests = {
            node: ConfigRecord(
                {
                    SUM: keying.sum_id,
                    ALIVE: [q for q in keying.graph[position[node]] if q in alive],
                    DROPPED: [q for q in keying.graph[position[node]] if q in gone],
                }
            )
            for node in vectors
        }
        contents = {n: RecordDict({SECAGG: r, NEXT: asks[n]}) for n, r in requests.items()}
        answers = self._ask(UNMASK, contents, self._shares_decoder(requests, following))
        self.owner.prepared = following if len(following.keyed) >= 2 else None
        seeds: dict[int, list[bytes]] = {p: [] for p in alive}
        keys: dict[int, list[bytes]] = {p: [] for p in gone}
        for node, (seed_owners, shares) in answers.items():
            for i, share in enumerate(shares):
                if i < len(seed_owners):
                    seeds[seed_owners[i]].append(share)
                else:
                    keys[requests[node][DROPPED][i - len(seed_owners)]].append(share)
        return seeds, keys

    def _shares_decoder(
        self, requests: dict[int, ConfigRecord], following: Keying
    ) -> Callable[[Message], tuple[list[int], list[bytes]]]:
        """The decoder of the ``unmask`` replies to ``requests``: a node's seed owners (the
        positions of its alive neighbours and its own) and its shares (of those seeds, then of
        its dropped neighbours' masking keys), each checked against its dealer's commitment;
        the next sum's keys a reply carries are kept in ``following``."""
        keying = self.keying
        position = keying.position

        def decode(reply: Message) -> tuple[list[int], list[bytes]]:
            node = reply.metadata.src_node_id
            content = reply.content
            if set(content.keys()) - {NEXT} != {SECAGG}:
                raise DecodeError(f"secagg: expected {SECAGG!r} (and {NEXT!r}) records")
            record, p, asked = content[SECAGG], position[node], requests[node]
            if not isinstance(record, ConfigRecord):
                raise DecodeError(f"secagg: {SECAGG!r} must be a ConfigRecord")
            seeds_of = sorted([*asked[ALIVE], p])
            expected = [*seeds_of, *asked[DROPPED]]
            if record.get(SUM) != keying.sum_id or record.get(OWNERS) != expected:
                raise DecodeError(
                    f"secagg: shares of positions {record.get(OWNERS)!r}, not {expected}"
                )
            values = byte_strings(record, SHARES, len(expected))
            self._check_shares(expected, len(seeds_of), values, p)
            if NEXT in content:
                try:
                    following.keyed[node] = following.read_keys(content[NEXT], node)
                except DecodeError as err:  # the next sum asks for its keys apart
                    self.out.failures += 1
                    log(WARNING, "%s: node %s's next keys dropped: %s", self.owner.label, node, err)
            return seeds_of, values

        return decode

    def _check_shares(
        self, owners: list[int], seeds: int, shares: list[bytes], holder: int
    ) -> None:
        """``DecodeError`` unless each of ``holder``'s ``shares`` (of ``owners``' secrets: the
        first ``seeds`` self-mask seeds, then masking keys) has its size and matches the
        commitment its dealer made to it."""
        keyed, members = self.keying.keyed, self.keying.members
        for i, (owner, share) in enumerate(zip(owners, shares)):
            seed = i < seeds
            size = share_bytes(SEED_BYTES if seed else KEY_BYTES)
            dealer = keyed[members[owner]]
            commitments = dealer.seed_share_commitments if seed else dealer.key_share_commitments
            if len(share) != size or digest(share) != commitments[self._holder(owner, holder)]:
                kind = "self-mask seed" if seed else "masking key"
                raise DecodeError(
                    f"secagg: a share of position {owner}'s {kind} that does not match "
                    "its commitment"
                )

    def _secret(self, shares: list[bytes], owner: int, size: int) -> bytes:
        threshold = self.keying.threshold
        kind = "self-mask seed" if size == SEED_BYTES else "masking key"
        if len(shares) < threshold:
            raise SecureSumFailed(
                f"node {self.keying.members[owner]}'s {kind} cannot be rebuilt: {len(shares)} "
                f"of its share holders answered, {threshold} needed"
            )
        try:
            return join_shares(shares, threshold, size)
        except DecodeError as err:  # shares its dealer committed to with repeated indices
            raise SecureSumFailed(
                f"node {self.keying.members[owner]}'s {kind} cannot be rebuilt: {err}"
            ) from None

    def _unmasked(
        self,
        vectors: dict[int, np.ndarray],
        dropped: list[int],
        seeds: dict[int, list[bytes]],
        keys: dict[int, list[bytes]],
        length: int,
    ) -> np.ndarray:
        """The sum of the masked vectors less every self-mask and every pairwise mask that a
        node whose vector arrived shares with one that dropped."""
        keying = self.keying
        position, keyed = keying.position, keying.keyed
        total = np.zeros(length, np.uint64)
        for vector in vectors.values():
            total += vector
        for node in vectors:
            seed = self._secret(seeds[position[node]], position[node], SEED_BYTES)
            if digest(seed) != keyed[node].seed_commitment:
                raise SecureSumFailed(f"node {node}'s shares do not rebuild its committed seed")
            total -= mask(seed, length)
        purpose = MASK_PURPOSE + keying.sum_id.to_bytes(8, "little")
        for node in dropped:
            p = position[node]
            private = self._secret(keys[p], p, KEY_BYTES)
            if public_of(private) != keyed[node].masking_key:
                raise SecureSumFailed(f"node {node}'s shares do not rebuild its masking key")
            alive = [q for q in keying.graph[p] if keying.members[q] in vectors]
            publics = [keyed[keying.members[q]].masking_key for q in alive]
            for q, pair_seed in zip(alive, agreements(private, publics, purpose)):
                if q > p:
                    total -= mask(pair_seed, length)
                else:
                    total += mask(pair_seed, length)
        return total


def _nothing_else(reply: Message) -> None:
    """A secure reply without records beside its masked vector (``DecodeError`` otherwise)."""
    exact_records(reply.content, {})


def _bytes(record: ConfigRecord, key: str, size: int) -> bytes:
    value = record.get(key)
    if not isinstance(value, bytes) or len(value) != size:
        raise DecodeError(f"secagg: {key} must be {size} bytes")
    return value
