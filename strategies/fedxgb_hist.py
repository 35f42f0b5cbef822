"""Server half of ``fedxgb-hist``: XGBoost's ``hist`` trees grown from the nodes' summed
gradient histograms, so the booster is the one XGBoost would train on every node's rows pooled.

Before round 1 every node sends a quantile sketch of each column (``query.sketch``); the server
merges them into the bin edges of the run (``oracles.hist_xgboost.merge_sketches``) and keeps
them for the run (and its checkpoint). With ``fedxgb-hist.bins='grid'`` each node sends its
counts on a fixed grid instead, and the edges are quantiles of their sum (``grid_edges``).

A round is one boosting iteration: one tree, or one per class, grown depth-wise. Each level
sends every node the trees so far (the first level also the booster and the edges, whose
margins and bins a node keeps for the others) and sums the histograms of the open leaves that
come back (below the root only the smaller child of each split is asked for: the other is the
parent's minus it); the server picks each split and leaf weight by XGBoost's rules
(``oracles.hist_xgboost``). The level messages go out from
``train_messages`` through the grid itself, so the round's template gets no train message of
its own; ``aggregate`` reports what the levels did.

The nodes whose root histograms were summed are the iteration's: if one of them fails or is
dropped at a deeper level, the iteration's trees would mix sums over different rows, so the
iteration is dropped (the booster stays as it was, the round says why) and the next round starts
again from the root with the nodes that answer.

With ``secure-aggregation`` the grid counts and every level's histograms (every slot) are secure
sums (``strategies.secure_sum``): the server reads the sums, never a node's. With
``dp.noise-multiplier`` every such release carries Gaussian noise (``strategies.hist_noise``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.bins import BinLayout, GrowingTree
from functions.boosters import Booster, encode_booster, raw_record
from functions.errors import DecodeError
from functions.histograms import (
    Sketch,
    check_summed,
    checked_layout,
    growing_record,
    layout_record,
    read_grid,
    read_histograms,
    read_sketch,
)
from functions.params import arrays_to_record
from functions.protocol import (
    ARRAYS,
    CONFIG,
    DENSE_HISTOGRAMS,
    DP_NOISE_STD,
    EVALUATE_FIRST,
    EVALUATION,
    GRID_CELLS,
    GROWING,
    HISTOGRAMS,
    LAYOUT,
    QUERY_SKETCH,
    SERVER_ROUND,
    SKETCH,
    TRAIN,
    TREES_DIGEST,
    TREES_HELD,
)
from functions.secure_sum import SumField
from functions.xgboost_trees import trees_digest
from oracles.hist_xgboost import SQUARED, Exchange, grid_edges, grow_iteration, merge_sketches
from oracles.xgboost_local import INSTALL, available
from run_config.common import RunSettings
from run_config.fedxgb_hist import FedXgbHistSettings, check_task, fedxgb_hist_settings
from strategies.base import Diverged
from strategies.evaluation import example_limit
from strategies.fedxgb import StoredBooster, XgbStrategy
from strategies.hist_noise import MARGIN, HistogramNoise, cleaned, noisy_counts
from strategies.privacy_budget import Releases
from strategies.screening import exact_records, screen_replies
from strategies.secure_sum import SecureAggregator, SecureOutcome
from strategies.state_codec import POSITIONS, checks
from tasks.datasets import TaskData
from tasks.errors import ConfigError


class IterationDropped(RuntimeError):
    """A node whose root histograms were summed did not answer a deeper level."""


@dataclass
class FedXgbHistState:
    """What a run continues from: the booster, the agreed edges (flat, and how many per
    feature: empty until agreed) and each roster position's training rows (-1: not known)."""

    booster: StoredBooster
    edges: np.ndarray = field(metadata=checks(shape=(None,)))
    edge_counts: np.ndarray = field(metadata=checks("int64", shape=(None,)))
    rows: np.ndarray = field(metadata=checks("int64", shape=(POSITIONS,)))


