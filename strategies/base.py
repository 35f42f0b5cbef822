"""The round lifecycle every family shares, as a template over Flower's four hooks.

The ServerApp knows no model: the strategy owns its global function. It says where the run
starts (``initial_arrays``: a torch model's weights, an ensemble, or nothing when the nodes keep
their own models), evaluates that function centrally when the server holds one
(``evaluate_global``), and saves and restores its whole state as records, so a run can be resumed
after the ServerApp stops.

``configure_train`` is written once, here (as Flower's ``Strategy.start`` drives its hooks):

1. **admit**: round 1 asks every node who it is (``Roster.query``, under the run's
   ``Admission``: its pins and, with sites' own data, the agreed schema and the refused sites) and
   gives each admitted node a slot (``NodeBook``); the family then sets itself up on the roster
   (``on_roster``). Every later round takes SuperNodes that came back under a new node id into
   their partition's slot (``Roster.refresh`` and ``rebind``), as nodes that lost their state,
   releases the nodes gone for ``leave-after`` rounds (``on_leave``: the family goes on without
   them) and admits new nodes for free partitions at new positions (``on_join``: the family
   takes them in; their first message brings them up to date, as a returning node's does).
2. **sample**: the round's participants, by the one seeded ``Sampler`` (or every node).
3. **messages**: the family's ``train_messages(round, nodes)``.

Failures found while admitting (unusable or refused answers) and while screening replies
(``screen``) are counted here and reported once, with the round's training metrics
(``aggregate_train`` wraps the family's ``aggregate``). The checkpoint's common part (the
generator, the roster, the book) is written and read here. A family declares its own state as a
dataclass (``State``, see ``strategies.state_codec``): ``family_state`` returns one once the
roster is known, the base writes it with the one codec and reads it back, validated, with the
family's ``state_context``, into ``load_family_state``. What only grows (FFGB's learners) is
kept apart as segments the checkpoint writes once (``segment_names`` / ``segment_record``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from logging import WARNING
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from functions.errors import DecodeError
from functions.protocol import (
    ARRAYS,
    CONFIG,
    EVALUATE_FIRST,
    EVALUATION,
    METRICS,
    NUM_EXAMPLES,
    PARTITION_ID,
)
from strategies.evaluation import EvaluationSums, combine_evaluation_sums
from strategies.node_book import NodeBook, NodeSlot
from strategies.roster import Admission, Roster, Vet, devices
from strategies.sampling import Sampler
from strategies.screening import Screened, exact_records, screen_replies
from strategies.state_codec import (
    POSITIONS,
    SEGMENTS,
    decode_state,
    encode_state,
    restore_rng,
    rng_record,
)
from tasks.evaluation import CLASSIFICATION

if TYPE_CHECKING:
    from strategies.secure_sum import SecureOutcome
    from strategies.secure_training import SecureTraining

T = TypeVar("T")
# What a family implements, by group (docs/architecture.md lists them): the round's are needed
# by every family, the others where it has something of that kind. Everything else here is the
# lifecycle's, which no family overrides (tests/lifecycle/test_lifecycle_hooks.py).
FAMILY_HOOKS: dict[str, tuple[str, ...]] = {
    "round": ("summary", "train_messages", "aggregate", "own_exchange"),
    "nodes": ("on_roster", "on_join", "on_leave", "on_rebind", "check_federation"),
    "evaluation": (
        "configure_evaluate",
        "check_evaluation",
        "check_evaluation_record",
        "evaluation_metrics",
        "site_metrics",
        "on_evaluation_screened",
        "evaluation_rides",
    ),
    "global function": ("initial_arrays", "evaluate_global", "exports", "description", "privacy"),
    "state": (
        "family_state",
        "load_family_state",
        "state_context",
        "segment_names",
        "segment_record",
    ),
}
_RNG, _ROSTER, _BOOK = "rng", "roster", "book"
_COMMON = (_RNG, _ROSTER, _BOOK)


def flower_options(fraction_train: float) -> dict[str, Any]:
    """The arguments of a Flower strategy that a family wraps (FedAvg, FedXgbBagging,
    FedXgbCyclic): this project's record keys, every node evaluated, one node enough to go on
    (the family's own checks decide what a round needs)."""
    return {
        "fraction_train": fraction_train,
        "fraction_evaluate": 1.0,
        "min_available_nodes": 1,
        "weighted_by_key": NUM_EXAMPLES,
        "arrayrecord_key": ARRAYS,
        "configrecord_key": CONFIG,
    }


class Diverged(RuntimeError):
    """The run's numbers stopped being numbers: a non-finite metric or aggregate, or every
    reply of a round dropped for carrying NaN or inf. The run stops as failed (the ServerApp
    says it in one line); ``what`` says what was not finite."""

    def __init__(self, server_round: int, what: str) -> None:
        super().__init__(f"diverged at round {server_round}: {what}")
        self.server_round, self.what = server_round, what


class FederatedStrategy(Strategy):
    """A Flower Strategy that owns its global function, its round lifecycle and its checkpoint."""

    label: str
    State: ClassVar[type | None] = None  # the family's state dataclass (None: it keeps none)
    slot: Callable[[], NodeSlot] = NodeSlot  # what the book keeps per node
    sampler: Sampler | None = None  # None: every node takes part in every round
    roster: Roster | None = None  # the run's nodes, once asked (round 1)
    book: NodeBook | None = None  # one slot per node of the roster, in its order
    admission: Admission = Admission()  # pins, nodes left out, the query.node content
    per_site: bool = False  # evaluation also reports each site's own metrics (sites' own data)
    num_rounds: int = 0  # the run's rounds (when an evaluation may ride: fuses_evaluation)
    evaluation_due: int | None = None  # the round whose evaluation rides on this round's training
    late_evaluation: tuple[int, MetricRecord] | None = None  # (round, its evaluation), once done
    secure_training: SecureTraining | None = None  # set: the training rounds are secure sums
    raised: tuple[str, ...] = ()  # the run's warnings so far (``warn``), for its outcome
    _failures: int = 0  # found this round before the replies' screening
    _finite_drops: int = 0  # replies dropped this round before the family's screen, not for
    # NaN or inf (a bad evaluation riding on them): the round has not diverged if any was
    _accepted: frozenset[int] = frozenset()  # nodes whose replies the round's screens took
    _asked_to_evaluate: frozenset[int] = frozenset()  # nodes asked, with their train message,
    # for the last round's evaluation (``evaluate-first``)

    def __init__(self, num_rounds: int = 0) -> None:
        """``num_rounds``: the run's last round (an evaluation rides on the next round's
        training only before it; 0: none rides)."""
        self.num_rounds = num_rounds

    def pin_partitions(
        self, pinned: dict[int, int], join_timeout: float = 0.0, leave_after: int = 0
    ) -> None:
        """Only node ``n`` may serve partition ``pinned[n]``; with a map, a node that claims
        another partition, or is not in it, is refused (``node-partitions``, for SuperNodes with
        authentication, whose node ids are fixed at registration). Round 1 waits up to
        ``join_timeout`` seconds for late nodes (``join-timeout``); a node not connected for
        ``leave_after`` rounds in a row leaves the run (``leave-after``, 0: never;
        ``strategies.roster``)."""
        self.admission = replace(
            self.admission,
            pinned=dict(pinned),
            join_timeout=join_timeout,
            leave_after=leave_after,
        )

    def admit_sites(
        self, question: Callable[[], RecordDict], left_out: Mapping[int, str], vet: Vet
    ) -> None:
        """Sites' own data: every ``query.node`` carries ``question`` (the agreed schema), the
        nodes of ``left_out`` (refused by the agreement) never enter the roster, and a node the
        agreement did not see is first vetted by ``vet``."""
        self.admission = replace(
            self.admission, question=question, left_out=dict(left_out), vet=vet
        )
        self.per_site = True

    # -- the round lifecycle ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Admit, sample, then the family's messages (see the module docstring)."""
        self.admit(grid, server_round)
        nodes = self.book.node_ids
        if self.sampler is not None:
            nodes = self.sampler.draw(nodes)
        messages = list(self.train_messages(server_round, nodes, arrays, config, grid))
        self._asked_to_evaluate = frozenset(
            m.metadata.dst_node_id
            for m in messages
            if EVALUATE_FIRST in m.content.config_records.get(CONFIG, {})
        )
        return messages

    def admit(self, grid: Grid, server_round: int) -> None:
        """Round 1: the roster and the book, then ``on_roster``; later rounds: the nodes that
        left for good, returning nodes, then the nodes that joined (``Roster.refresh``)."""
        if self.roster is None:
            self.roster, failures = Roster.query(grid, self.label, server_round, self.admission)
            self.book = NodeBook(self.roster.node_ids, self.label, self.slot)
            self._failures += failures
            self.on_roster(grid, server_round)
            return
        changes, rejected = self.roster.refresh(grid, self.label, server_round, self.admission)
        self._failures += rejected
        for node in changes.left:
            position = self.book.position(node)
            self.book.release(node)
            self.on_leave(node, position, server_round)
        for old, new in changes.rebinds:
            self.rebind(old, new, server_round)
        for node in changes.joined:
            self.book.append(node)
            self.on_join(node, grid, server_round)

    def on_roster(self, grid: Grid, server_round: int) -> None:
        """The family's set-up once the roster is known (round 1, before its messages)."""

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """The family takes in ``node``, which joined at the last position of the book (its
        slot new, to be brought up to date by its first message); nothing by default (the
        family keeps nothing per node beyond the slot)."""

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """The family goes on without ``node`` (at ``position``), which left for good before
        round ``server_round``; its slot stays there under a tombstone id. Nothing by default."""

    @abstractmethod
    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """The round's train messages to the sampled ``nodes``."""

    def own_exchange(self) -> tuple[int, int] | None:
        """(nodes asked, nodes whose answer was used) of this round's training when the family
        exchanges with its nodes itself from ``train_messages`` (fedxgb-hist's tree levels), so
        ``min-replies`` counts those, as it does a round run as a secure sum
        (``secure_training``); None: the round's train messages are the template's."""
        return None if self.secure_training is None else self.secure_training.counts()

    def secure_outcome(self, server_round: int) -> SecureOutcome | None:
        """The round's secure sum (``secure_training``), its failures counted and its nodes the
        round's accepted ones; None when there is none (``Diverged`` when every node asked
        refused its reply for NaN or inf values)."""
        training = self.secure_training
        outcome = training.take()
        self.count_failures(outcome.failures)
        self._accepted = frozenset(outcome.contributors)
        if not outcome.error:
            return outcome
        if outcome.nonfinite and len(outcome.nonfinite) == training.asked:
            raise Diverged(server_round, f"every node's reply held NaN or inf: {outcome.error}")
        self.warn(server_round, f"no secure sum: {outcome.error}")
        return None

    def count_failures(self, count: int) -> None:
        """Add ``count`` failures to the round's (reported with its training metrics)."""
        self._failures += count

    def screen(
        self, server_round: int, replies: Iterable[Message], decode: Callable[[Message], T]
    ) -> dict[int, T]:
        """The book's screening (``NodeBook.screen``), its dropped replies counted;
        ``Diverged`` when no reply passed and every dropped one carried NaN or inf (those
        dropped earlier in the round included: ``_finite_drops``)."""
        good, screened = self.book.screen(server_round, replies, decode)
        self._failures += screened.rejected
        self._accepted = self._accepted | frozenset(good)
        all_nonfinite = screened.nonfinite == screened.dropped and not self._finite_drops
        if not good and screened.nonfinite and all_nonfinite:
            first = screened.nonfinite[0]
            raise Diverged(
                server_round,
                f"every reply ({len(screened.nonfinite)}) carried NaN "
                f"or inf values, for example node {first}'s: "
                f"{screened.reasons[first]}",
            )
        return good

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The family's ``aggregate``, with the round's failures counted so far. When the last
        round's evaluation rode on this round's messages (``evaluation_due``), each reply's
        ``evaluation`` record is taken out and checked first (``_split_evaluations``), and the
        evaluations of the nodes whose training the family accepted make that round's
        (``late_evaluation``). A round run as a secure sum (``secure_training``) has its
        replies from the sum (their masked records taken out)."""
        replies = list(replies)
        if self.secure_training is not None and self.secure_training.outcome is not None:
            replies = list(self.secure_training.outcome.replies.values())
            self._asked_to_evaluate = self.secure_training.evaluating
        due, self.evaluation_due = self.evaluation_due, None
        evaluations: dict[int, Any] = {}
        if due is not None:
            replies, evaluations = self._split_evaluations(due, replies)
        self._accepted = frozenset()
        arrays, metrics = self.aggregate(server_round, replies)
        if due is not None:
            accepted = {n: v for n, v in evaluations.items() if n in self._accepted}
            self.late_evaluation = (
                due,
                self._evaluation_figures(accepted, len(self._asked_to_evaluate) - len(accepted)),
            )
        failures, self._failures, self._finite_drops = self._failures, 0, 0
        return arrays, MetricRecord({"failures": failures, **metrics})

    @abstractmethod
    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, Any]]:
        """The new global arrays (None: unchanged or none) and the round's training metrics."""

    def rebind(self, old: int, new: int, server_round: int) -> None:
        """Node ``new`` took the place of ``old`` (a restarted SuperNode of the same partition):
        its slot moves with it and is lost (``NodeSlot.lose``), so the next message brings it up
        to date; ``on_rebind`` moves whatever else the family keys by node id."""
        self.book.rebind(old, new)
        self.on_rebind(old, new, server_round)

    def on_rebind(self, old: int, new: int, server_round: int) -> None:
        """The family's part of a rebind (nothing when it keys its state by roster position)."""

    def forget_node_states(self, server_round: int) -> None:
        """Every node of the roster holds nothing any more (a resumed run: Flower starts a new
        run, and a node's ``Context.state`` is per run): each is treated as a node that lost its
        state, so its next message brings it up to date (``rebind`` of a node to itself, in
        ``server_round``: the first round the resumed run plays)."""
        for node in list(self.book.node_ids if self.book is not None else []):
            self.rebind(node, node, server_round)

    # -- evaluation -----------------------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """Whether the family's evaluation may ride on the next round's train messages (its
        ``eval-with-train``, its federated evaluation on); none does by default."""
        return False

    def fuses_evaluation(self, server_round: int) -> bool:
        """Whether round ``server_round``'s evaluation rides on the next round's train messages
        (every node evaluates the function it receives before it trains, and replies with both:
        one exchange a round instead of two): when ``evaluation_rides`` and every node trains
        every round; never after the last round (``num_rounds``)."""
        every_node = self.sampler is None or self.sampler.fraction >= 1
        return self.evaluation_rides and every_node and server_round < self.num_rounds

    def defers_evaluation(self, server_round: int) -> bool:
        """``fuses_evaluation``; if so, the next round's train messages ask for it
        (``evaluation_due``) and the family's ``configure_evaluate`` sends nothing."""
        if not self.fuses_evaluation(server_round):
            return False
        self.evaluation_due = server_round
        return True

    def check_evaluation_record(self, record: Any, node: int) -> Any:
        """A node's evaluation, decoded and checked (``DecodeError`` otherwise), wherever it
        came: the ``metrics`` record of its evaluate reply (``check_evaluation``'s default) or
        the ``evaluation`` record (``functions.protocol.EVALUATION``) riding on its train
        reply."""
        raise DecodeError(f"{self.label} sends no evaluation")

    def _split_evaluations(
        self, due: int, replies: list[Message]
    ) -> tuple[list[Message], dict[int, Any]]:
        """Each answer of a node asked for it (``_asked_to_evaluate``) has its ``evaluation``
        record taken out and checked (``check_evaluation_record``): the replies left for the
        family's training, and the checked evaluations by node. A reply whose record is missing
        or bad is dropped whole and counted, as one with a bad training part is (it is one
        reply); ``Diverged`` when every answer's was NaN or inf. A node not asked keeps its
        reply as sent (an ``evaluation`` record there is an extra record to the family)."""
        failed: set[int] = set()

        def decode(reply: Message) -> Any:
            record = reply.content.pop(EVALUATION, None)
            try:
                if record is None:
                    raise DecodeError(f"no {EVALUATION!r} record, which the message asked for")
                return self.check_evaluation_record(record, reply.metadata.src_node_id)
            except Exception:
                failed.add(id(reply))
                raise

        asked = self._asked_to_evaluate
        answers = [r for r in replies if not r.has_error() and r.metadata.src_node_id in asked]
        screened = screen_replies(self.label, due + 1, answers, decode, self.book.node_ids)
        if not screened.accepted and screened.nonfinite == screened.dropped != []:
            raise Diverged(
                due,
                f"every node's evaluation of it ({len(screened.nonfinite)}) carried NaN or inf",
            )
        self._failures += len(failed)
        self._finite_drops += len(screened.dropped) - len(screened.nonfinite)
        return [reply for reply in replies if id(reply) not in failed], screened.accepted

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Every evaluate reply screened by the family's ``check_evaluation`` (a reply that
        fails it counts as a failure, like an error reply), the family told which nodes failed
        (``on_evaluation_screened``), then the figures of the accepted replies."""
        screened = screen_replies(
            self.label, server_round, replies, self.check_evaluation, self.book.node_ids
        )
        self.on_evaluation_screened(screened)
        return self._evaluation_figures(screened.accepted, screened.rejected)

    def _evaluation_figures(self, accepted: dict[int, Any], failures: int) -> MetricRecord:
        """The family's ``evaluation_metrics`` of the checked evaluations in roster order, each
        site's own with sites' own data, and ``failures``."""
        accepted = {n: accepted[n] for n in self.book.node_ids if n in accepted}
        metrics = self.evaluation_metrics(accepted)
        if self.per_site:
            for node, value in accepted.items():
                partition = self.roster.facts[node][PARTITION_ID]
                metrics.update(
                    {
                        f"site{partition}_{name}": figure
                        for name, figure in self.site_metrics(value).items()
                    }
                )
        return MetricRecord({**metrics, "failures": failures})

    def check_evaluation(self, reply: Message) -> Any:
        """A node's evaluate reply, decoded and checked (``DecodeError`` otherwise): by default
        a reply of exactly its ``metrics`` record, which ``check_evaluation_record`` judges (a
        family whose evaluate replies carry more overrides this)."""
        record = exact_records(reply.content, {METRICS: MetricRecord})[METRICS]
        return self.check_evaluation_record(record, reply.metadata.src_node_id)

    def on_evaluation_screened(self, screened: Screened) -> None:
        """What the screen found (error replies, dropped ones, accepted ones): the family may
        mark nodes for re-sync (they may not hold what was sent)."""

    def evaluation_metrics(self, accepted: dict[int, Any]) -> dict[str, Any]:
        """The round's evaluation metrics from the checked replies (roster order)."""
        return {}

    def site_metrics(self, value: Any) -> dict[str, float]:
        """One site's own metrics from its checked evaluate reply (with sites' own data, the
        columns ``site<partition>_<metric>``): its test loss and accuracy or MSE from the loss
        sums that most families' nodes send."""
        if not isinstance(value, EvaluationSums):
            return {}
        kind = "regression" if value.test_correct_sum is None else CLASSIFICATION
        return combine_evaluation_sums([value], kind)

    # -- the global function ----------------------------------------------------------------------
    def initial_arrays(self) -> ArrayRecord:
        """What Flower's ``start`` passes to round 1; empty when there is no global function."""
        return ArrayRecord()

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        """Central evaluation of the global function after ``server_round`` (0: the start);
        empty when the server holds none or central evaluation is off."""
        return {}

    def exports(self) -> dict[str, bytes]:
        """Files the results folder gets at the end of the run, by name: the global function in
        a format other tools load (an XGBoost booster's ``model.json``); none by default."""
        return {}

    def check_federation(self, num_nodes: int) -> None:
        """ConfigError if the run cannot work with ``num_nodes`` nodes (e.g. FedFun's graph);
        called before the first message and by the preflight check."""

    def description(self) -> dict[str, Any]:
        """What the global function is (model, size), for the run's config.json."""
        return {}

    def privacy(self) -> dict[str, Any] | None:
        """The run's differential-privacy budget so far (``strategies.privacy_budget``'s
        record: epsilon, delta, releases), for config.json and the health line; None without
        differential privacy."""
        return None

    def warn(self, server_round: int, text: str) -> None:
        """Log ``text`` as a warning of round ``server_round`` and keep it for the run's outcome
        (config.json lists it, the health line counts it): for work a round lost that the run
        goes on without, which a user reading only the results folder must still see."""
        log(WARNING, "%s round %d: %s", self.label, server_round, text)
        self.raised = (*self.raised, f"round {server_round}: {text}")

    def left_out(self) -> dict[str, str]:
        """Every node the roster left out, with the reason, for the run's health line (the
        sites' agreement names the nodes it refused itself)."""
        return {} if self.roster is None else {str(n): r for n, r in self.roster.left_out.items()}

    def vacant_partitions(self) -> list[int]:
        """The partitions of the federation no node of the run serves."""
        return [] if self.roster is None else self.roster.vacant()

    def node_devices(self) -> list[dict[str, Any]]:
        """Each node's device, GPU, torch and CUDA versions (its ``query.node`` facts), by
        partition id in roster order, for the run's config.json."""
        if self.roster is None:
            return []
        facts = [self.roster.facts[node] for node in self.roster.active]
        return [{PARTITION_ID: f[PARTITION_ID], **devices(f)} for f in facts]

    # -- checkpoint -------------------------------------------------------------------------------
    def state_record(self) -> RecordDict:
        """Everything a fresh strategy with the same settings needs to continue exactly: the
        generator, the roster and the book, and the family's state (its segments apart)."""
        state = RecordDict()
        if self.sampler is not None:
            state[_RNG] = rng_record(self.sampler.rng)
        if self.roster is not None:
            state[_ROSTER] = self.roster.to_record()
            state[_BOOK] = self.book.to_record()
            family = self.family_state()
            if family is not None:
                for key, record in encode_state(family, self.state_context()).items():
                    state[key] = record
        return state

    def load_state_record(
        self, state: RecordDict, segments: Mapping[str, RecordDict] | None = None
    ) -> None:
        """Restore what ``state_record`` wrote, with the segments the checkpoint kept beside it
        (``DecodeError`` if anything does not fit)."""
        if self.sampler is not None:
            self.sampler.rng = restore_rng(state.get(_RNG))
        records = {k: v for k, v in state.items() if k not in _COMMON}
        if _ROSTER not in state:
            if records:
                raise DecodeError(f"family state {sorted(records)} without a roster")
            return
        self.roster = Roster.from_record(state[_ROSTER])
        self.book = NodeBook.from_record(state[_BOOK], self.label, self.slot)
        if self.State is not None:
            context = {**self.state_context(), SEGMENTS: dict(segments or {})}
            self.load_family_state(decode_state(self.State, records, context))
        elif records:
            raise DecodeError(f"{self.label} keeps no family state, got {sorted(records)}")

    def state_context(self) -> dict[str, Any]:
        """What decoding the family's state needs besides its records (``state_codec``): the
        roster's number of positions; families add theirs (a ParamLayout, limits, ...)."""
        return {POSITIONS: self.book.positions}

    def family_state(self) -> Any:
        """The family's ``State`` (called once the roster is known); None: nothing to save."""
        return None

    def load_family_state(self, state: Any) -> None:
        """Restore ``family_state``'s ``State``, decoded and validated (the roster and book
        are back)."""

    def segment_names(self) -> list[str]:
        """The live append-only parts of the state (``server_app.segment_log``): records that
        never change once made, which the checkpoint writes once and lists by name; none by
        default. Decoding finds them in the context's ``SEGMENTS``."""
        return []

    def segment_record(self, name: str) -> RecordDict:
        """The records of segment ``name`` (one of ``segment_names``)."""
        raise KeyError(f"{self.label} has no segment {name!r}")
