"""Server half of FedFW / FedFW+ / FedFW-sto: checks extreme points, mirrors every x_i, averages.

One round (Algorithm 1): each sampled node gets x-bar^t and returns s_i^t in compact form;
the server decodes s_i against that node's D_i (the decoders rebuild a point of D_i by
construction), mirrors x_i <- (1 - eta_t) x_i + eta_t s_i for the accepted points only, and
x-bar^{t+1} is the exact mean of all mirrored x_i (section 4.2: non-participants keep x_i).

Downlink (``fedfw.downlink``): the dense x-bar, or the compact form: each node replicates the
mirror (``client_app.fedfw_replica``) from the rounds' accepted points it has not seen (relayed
as the nodes sent them), and gets the whole mirror once when it is new to it or lost it. ``auto``
picks the compact form when a round's expected points are smaller than the dense x-bar.

With full participation (p = 1, one step a round) a round in which every node's point was
accepted advances x-bar by Algorithm 1's recursion x-bar <- (1 - eta_t) x-bar + eta_t mean_i s_i
(``mean_step`` on ``sum_round``), on the server and, under the compact downlink, on every
node, which then holds x-bar alone (O(model)) instead of the mirror. Any other round sets x-bar to
the mirror's mean of the x_i; such a node is then re-synced with x-bar in float64.

A node that joins starts at x_i = x-bar (the mirror's mean stays), one that leaves takes its
x_i out of the mirror: x-bar is the mean over the other nodes, and N (what a node's step is
scaled by) is the run's nodes from then on. After either the downlink is dense and x-bar the
mirror's mean for the rest of the run (the nodes' replicas and the recursion count a fixed
roster).

With ``secure-aggregation`` the server keeps no x_i: each node sends the change of its x_i in the
round into a secure sum, and x-bar is the mean of the nodes' x_i from their running sum
(``strategies.held_sum``); the downlink is dense (the compact one relays every node's points).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.extreme_points import decode_model_point, decode_model_points, encode_model_point
from functions.fedfw_downlink import (
    Replica,
    RosterSets,
    RoundPoints,
    header_through,
    pack_mean,
    pack_replica,
    pack_updates,
    sum_round,
    unpack_rounds,
    unpack_updates,
)
from functions.params import (
    Params,
    arrays_to_record,
    params_to_record,
    record_to_arrays,
    record_to_params,
)
from functions.protocol import (
    CONSTRAINT,
    EVALUATE,
    EVALUATE_FIRST,
    FW_GAP,
    FW_GRAD,
    FW_POINT,
    FW_RESTART,
    LOCAL_STEPS,
    METRICS,
    NUM_CLIENTS,
    RADIUS,
    REPLICA,
    REPLICA_ARRAYS,
    TRAIN,
    UPDATE_ARRAYS,
    UPDATES,
    XBAR,
)
from oracles.fedfw_mirror import ConsensusMirror, mean_step
from oracles.frank_wolfe import fw_gap
from oracles.lmo import Constraint, lmo_per_tensor, make_constraint, smallest_set
from run_config.common import NodeDP, RunSettings
from run_config.fedfw import ConstraintSet, FedFWSettings, fedfw_settings
from strategies.evaluation import EvaluationSums, combine_evaluation_sums, decode_evaluation_sums
from strategies.held_vectors import HeldVectorStrategy
from strategies.node_book import NodeSlot
from strategies.privacy_budget import PrivacyBudget, Releases
from strategies.sampling import BERNOULLI, Sampler
from strategies.screening import Screened, exact_records
from strategies.secure_training import SecureTraining
from strategies.state_codec import LAYOUT, POSITIONS, checks
from strategies.torch_model import TorchGlobal
from tasks.datasets import TaskData

MAX_LOCAL_STEPS = 10_000  # bounds a local pass's points, hence the memory a reply may take
ETA = "eta"  # the state context's step-size schedule (round -> eta_t)


@dataclass
class FedFWSlot(NodeSlot):
    """A node's replica of the mirror, or its x-bar with full participation (compact downlink):
    the round it holds (None: lost), and whether it was never contacted (then it starts from
    x-bar^1)."""

    replica: int | None = 0
    fresh: bool = True

    def lose(self) -> None:
        super().lose()
        self.replica, self.fresh = None, False


@dataclass(frozen=True)
class UpdateHistory:
    """The rounds some node has not applied yet, in the compact downlink's own validated wire
    form (``pack_updates`` since round 0; a ``state_codec.Wire``). Decoding needs the roster's
    ``POSITIONS`` and the schedule's step size (``ETA``)."""

    RECORDS: ClassVar[dict[str, type]] = {"": ConfigRecord, "arrays": ArrayRecord}
    num_nodes: int
    rounds: tuple[RoundPoints, ...]

    def to_records(self) -> dict[str, ConfigRecord | ArrayRecord]:
        config, arrays = pack_updates(0, self.rounds, self.num_nodes)
        return {"": ConfigRecord(config), "arrays": arrays_to_record(arrays)}

    @classmethod
    def from_records(
        cls, records: Mapping[str, ConfigRecord | ArrayRecord], context: Mapping[str, Any]
    ) -> UpdateHistory:
        positions = context[POSITIONS]
        since, rounds = unpack_updates(
            dict(records[""]), record_to_arrays(records["arrays"]), positions, context[ETA]
        )
        if since != 0:
            raise DecodeError(f"the history starts after round {since}, not 0")
        return cls(positions, tuple(rounds))