@dataclass
class FedXgbHistPrivateState(FedXgbHistState):
    """With differential privacy, also the releases of its budget (``Releases``)."""

    multipliers: np.ndarray = field(metadata=checks(shape=(None,)))
    sizes: np.ndarray = field(metadata=checks("int64", shape=(None,)))


class FedXgbHist(XgbStrategy):
    """Histogram-based federated XGBoost (see the module docstring)."""

    label = "FedXgbHist"
    State = FedXgbHistState

    def __init__(
        self,
        hist: FedXgbHistSettings,
        task: TaskData,
        central_evaluation: bool,
        seed: int = 0,
        num_rounds: int = 0,
    ) -> None:
        super().__init__(hist, task, central_evaluation, num_rounds)
        self.hist, self.params = hist, hist.tree_params()
        self.objective = hist.objective(task)
        self.secure = SecureAggregator(self.label, seed) if hist.secure_aggregation else None
        self.seed = seed
        self.noise = None
        if hist.dp_noise_multiplier > 0:
            self.noise = HistogramNoise.of(
                hist.dp_noise_multiplier,
                hist.dp_delta,
                self.objective,
                self.spec.outputs,
                self.spec.num_feature,
            )
            self.State = FedXgbHistPrivateState
            least = max(self.params.min_child_weight, self.noise.least_hessian(hist.max_bin))
            self.params = replace(self.params, min_child_weight=least)
        self.layout: BinLayout | None = None
        self.rows = np.zeros(0, np.int64)  # each roster position's training rows (-1: unknown)
        self.trees_held: dict[int, int] = {}  # by roster position: the booster's first trees
        # the node holds (its margins are of them); a node not here is sent the whole booster
        self.levels = self.participants = self.asked = self.answered = 0
        self.dropped_reason = ""

    def summary(self) -> None:
        h = self.hist
        log(
            INFO,
            "\tfedxgb-hist: %s, depth <= %d, eta %s, lambda %s, gamma %s, min_child_weight %s, "
            "<= %d bins a feature",
            self.objective,
            h.max_depth,
            h.eta,
            h.reg_lambda,
            h.gamma,
            h.min_child_weight,
            h.max_bin,
        )

    def description(self) -> dict[str, Any]:
        bins = None if self.layout is None else [len(e) + 1 for e in self.layout.edges]
        return {**super().description(), "objective": self.objective, "bins": bins}

    def on_rebind(self, old: int, new: int, server_round: int) -> None:
        """A node that lost its state holds no trees and no secure-aggregation key: it is sent
        the whole booster and set up again."""
        self.trees_held.pop(self.book.position(new), None)
        if self.secure is not None:
            self.secure.forget(old)
            self.secure.forget(new)

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """Its rows are not known yet (its first round asks them, as of a node the agreement
        missed; with secure aggregation the server knows only their bound, as of every node);
        its first message brings the whole booster, so it takes part from this round's trees
        on."""
        rows = example_limit(self.task) if self.secure is not None else -1
        self.rows = np.append(self.rows, np.int64(rows))

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """The next trees are grown from the other nodes' histograms."""
        self.trees_held.pop(position, None)
        if self.secure is not None:
            self.secure.forget(node)

    # -- the edges, once ------------------------------------------------------------------------
    def on_roster(self, grid: Grid, server_round: int) -> None:
        self.rows = np.full(self.book.positions, -1, np.int64)
        if self.layout is None:
            self.layout = self._agree_edges(grid, server_round)
        self._check_histogram_size()

    def _agree_edges(self, grid: Grid, server_round: int) -> BinLayout:
        if self.hist.bins == "grid":
            counts, nodes = self._grid(grid, server_round, self.book.node_ids)
            edges, source = grid_edges(counts, self.hist.max_bin), "grid counts"
        else:
            sketches = self._sketches(grid, server_round, self.book.node_ids)
            if not sketches:
                raise RuntimeError(f"{self.label}: no node sent a usable sketch; no bins to agree")
            edges = merge_sketches(
                [s.points for s in sketches.values()],
                [s.counts for s in sketches.values()],
                self.hist.max_bin,
            )
            nodes, source = len(sketches), "sketches"
        layout = BinLayout(tuple(edges))
        log(
            INFO,
            "%s: bin edges agreed from %d nodes' %s: %d features, %d bins in all",
            self.label,
            nodes,
            source,
            layout.num_features,
            layout.num_slots - layout.num_features,
        )
        return layout

    def _grid(self, grid: Grid, server_round: int, nodes: list[int]) -> tuple[np.ndarray, int]:
        """The nodes' grid counts summed (securely with ``secure-aggregation``; with noise under
        ``dp.noise-multiplier``) and how many nodes are in the sum. Each node's rows are kept:
        with a secure sum, only their bound."""
        d, cells, most = self.spec.num_feature, self.hist.sketch_size, example_limit(self.task)
        content = RecordDict({CONFIG: ConfigRecord({GRID_CELLS: cells})})
        messages = [Message(content, n, QUERY_SKETCH, group_id=str(server_round)) for n in nodes]
        if self.secure is not None:
            share = 0.0 if self.noise is None else self.noise.share(self.noise.grid, len(nodes))
            if share:
                content[CONFIG][DP_NOISE_STD] = share
            fields = [
                SumField(SKETCH, "cells", d * cells, most + MARGIN * share, integer=not share),
                SumField(SKETCH, "rows", 1, most + MARGIN * share, integer=not share),
            ]
            outcome = self.secure.exchange(grid, server_round, messages, fields)
            self.count_failures(outcome.failures)
            if outcome.error:
                raise RuntimeError(f"{self.label}: no bins to agree: {outcome.error}")
            self.rows[:] = most  # every node's, as far as the server knows
            sums = {k: noisy_counts(outcome.sums[f"{SKETCH}/{k}"]) for k in ("cells", "rows")}
            if self.noise is not None:
                self.noise.release(True, len(outcome.contributors), len(nodes))
                return sums["cells"].reshape(d, cells), len(outcome.contributors)
            counts = read_grid(arrays_to_record(sums), d, cells, most * len(outcome.contributors))
            return counts[0], len(outcome.contributors)

        def decode(reply: Message) -> tuple[np.ndarray, int]:
            record = exact_records(reply.content, {SKETCH: ArrayRecord})[SKETCH]
            return read_grid(record, d, cells, most)

        screened = screen_replies(
            self.label, server_round, grid.send_and_receive(messages), decode, nodes
        )
        self.count_failures(screened.rejected)
        answers = screened.in_order(nodes)
        if not answers:
            raise RuntimeError(f"{self.label}: no node sent usable grid counts; no bins to agree")
        for node, (_, rows) in answers.items():
            self.rows[self.book.position(node)] = rows
        counts = sum(counts for counts, _ in answers.values())
        if self.noise is not None:  # the server's noise on the plain sum
            rng = np.random.default_rng([self.seed, server_round, 0])
            counts = noisy_counts(self.noise.central([counts], self.noise.grid, rng)[0])
            self.noise.release(False, len(answers), len(nodes))
        return counts, len(answers)

    def _sketches(self, grid: Grid, server_round: int, nodes: list[int]) -> dict[int, Sketch]:
        """Ask ``nodes`` for their sketches; the usable ones, in roster order (each node's rows
        kept: its histograms may count no more)."""
        d, size = self.spec.num_feature, self.hist.sketch_size

        def decode(reply: Message) -> Sketch:
            return read_sketch(exact_records(reply.content, {SKETCH: ArrayRecord})[SKETCH], d, size)

        questions = [
            Message(RecordDict(), n, QUERY_SKETCH, group_id=str(server_round)) for n in nodes
        ]
        screened = screen_replies(
            self.label, server_round, grid.send_and_receive(questions), decode, nodes
        )
        self.count_failures(screened.rejected)
        sketches = screened.in_order(nodes)
        for node, sketch in sketches.items():
            self.rows[self.book.position(node)] = sketch.rows
        return sketches

    def _check_histogram_size(self) -> None:
        """ConfigError before round 1 when one level's sums (every open leaf x every slot, 24
        bytes each: what the server holds, and a node builds before it sends the occupied
        slots) could outgrow ``fedxgb-hist.max-histogram-bytes``."""
        leaves = self.spec.outputs * 2 ** (self.hist.max_depth - 1)
        largest = 24 * leaves * self.layout.num_slots
        if largest > self.hist.max_histogram_bytes:
            raise ConfigError(
                f"one level's histograms may reach {largest} bytes ({leaves} open leaves x "
                f"{self.layout.num_slots} bins x 24), more than fedxgb-hist.max-histogram-bytes="
                f"{self.hist.max_histogram_bytes}: lower fedxgb-hist.max-depth or max-bin"
            )

    # -- a round: one boosting iteration --------------------------------------------------------
    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """Grow the round's trees level by level through ``grid``; no message is left for the
        template to send."""
        self.levels, self.participants, self.dropped_reason = 0, 0, ""
        self.asked, self.answered = len(nodes), 0
        self._learn_rows(grid, server_round, nodes)
        members: list[int] = []
        try:
            trees = grow_iteration(
                self.layout,
                self.params,
                self.spec.outputs,
                self._level_exchange(grid, server_round, nodes, members),
                exact=self.hist.min_bin_count <= 1,
            )
        except IterationDropped as err:
            return self._drop(server_round, str(err))
        booster = Booster(self.spec, self.booster.trees + tuple(trees))
        raw = encode_booster(booster)
        if len(raw) > self.spec.max_bytes:
            return self._drop(
                server_round, "the booster would outgrow fedxgb-hist.max-booster-bytes"
            )
        self._hold(booster, raw)
        self.participants = len(members)
        log(
            INFO,
            "%s round %d: %d tree(s) grown from %d nodes' histograms in %d level(s)",
            self.label,
            server_round,
            len(trees),
            len(members),
            self.levels,
        )
        return []

    def _learn_rows(self, grid: Grid, server_round: int, nodes: list[int]) -> None:
        """The row counts of the ``nodes`` whose count is not known yet: from their grid counts
        (a node the agreement missed) or their sketches (a resumed run, or a node that came
        back under a new id)."""
        unknown = [n for n in nodes if self.rows[self.book.position(n)] < 0]
        if unknown and self.hist.bins == "grid":  # a node the agreement missed: its rows
            self._grid(grid, server_round, unknown)
        elif unknown:  # a resumed run, or a node that came back under a new id
            self._sketches(grid, server_round, unknown)

    def _drop(self, server_round: int, reason: str) -> list[Message]:
        """The round's iteration is dropped (the booster stays as it was): its row says so and
        the run's outcome keeps the reason; no message is left for the template to send."""
        self.dropped_reason = reason
        self.warn(server_round, f"iteration dropped: {reason}")
        return []

    def _level_exchange(
        self, grid: Grid, server_round: int, nodes: list[int], members: list[int]
    ) -> Exchange:
        """``grow_iteration``'s exchange: one level through ``_level``. The nodes whose root
        histograms are summed become ``members`` (filled in here), and every later level must
        be theirs: ``IterationDropped`` names the members missing from one."""

        def exchange(trees: list[GrowingTree], leaves: list[tuple[int, int]]):
            sums = self._level(grid, server_round, members or nodes, trees, leaves)
            if not members:
                members.extend(sums[3])
                self.answered = len(members)
                self._held_after_root(nodes, members)
            elif sums[3] != members:
                missing = sorted(set(members) - set(sums[3]))
                self._held_after_root(missing, [])
                raise IterationDropped(
                    f"node(s) {missing} answered the root but not level {self.levels - 1}"
                )
            return sums[:3]

        return exchange

    def _level(
        self,
        grid: Grid,
        server_round: int,
        nodes: list[int],
        trees: list[GrowingTree],
        leaves: list[tuple[int, int]],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Send one level's question to ``nodes``; the summed histograms of the accepted
        replies and who sent them (roster order)."""
        content = RecordDict(
            {
                GROWING: growing_record(trees, leaves),
                CONFIG: ConfigRecord({SERVER_ROUND: server_round}),
            }
        )
        root, due = self.levels == 0, self.evaluation_due
        if root:  # once a round: the nodes keep the margins and the edges
            content[LAYOUT] = layout_record(self.layout)
            if due is not None:
                content[CONFIG][EVALUATE_FIRST] = True
        self.levels += 1
        if self.secure is not None:
            content[CONFIG][DENSE_HISTOGRAMS] = True
        shared = self._with_booster(content) if root else None
        messages = [
            Message(
                shared(self.trees_held.get(self.book.position(n))) if root else content,
                n,
                TRAIN,
                group_id=str(server_round),
            )
            for n in nodes
        ]
        if self.secure is not None:
            return self._secure_level(grid, server_round, messages, len(leaves), root)
        replies = list(grid.send_and_receive(messages))
        if not root or due is None:
            return self.sum_level(server_round, replies, len(leaves))
        return self._root_with_evaluation(server_round, due, nodes, replies, len(leaves))

    def _with_booster(self, content: RecordDict) -> Callable[[int | None], RecordDict]:
        """The root's content for a node holding the booster's first h trees: the others
        (``trees-held``, with the held trees' digest), or the whole booster when h is None;
        one content for each h, encoded once and shared by its nodes."""
        contents: dict[int | None, RecordDict] = {}
        count = len(self.booster.trees)

        def of(held: int | None) -> RecordDict:
            held = held if held is not None and held <= count else None
            if held not in contents:
                extra: dict[str, Any] = {}
                record = self.record
                if held is not None:  # a booster of the other trees alone
                    trees = self.booster.trees
                    record = raw_record(encode_booster(Booster(self.spec, trees[held:])))
                    extra = {TREES_HELD: held, TREES_DIGEST: trees_digest(trees[:held])}
                contents[held] = RecordDict(
                    {**content, ARRAYS: record, CONFIG: ConfigRecord({**content[CONFIG], **extra})}
                )
            return contents[held]

        return of

    def _held_after_root(self, nodes: list[int], answered: list[int]) -> None:
        """The root's booster is held by the nodes whose root histograms were summed; any other
        node asked may hold anything, and is sent the whole booster next time."""
        count, position = len(self.booster.trees), self.book.position
        for node in nodes:
            if node in answered:
                self.trees_held[position(node)] = count
            else:
                self.trees_held.pop(position(node), None)

    def _root_with_evaluation(
        self, server_round: int, due: int, nodes: list[int], replies: list[Message], leaves: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """The root level's sums when round ``due``'s evaluation rode on it: each reply's
        evaluation is taken out and checked first (a bad one drops the reply); the evaluations
        of the nodes whose root histograms were used make round ``due``'s
        (``late_evaluation``), whatever becomes of the iteration below the root."""
        self.evaluation_due, self._asked_to_evaluate = None, frozenset(nodes)
        replies, evaluations = self._split_evaluations(due, replies)
        members: list[int] = []
        try:
            sums = self.sum_level(server_round, replies, leaves)
            members = sums[3]
            return sums
        finally:
            accepted = {n: evaluations[n] for n in members if n in evaluations}
            self.late_evaluation = (
                due,
                self._evaluation_figures(accepted, len(nodes) - len(accepted)),
            )

    def _secure_level(
        self, grid: Grid, server_round: int, messages: list[Message], leaves: int, root: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """One level's histograms summed by a secure sum (``secure-aggregation``): the server
        reads the sums and who is in them, never a node's. At the root, the evaluations that
        rode on it are the contributors' (a bad one no longer drops their histograms, which
        are in the sum)."""
        size = leaves * self.layout.num_slots
        rows = int(self.rows.max())
        gradient, hessian = self._gradient_bounds()
        nodes = [m.metadata.dst_node_id for m in messages]
        share = 0.0 if self.noise is None else self.noise.share(self.noise.levels, len(nodes))
        if share:
            messages[0].content[CONFIG][DP_NOISE_STD] = share  # one content for all
        margin = MARGIN * share
        fields = [
            SumField(HISTOGRAMS, "grad", size, rows * gradient + margin),
            SumField(HISTOGRAMS, "hess", size, rows * hessian + margin),
            SumField(HISTOGRAMS, "count", size, rows + margin, integer=not share),
        ]
        asked = root and self.evaluation_due is not None
        outcome = self.secure.exchange(
            grid, server_round, messages, fields, check=partial(self._riding_only, asked)
        )
        self.count_failures(outcome.failures)
        if root and self.evaluation_due is not None:
            self._secure_evaluations(outcome, nodes)
        level = self.levels - 1
        if outcome.error:
            if len(outcome.nonfinite) == len(messages):
                raise Diverged(
                    server_round, f"every node's histograms at level {level}: NaN or inf"
                )
            raise IterationDropped(f"no secure sum at level {level}: {outcome.error}")
        sums = [
            outcome.sums[f"{HISTOGRAMS}/{n}"].reshape(leaves, -1) for n in ("grad", "hess", "count")
        ]
        if self.noise is not None:
            self.noise.release(True, len(outcome.contributors), len(nodes))
            return (*cleaned(*sums), outcome.contributors)
        total = int(self.rows[[self.book.position(n) for n in outcome.contributors]].sum())
        try:
            check_summed(*sums, self.layout, total)
        except DecodeError as err:
            raise IterationDropped(f"the secure sum at level {level} holds no histograms: {err}")
        return (*sums, outcome.contributors)

    def _riding_only(self, asked: bool, reply: Message) -> None:
        """What a secure level's reply may hold besides its masked vector: the evaluation the
        root level asked for, checked (``DecodeError`` otherwise: the reply is dropped whole)."""
        kinds = {EVALUATION: MetricRecord} if asked else {}
        record = exact_records(reply.content, kinds).get(EVALUATION)
        if record is not None:
            self.check_evaluation_record(record, reply.metadata.src_node_id)

    def _secure_evaluations(self, outcome: SecureOutcome, nodes: list[int]) -> None:
        """Round ``evaluation_due``'s figures from the evaluations that rode on the root
        level's replies of the nodes in the sum."""
        due, self.evaluation_due, self._asked_to_evaluate = (
            self.evaluation_due,
            None,
            frozenset(nodes),
        )
        _, evaluations = self._split_evaluations(due, list(outcome.replies.values()))
        accepted = {n: evaluations[n] for n in outcome.contributors if n in evaluations}
        self.late_evaluation = (due, self._evaluation_figures(accepted, len(nodes) - len(accepted)))

    def _gradient_bounds(self) -> tuple[float, float]:
        """The largest |gradient| and hessian of one row: 1 and 1 for the logistic and the
        softmax; for the squared error the booster's largest |margin| plus the declared bound
        on a label (``secure-aggregation.bound``), and 1."""
        if self.objective != SQUARED:
            return 1.0, 1.0
        leaves = [np.abs(t.split_condition[t.left < 0]).max() for t in self.booster.trees]
        return float(sum(leaves)) + abs(self.spec.base_score) + self.hist.secure_bound, 1.0

    def sum_level(
        self, server_round: int, replies: Iterable[Message], leaves: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """The screened replies' histograms of ``leaves`` open leaves, summed, and who sent
        them (roster order); ``IterationDropped`` when none is usable."""
        good = self.screen(server_round, replies, lambda reply: self._histograms(reply, leaves))
        if not good:
            raise IterationDropped(f"no node sent usable histograms at level {self.levels - 1}")
        size = leaves * self.layout.num_slots
        totals = (np.zeros(size), np.zeros(size), np.zeros(size, np.int64))
        for histograms in good.values():
            histograms.add_to(totals)
        grad, hess, count = (a.reshape(leaves, -1) for a in totals)
        if self.noise is not None:  # the server's noise on the plain sums
            rng = np.random.default_rng([self.seed, server_round, self.levels])
            grad, hess, count = cleaned(
                *self.noise.central([grad, hess, count], self.noise.levels, rng)
            )
            self.noise.release(False, len(good), self.asked)
        return grad, hess, count, list(good)

    def _histograms(self, reply: Message, leaves: int):
        node = reply.metadata.src_node_id
        rows = self.rows[self.book.position(node)]
        if rows < 0:
            raise DecodeError("histograms from a node that sent no sketch")
        record = exact_records(reply.content, {HISTOGRAMS: ArrayRecord})[HISTOGRAMS]
        return read_histograms(record, self.layout, leaves, int(rows))

    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's root level brings round t's booster."""
        return self.hist.federated_eval and self.hist.eval_with_train

    def own_exchange(self) -> tuple[int, int]:
        """The nodes asked for the round's root histograms, and those whose root histograms
        were usable: ``min-replies`` counts these (an iteration dropped below the root still
        had them)."""
        return self.asked, self.answered

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, Any]]:
        """What the round's levels did: the participants, the levels and the booster."""
        metrics: dict[str, Any] = {
            "participants": self.participants,
            "histogram_levels": self.levels,
            "iteration_dropped": int(bool(self.dropped_reason)),
            **self._metrics(),
        }
        if self.noise is not None:
            metrics["dp_epsilon"] = self.noise.budget.epsilon()
        return None, metrics

    def privacy(self) -> dict[str, Any] | None:
        return None if self.noise is None else self.noise.budget.record()

    # -- state ----------------------------------------------------------------------------------
    def family_state(self) -> FedXgbHistState:
        edges = self.layout.edges if self.layout is not None else ()
        state = (
            StoredBooster(self.booster),
            np.concatenate([*edges, np.zeros(0)]).astype(np.float64),
            np.array([len(e) for e in edges], np.int64),
            self.rows,
        )
        if self.noise is None:
            return FedXgbHistState(*state)
        releases = self.noise.budget.state()
        return FedXgbHistPrivateState(*state, releases.multipliers, releases.sizes)

    def load_family_state(self, state: FedXgbHistState) -> None:
        if isinstance(state, FedXgbHistPrivateState):
            self.noise.budget.load(Releases(state.multipliers, state.sizes))
        self._hold(state.booster.booster)
        if np.any(state.rows < -1):
            raise DecodeError("rows: a node's training rows below -1 (unknown)")
        self.rows = state.rows.copy()
        if len(state.edge_counts):
            edges = state.edges.astype(np.float32)
            if not np.array_equal(edges, state.edges):
                raise DecodeError("bin-edges: not float32 values")
            self.layout = checked_layout(
                edges, state.edge_counts, self.spec.num_feature, self.hist.max_bin
            )


def build_fedxgb_hist(settings: RunSettings, task: TaskData) -> FedXgbHist:
    """``fedxgb-hist`` from the ``fedxgb-hist.*`` table; ConfigError before any node trains if
    this machine lacks the ``xgboost`` extra or the task has one class."""
    if not available():
        raise ConfigError(f"algorithm={settings.algorithm!r} needs the xgboost package: {INSTALL}")
    check_task(task)
    hist = fedxgb_hist_settings(settings)
    if hist.dp_noise_multiplier > 0 and hist.objective(task) == SQUARED:
        raise ConfigError(
            "dp.noise-multiplier with algorithm='fedxgb-hist' needs a classification task: a "
            "squared error's gradients have no bound, and so no sensitivity"
        )
    return FedXgbHist(hist, task, settings.central_evaluation, settings.seed, settings.num_rounds)