@dataclass
class Downlink:
    """Whether the downlink is compact, the last round whose points entered the mirror, and
    whether x-bar follows Algorithm 1's recursion (until the roster changes)."""

    compact: bool
    version: int
    recursive: bool


@dataclass
class FedFWState:
    """What FedFW continues from: every x_i by roster position and their running sum (kept: its
    rounding is part of x-bar), x-bar (kept: under full participation it follows its own
    recursion), the downlink, and the rounds not every node has applied."""

    mirror: dict[int, Params]
    mirror_sum: Params
    xbar: Params
    downlink: Downlink
    history: UpdateHistory


@dataclass
class FedFWSecureState:
    """With secure aggregation, what FedFW continues from: x-bar (the nodes restart there at
    consensus, ``strategies.held_sum``), and with differential privacy its budget's releases."""

    xbar: Params
    releases: Releases | None = None


@dataclass
class FedFWPrivateState(FedFWState):
    """With differential privacy, also the releases of its budget (``Releases``)."""

    multipliers: np.ndarray = field(metadata=checks(shape=(None,)))
    sizes: np.ndarray = field(metadata=checks("int64", shape=(None,)))


class FedFWStrategy(HeldVectorStrategy):
    """FedFW family on Flower's Message API, with partial participation and per-node D_i.

    The mirror's x_i, each node's D_i and its local pass's K are kept by roster position."""

    label = "FedFW"
    held_name = "x_i"
    slot = FedFWSlot
    State = FedFWState

    def __init__(
        self,
        fw: FedFWSettings,
        model: TorchGlobal,
        x0: Params,
        seed: int,
        dp: NodeDP | None = None,
        secure: bool = False,
        num_rounds: int = 0,
    ) -> None:
        """``x0``: x^1 of every client, already in D and float32-exact (``projected_start``);
        ``dp``: the nodes' noisy gradients (None: exact), whose releases the server counts;
        ``secure``: the rounds are secure sums of the nodes' changes of x_i."""
        super().__init__(num_rounds)
        self.fw, self.model, self.x0 = fw, model, x0
        self.dp = dp
        self.budget = None if dp is None else PrivacyBudget(dp.delta, "a row")
        if dp is not None:
            self.State = FedFWPrivateState
        if secure:
            self.secure_training = SecureTraining(self.label, seed)
            self.State = FedFWSecureState
        self.sampler = Sampler(fw.participation, seed, BERNOULLI)
        self.mirror: ConsensusMirror | None = None
        self.xbar: Params = []  # the run's x-bar (float64), what every node rebuilds
        # full participation with one step a round: x-bar follows Algorithm 1's recursion
        self.recursive = fw.participation == 1.0 and not fw.local_pass
        self.node_sets: list[Constraint] = []  # D_i by position
        self.roster_sets = RosterSets((), None, 0)  # the same, as a node following x-bar keeps them
        self.replica_sets: tuple[tuple[str, ...], tuple[float, ...]] = ((), ())  # kinds, radii
        # packed updates by (version held, version brought) until the history moves on (every
        # message that needs them shares one copy)
        self._round_updates: dict[tuple[int, int], dict] = {}
        self._mean_resync: dict | None = None  # the same, for x-bar's re-sync (recursive)
        self.local_steps: list[int] = []  # K of each node's local pass (1 without), by position
        self.gap_domain: Constraint | None = None  # D = the intersection of the D_i, if known
        self._asked: list[int] = []  # the nodes of the current round's train messages
        self.compact = fw.downlink == "compact"  # decided at the start when "auto"
        self.version = 0  # the last round whose points entered the mirror
        self.history: list[RoundPoints] = []  # rounds some node has not seen yet

    def initial_arrays(self) -> ArrayRecord:
        """x-bar^1: the model's initial weights projected onto D (float32-exact)."""
        return params_to_record(self.layout, self.x0)

    # -- set-up --------------------------------------------------------------------
    def summary(self) -> None:
        fw = self.fw
        log(
            INFO,
            "\t%s: D = %s ball of radius %s (%s), schedule %s (lambda0=%s), p=%s",
            fw.variant,
            fw.constraint.kind,
            fw.constraint.radius,
            fw.scope,
            fw.schedule.kind,
            fw.schedule.lambda0,
            fw.participation,
        )

    def on_roster(self, grid: Grid, server_round: int) -> None:
        """Each node's D_i from its query.node answer; every x_i starts at x^1."""
        self._fix_node_sets(server_round, self.roster.node_ids)
        if self.secure_training is not None:
            self.held = self.hold(self.x0)
            self.xbar, self.compact = self.held.mean, False
            return
        self.mirror = ConsensusMirror(self.x0, range(self.book.positions))
        self.xbar = self.mirror.x_bar
        if self.fw.downlink == "auto":
            # a node gets each round's points once, but x-bar in every message it gets: an
            # evaluate message of its own unless the evaluation rides on training
            p = self.fw.participation
            rides = self.evaluation_rides and p == 1.0  # with every node (fuses_evaluation)
            evaluate = 1 if self.fw.federated_eval and not rides else 0
            dense = 4 * self.layout.size * (p + evaluate)
            points = max(1.0, p * len(self.roster.node_ids)) * self._point_bytes()
            self.compact = points < dense
            log(
                INFO,
                "FedFW downlink: %s (a node's round: about %.0f B of points vs %.0f B of x-bar)",
                "compact" if self.compact else "dense",
                points,
                dense,
            )

    def _point_bytes(self) -> int:
        """The payload of one extreme point of the run's D (a random direction's LMO)."""
        rng = np.random.default_rng(0)
        grad = [rng.normal(size=shape) for shape in self.layout.shapes]
        point = lmo_per_tensor(self.fw.constraint, grad, self.fw.scope)
        return sum(
            a.nbytes for a in encode_model_point(self.fw.constraint, point, self.fw.scope).values()
        )

    def _fix_node_sets(self, server_round: int = 0, new: Collection[int] = ()) -> None:
        """Each node's D_i and K from the roster, and D = the D_i's intersection when it is one
        of them (section 4.3; ``fw_gap`` is taken over it, and left out when there is none). A
        node of ``new`` (admitted in round ``server_round``) that declared either unusably is a
        warning of the run."""
        declared = [(self._declared_set(n), self._declared_steps(n)) for n in self.roster.node_ids]
        for node, ((_, bad_set), (_, bad_steps)) in zip(self.roster.node_ids, declared):
            for problem in (bad_set, bad_steps):
                if problem is not None and node in new:
                    self.warn(server_round, f"node {node}: {problem}")
        self.node_sets = [d for (d, _), _ in declared]
        self.local_steps = [k for _, (k, _) in declared]
        self.roster_sets = RosterSets.of(self.node_sets)
        self.replica_sets = (
            tuple(c.kind for c in self.node_sets),
            tuple(float(c.radius) for c in self.node_sets),
        )
        active = [self.node_sets[p] for p in self.book.active_positions]
        self.gap_domain = smallest_set(active, list(self.layout.shapes), self.fw.scope)
        sets = sorted({f"{c.kind}({c.radius:g})" for c in active})
        if self.gap_domain is None:
            log(
                WARNING,
                "FedFW: node sets %s; no D_i lies inside all others, so their "
                "intersection has no closed-form LMO and fw_gap is not reported",
                sets,
            )
        else:
            log(
                INFO,
                "FedFW: node sets %s; fw_gap over %s(%g)",
                sets,
                self.gap_domain.kind,
                self.gap_domain.radius,
            )

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """The new node's D_i and K from its answer; its x_i starts at x-bar."""
        self._fix_node_sets(server_round, (node,))
        if self.mirror is not None:
            self.mirror.add(self.book.position(node), self.xbar)
            self._roster_changed()
        super().on_join(node, grid, server_round)

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """x-bar is the mean of the other nodes' x_i from now on."""
        self._fix_node_sets()
        if self.mirror is not None:
            self.mirror.remove(position)
            self.xbar = self.mirror.x_bar
            self._roster_changed()
        super().on_leave(node, position, server_round)

    def _roster_changed(self) -> None:
        """The dense downlink and x-bar as the mirror's mean from now on (module docstring);
        every node gets x-bar in its next message and keeps its x_i."""
        if self.compact or self.recursive:
            log(INFO, "FedFW: the roster changed; the downlink is dense from now on")
        self.compact = self.recursive = False
        self.history, self._round_updates, self._mean_resync = [], {}, None

    def _declared_steps(self, node: int) -> tuple[int, str | None]:
        """The local pass's K a node declared, and why it is unusable (None: it is usable;
        else K is 0, so its points are refused)."""
        steps = self.roster.facts.get(node, {}).get(LOCAL_STEPS)
        if not self.fw.local_pass:
            return 1, None
        if type(steps) is not int or not 1 <= steps <= MAX_LOCAL_STEPS:
            return 0, (
                f"local pass of {steps!r} steps is not in [1, {MAX_LOCAL_STEPS}]; "
                "its points are refused"
            )
        return steps, None

    def _declared_set(self, node: int) -> tuple[Constraint, str | None]:
        """The D_i a node declared, and why it is unusable (None: it is usable; else the D_i
        is the run's D)."""
        facts = self.roster.facts.get(node, {})
        try:
            return make_constraint(str(facts[CONSTRAINT]), float(facts[RADIUS])), None
        except (KeyError, TypeError, ValueError) as err:
            return self.fw.constraint, f"no usable D_i ({err}); it uses the run's D"

    # -- training ----------------------------------------------------------------
    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """x-bar (dense or compact) to the sampled nodes; a node that may hold nothing gets
        its x_i (``sync``) and, under the compact downlink, the whole mirror (x-bar alone with
        full participation); ``evaluate-first`` when the last round's evaluation rides on
        these messages."""
        self._asked = nodes
        xbar = self.xbar
        dense = params_to_record(self.layout, xbar)

        def restart(node: int) -> tuple[str, dict]:
            return self.restart(node, xbar, lambda p: self.mirror.x_of(p), FW_RESTART)

        due = {} if self.evaluation_due is None else {EVALUATE_FIRST: True}
        # a compact x-bar's node counts the roster in its replica
        counts = {} if self.compact else {NUM_CLIENTS: len(self.book.node_ids)}
        messages = [
            self.book.train_message(
                node,
                server_round,
                self._downlink(node, dense, header_through(TRAIN, server_round)),
                restart,
                **counts,
                **due,
            )
            for node in nodes
        ]
        log(
            INFO,
            "FedFW round %d: %d of %d nodes participate",
            server_round,
            len(nodes),
            len(self.book.node_ids),
        )
        # x_i and x_i' both in D_i, whose points' coordinates are float32: within 2^-24 of r
        bound = 2 * max(float(c.radius) for c in self.node_sets) * (1 + 1e-6)
        return self.as_secure_sum(grid, server_round, messages, bound)

    def _downlink(self, node: int, dense: ArrayRecord, through: int) -> dict:
        """What ``node`` needs to know x-bar: the dense x-bar, or (compact) the points it has not
        applied, or x-bar^1 and the D_i on first contact, or the whole mirror after a loss
        (with full participation: x-bar, in float64 after round 0). ``through``: the round the
        message brings x-bar to (``header_through``)."""
        if not self.compact:
            return {XBAR: dense}
        slot = self.book[node]
        since, slot.replica = slot.replica, self.version
        kinds, radii = self.replica_sets
        if self.recursive:
            if slot.fresh or since is None:
                slot.fresh = False
                return self._mean_start()
            return self._updates_since(since, through)
        if slot.fresh:  # x-bar^1 (float32-exact) and every round since
            slot.fresh = False
            config, _ = pack_replica(Replica(0, kinds, radii, (), []))
            content = {XBAR: params_to_record(self.layout, self.x0), REPLICA: ConfigRecord(config)}
            if self.version > 0:
                content |= self._updates_since(0, through)
            return content
        if since is None:
            points, total = self.mirror.state()
            config, arrays = pack_replica(
                Replica(
                    self.version, kinds, radii, tuple(points[i] for i in range(len(kinds))), total
                )
            )
            return {REPLICA: ConfigRecord(config), REPLICA_ARRAYS: arrays_to_record(arrays)}
        return self._updates_since(since, through)

    def _mean_start(self) -> dict:
        """x-bar for a node that follows x-bar's recursion: the dense x-bar^1 at round 0 (exact
        in float32), x-bar in float64 after; built once a round and shared."""
        if self._mean_resync is None:
            kinds, radii = self.replica_sets
            config, arrays = pack_mean(
                self.version, kinds, radii, self.xbar if self.version else None
            )
            self._mean_resync = {REPLICA: ConfigRecord(config)} | (
                {REPLICA_ARRAYS: arrays_to_record(arrays)}
                if self.version
                else {XBAR: params_to_record(self.layout, self.x0)}
            )
        return self._mean_resync

    def _updates_since(self, since: int, through: int) -> dict:
        """The rounds after ``since``, packed once a round for each ``since`` and shared by every
        message that needs them (the records are only read when a message is sent)."""
        if (since, through) not in self._round_updates:
            config, arrays = pack_updates(
                since,
                [u for u in self.history if u.round > since],
                self.book.positions,
                through,
            )
            self._round_updates[since, through] = {
                UPDATES: ConfigRecord(config),
                UPDATE_ARRAYS: arrays_to_record(arrays),
            }
        return self._round_updates[since, through]

    def _forget_replicas(self, nodes: Iterable[int]) -> None:
        """Nodes whose reply was an error may have lost their replica: send them the mirror."""
        for node in nodes:
            if node in self.book:
                self.book[node].replica = None

    def _forget_seen_rounds(self) -> None:
        """Drop the rounds every node with a replica, or not contacted yet (at round 0), has
        applied (nodes that lost theirs get the mirror)."""
        held = [s.replica for s in self.book.slots.values() if s.replica is not None]
        oldest = min(held) if held else self.version
        self.history = [u for u in self.history if u.round > oldest]

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        if self.held is not None:
            return self._secure_aggregate(server_round)
        checked = self.screen(server_round, replies, self._checked_point)
        self._forget_replicas(
            [n for n in self._asked if n not in checked and self.book[n].needs_sync]
        )
        points = {node: steps for node, (_, steps) in checked.items()}
        eta = self.fw.schedule.eta(server_round)
        position = self.book.position
        self.mirror.apply_steps(
            {position(node): self._with_etas(server_round, steps) for node, steps in points.items()}
        )
        full = self.recursive and len(points) == len(self.book.node_ids)
        sent = RoundPoints(
            server_round,
            eta,
            tuple((position(node), arrays) for node, (arrays, _) in checked.items()),
        )
        if points:
            self.xbar = self._next_xbar(sent) if full else self.mirror.x_bar
            if self.recursive and not full:  # nodes cannot follow: re-sync them all
                self._forget_replicas(self.book.node_ids)
            self.version = server_round
        if points and self.compact and (full or not self.recursive):
            self._forget_seen_rounds()  # once a round, before the round's points join
            self.history.append(sent)
        self._round_updates, self._mean_resync = {}, None  # the history moved on
        self.book.accept(server_round, points)
        metrics = {
            **self._round_metrics(server_round, len(points)),  # errors add to the failures
            "consensus_distance": self.mirror.consensus_distance(),
        }
        return params_to_record(self.layout, self.xbar), metrics

    def _secure_aggregate(self, server_round: int) -> tuple[ArrayRecord, dict[str, float]]:
        """x-bar from the running sum of the x_i, with the round's secure sum of the changes
        of the nodes in it (x-bar stays when there is none)."""
        participants = self.add_secure_round(server_round)
        self.xbar = self.held.mean
        return params_to_record(self.layout, self.xbar), self._round_metrics(
            server_round, participants
        )

    def _round_metrics(self, server_round: int, participants: int) -> dict[str, float]:
        """The round's step size and penalty, its participants, and with differential privacy
        the run's epsilon (a row's node took its steps, each a noisy gradient)."""
        metrics = {
            "participants": participants,
            "eta": self.fw.schedule.eta(server_round),
            "lambda": self.fw.schedule.lam(server_round),
        }
        if self.budget is not None:
            position = self.book.position
            steps = max((self.local_steps[position(n)] for n in self._asked), default=1)
            count = steps if self.fw.local_pass else 1
            metrics["dp_epsilon"] = self.budget.release(self.dp.noise_multiplier, 1, count)
        return metrics

    def privacy(self) -> dict[str, Any] | None:
        return None if self.budget is None else self.budget.record()

    def _next_xbar(self, sent: RoundPoints) -> Params:
        """x-bar after a round in which every node's point was accepted: the recursion, from
        the points packed as a node receives them, with the code every node runs on them."""
        count = len(self.book.node_ids)
        config, arrays = pack_updates(self.version, [sent], count)
        _, (packed,) = unpack_rounds(config, arrays, count, self.fw.schedule.eta)
        total = sum_round(self.roster_sets, packed, self.layout.shapes, self.fw.scope)
        return mean_step(self.xbar, total, count, packed.eta)

    def _with_etas(self, t: int, steps: list[Params]) -> list[tuple[float, Params]]:
        """A node's round of K steps with their step sizes, as the node took them: eta_t for
        one step, eta at schedule steps (t - 1) K + k + 1 for a local pass."""
        k_steps = len(steps)
        return [(self.fw.schedule.eta((t - 1) * k_steps + k + 1), s) for k, s in enumerate(steps)]

    def _checked_point(self, reply: Message) -> tuple[dict[str, np.ndarray], list[Params]]:
        """The round's points s_i as sent and decoded against the node's declared D_i (the
        decoders validate everything); a local pass must carry the K points the node declared."""
        record = exact_records(reply.content, {FW_POINT: ArrayRecord})[FW_POINT]
        position = self.book.position(reply.metadata.src_node_id)
        constraint, shapes, scope = self.node_sets[position], self.layout.shapes, self.fw.scope
        steps = self.local_steps[position] if self.fw.local_pass else 1
        most = max(steps, 1)  # points; none is encoded larger than the dense model in float64
        arrays = record_to_arrays(record, max_bytes=8 * self.layout.size * most)
        if not self.fw.local_pass:
            return arrays, [decode_model_point(constraint, arrays, shapes, scope)]
        points = decode_model_points(constraint, arrays, shapes, scope, most)
        if len(points) != steps:
            raise DecodeError(f"a local pass of {len(points)} points; the node declared {steps}")
        return arrays, points

    # -- evaluation ----------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message brings x-bar of round t (not with
        the FW gap, whose grad f_i(x-bar) only an evaluate reply carries)."""
        return self.fw.federated_eval and self.fw.eval_with_train and not self.fw.gap

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """F(x-bar) on every node (and grad f_i(x-bar) for the gap), unless switched off;
        nothing when it rides on the next round's training."""
        if not self.fw.federated_eval or self.defers_evaluation(server_round):
            return []
        dense = params_to_record(self.layout, self.xbar)
        return [
            self.book.evaluate_message(
                node,
                server_round,
                self._downlink(node, dense, header_through(EVALUATE, server_round)),
                **{FW_GAP: self.fw.gap},
            )
            for node in self.book.node_ids
        ]

    def check_evaluation(self, reply: Message) -> tuple[EvaluationSums, Params | None]:
        """Evaluation sums, and grad f_i(x-bar) when the gap is on."""
        kinds = {METRICS: MetricRecord, **({FW_GRAD: ArrayRecord} if self.fw.gap else {})}
        records = exact_records(reply.content, kinds)
        sums = decode_evaluation_sums(records[METRICS], self.model.task)
        grad = record_to_params(records[FW_GRAD], self.layout, np.float32) if self.fw.gap else None
        return sums, grad

    def check_evaluation_record(self, record: Any, node: int) -> tuple[EvaluationSums, None]:
        """The sums from a train reply's ``evaluation`` record (no gradient rides there)."""
        return super().check_evaluation_record(record, node), None

    def on_evaluation_screened(self, screened: Screened) -> None:
        self._forget_replicas(screened.errors)

    def site_metrics(self, value: tuple[EvaluationSums, Params | None]) -> dict[str, float]:
        return super().site_metrics(value[0])

    def evaluation_metrics(
        self, accepted: dict[int, tuple[EvaluationSums, Params | None]]
    ) -> dict[str, float]:
        metrics = combine_evaluation_sums([s for s, _ in accepted.values()], self.kind)
        if self.fw.gap and self.gap_domain is not None and len(accepted) == len(self.book.node_ids):
            metrics["fw_gap"] = fw_gap(
                [g for _, g in accepted.values()],
                self.xbar,
                self.gap_domain,
                self.fw.scope,
                len(accepted),
            )
        return metrics

    # -- state -----------------------------------------------------------------------
    def state_context(self) -> dict[str, Any]:
        return {**super().state_context(), LAYOUT: self.layout, ETA: self.fw.schedule.eta}

    def family_state(self) -> FedFWState | FedFWSecureState | None:
        if self.held is not None:
            releases = None if self.budget is None else self.budget.state()
            return FedFWSecureState(self.xbar, releases)
        if self.mirror is None:
            return None
        points, total = self.mirror.state()
        state = (
            points,
            total,
            self.xbar,
            Downlink(self.compact, self.version, self.recursive),
            UpdateHistory(self.book.positions, tuple(self.history)),
        )
        if self.budget is None:
            return FedFWState(*state)
        releases = self.budget.state()
        return FedFWPrivateState(*state, releases.multipliers, releases.sizes)

    def load_family_state(self, state: FedFWState | FedFWSecureState) -> None:
        if isinstance(state, FedFWSecureState):
            if state.releases is not None:
                self.budget.load(state.releases)
            self._fix_node_sets()
            self.xbar = state.xbar
            self.held = self.hold(state.xbar)
            self.compact = False
            return
        if isinstance(state, FedFWPrivateState):
            self.budget.load(Releases(state.multipliers, state.sizes))
        if sorted(state.mirror) != self.book.active_positions:
            raise DecodeError(
                f"x_i at positions {sorted(state.mirror)}, the run's nodes are at "
                f"{self.book.active_positions}"
            )
        self.mirror = ConsensusMirror.restore(state.mirror, state.mirror_sum)
        self.xbar = state.xbar
        self._fix_node_sets()
        self.compact, self.version = state.downlink.compact, state.downlink.version
        self.recursive = state.downlink.recursive and self.recursive
        self.history = list(state.history.rounds)
        self._round_updates, self._mean_resync = {}, None


def build_fedfw(settings: RunSettings, task: TaskData) -> FedFWStrategy:
    """FedFW, FedFW+ or FedFW-sto (``algorithm``) from the ``fedfw.*`` table."""
    fw = fedfw_settings(settings)
    model = TorchGlobal(settings, task)
    x0 = model.projected_start(ConstraintSet(fw.constraint, fw.scope))
    return FedFWStrategy(
        fw,
        model,
        x0,
        settings.seed,
        settings.node_dp,
        settings.secure_aggregation,
        settings.num_rounds,
    )
