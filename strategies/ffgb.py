"""Server half of FFGB, FFGB.C and FFGB.L: averages the nodes' functions, i.e. merges ensembles
(Algorithm 1 of the FFGB paper), and keeps every node's copy current with deltas.

The strategy supplies the round lifecycle's hooks and is assembled from parts, one file each:
the global ensemble and each node's copy of it (``strategies.ensemble_sync``), the checks a reply
passes before it counts (``strategies.ffgb_replies``: architecture, size, the schedule's
weights), the boosting rounds (``RoundBoosting`` here, or FFGB.L in one shot,
``strategies.ffgb_one_shot``) and the global distillation phase
(``strategies.ffgb_distillation``). The average is over the replies that pass, in partition
order (appendix F: m of N nodes per round with ``fraction-train``). The server keeps its test-set
predictions, updated from each round's new learners only.

With ``relay-encryption`` the nodes seal their learners under a group key the server never holds
(``strategies.group_key``, ``functions.learner_sealing``): the ensemble holds sealed learners,
which the sync counts, weights, relays and checkpoints as any, and the metrics come from
federated evaluation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.acceptance import acceptance_config
from functions.ensembles import Ensemble, PredictionCache
from functions.errors import DecodeError
from functions.protocol import (
    CONFIG,
    DELTA,
    DELTA_ARRAYS,
    EVALUATE,
    EVALUATE_FIRST,
    STUDENT,
    STUDENT_ARRAYS,
    TRAIN,
)
from functions.secure_sum import GROUP_KEY
from oracles.distillation import NONE
from run_config.common import RunSettings
from run_config.ffgb import DISTILL, FFGBSettings, check_task, ffgb_settings
from strategies.base import FederatedStrategy
from strategies.ensemble_sync import EnsembleSync, StoredEnsemble, SyncSlot
from strategies.evaluation import (
    EvaluationSums,
    central_figures,
    decode_evaluation_sums,
    federated_figures,
)
from strategies.ffgb_distillation import SPEC, GlobalDistillation, StoredStudent
from strategies.ffgb_one_shot import OneShotBoosting
from strategies.ffgb_replies import CheckedIncrement, FFGBReplies
from strategies.group_key import GroupKey
from strategies.node_book import NodeBook
from strategies.sampling import Sampler
from strategies.screening import Screened
from strategies.state_codec import LIMITS, checks
from tasks.datasets import TaskData
from tasks.devices import resolve_device

TEST_POINTS, OUTPUTS = "test-points", "outputs"  # state-decoding context: the test set's shape


@dataclass
class FFGBState:
    """What an FFGB run continues from: the ensemble (its learners in segments), the learner
    counts behind ``models_exchanged``, the distillation's student and FedAvg rounds, the
    central test-set values, and the one-shot pool's roster positions and those of the nodes
    that joined since and have not fitted their learners yet."""

    ensemble: StoredEnsemble
    learners_up: int
    learners_down: int
    student_rounds: int
    student: StoredStudent | None
    test_values: np.ndarray | None = field(metadata=checks(shape=(TEST_POINTS, OUTPUTS)))
    pool: tuple[int, ...] | None
    joined: tuple[int, ...] | None


class RoundBoosting:
    """Algorithm 1's rounds: the sampled nodes' increments are averaged into f."""

    def recipients(self, server_round: int, nodes: list[int], book: NodeBook) -> list[int]:
        return nodes

    def combine(
        self,
        server_round: int,
        good: dict[int, CheckedIncrement],
        book: NodeBook,
        sync: EnsembleSync,
        test_cache: PredictionCache | None,
    ) -> tuple[int, int]:
        """The plain average of the replies; returns (participants, learners received)."""
        if good:
            before = sync.average([(book[node], c.delta) for node, c in good.items()])
            if test_cache is not None:
                test_cache.update(sync.ensemble.delta(before))
        return len(good), sum(len(c.delta.learners) for c in good.values())

    def evaluation_nodes(self, server_round: int, book: NodeBook) -> list[int]:
        return list(book.node_ids)

    def join(self, position: int) -> None:
        """A node joined at ``position``: the next rounds' sampling takes it in."""

    def state(self) -> tuple[None, None]:
        """Nothing besides the ensemble."""
        return None, None

    def load_state(
        self,
        pool: tuple[int, ...] | None,
        joined: tuple[int, ...] | None,
        sync: EnsembleSync,
        positions: int,
    ) -> None:
        if pool is not None or joined is not None:
            raise DecodeError("pool: a one-shot state, loaded by a multi-round run")


class FFGBStrategy(FederatedStrategy):
    """FFGB family on Flower's Message API: delta-synced ensembles, partial participation."""

    label = "FFGB"
    State = FFGBState
    slot = SyncSlot

    def __init__(
        self,
        ffgb: FFGBSettings,
        task: TaskData,
        central_device: torch.device | None,
        fraction: float,
        seed: int,
        num_rounds: int,
    ) -> None:
        super().__init__(num_rounds)
        self.ffgb, self.task = ffgb, task
        self.replies = FFGBReplies(ffgb, task)
        self.loss, self.bound = self.replies.model.loss, self.replies.model.final_bound
        n_features = int(np.prod(task.input_shape))
        self.x_test = task.x_test.reshape(len(task.x_test), n_features)
        self.sync = EnsembleSync(Ensemble.constant(np.zeros(task.num_outputs), n_features))
        self.test_cache: PredictionCache | None = None
        self.central_device = central_device  # None: no central evaluation
        if central_device is not None:
            self.test_cache = PredictionCache(self.x_test, device=central_device)
            self.test_cache.update(self.sync.ensemble.snapshot())
        self.sampler = Sampler(fraction, seed)  # its generator also seeds the student
        self.boosting = (
            OneShotBoosting(ffgb, self.x_test, task.num_outputs, num_rounds)
            if ffgb.one_shot
            else RoundBoosting()
        )
        if ffgb.one_shot:
            self.label = OneShotBoosting.label
        self.distillation = GlobalDistillation(
            self.replies.spec, n_features, task.num_outputs, ffgb.distill_rounds
        )
        self.learners_up = self.learners_down = 0
        self.group = GroupKey(self.label, seed) if ffgb.relay_encryption else None

    @property
    def ensemble(self) -> Ensemble:
        return self.sync.ensemble

    # -- set-up ---------------------------------------------------------------------------------
    def summary(self) -> None:
        f = self.ffgb
        learner = self.replies.model.describe()
        log(
            INFO,
            "\t%s: K=%d, %s steps (eta0=%s, mu=%s), residual=%s, learner %s, oracle %s",
            f.variant,
            f.local_steps,
            f.steps.kind,
            f.steps.eta0,
            f.mu,
            f.residual,
            learner,
            f.oracle,
        )
        if f.distill != NONE or f.distill_every:
            log(
                INFO,
                "\tdistillation: client side %s; global every %d boosting rounds "
                "(%d FedAvg rounds of %d steps)",
                f.distill,
                f.distill_every,
                f.distill_rounds,
                f.distill_steps,
            )

    def description(self) -> dict[str, Any]:
        described = {
            "kind": "ensemble",
            "learner": self.ffgb.learner,
            "learners": len(self.ensemble.learners),
        }
        return {**described, "one_shot": True} if self.ffgb.one_shot else described

    # -- messages -------------------------------------------------------------------------------
    def _message(
        self, node: int, server_round: int, kind: str, share: bool, student: bool = False
    ) -> Message:
        """The node's delta (``EnsembleSync``; with ``share`` the one of every node at its
        version), its acceptance state, and in a distillation round the student."""
        slot = self.book[node]
        config, arrays, learners = self.sync.records_for(slot, share)
        content = RecordDict(
            {
                DELTA: config,
                DELTA_ARRAYS: arrays,
                CONFIG: ConfigRecord(acceptance_config(server_round, slot.last_accepted)),
            }
        )
        if kind == TRAIN and self.evaluation_due is not None:
            content[CONFIG][EVALUATE_FIRST] = True
        if self.group is not None:
            content[GROUP_KEY] = self.group.record(node)
        if student:
            content[STUDENT], content[STUDENT_ARRAYS] = self.distillation.records()
            self.learners_down += 1
        self.learners_down += learners
        return Message(content, node, kind, group_id=str(server_round))

    # -- training -------------------------------------------------------------------------------
    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """The boosting part's recipients get their deltas; in a distillation round every
        sampled node also gets the student."""
        phase, index = self.ffgb.phase(server_round)
        distilling = phase == DISTILL
        if distilling:
            self.distillation.begin(index, self.sampler.rng)
        else:
            nodes = self.boosting.recipients(server_round, nodes, self.book)
        nodes = self._keyed(grid, server_round, nodes)
        log(
            INFO,
            "%s round %d: %d of %d nodes %s; ensemble of %d learners",
            self.label,
            server_round,
            len(nodes),
            len(self.book.node_ids),
            f"distil it ({index}/{self.ffgb.distill_rounds})" if distilling else "train",
            len(self.ensemble.learners),
        )
        share = self.ffgb.shares_downlink(len(nodes))
        return [self._message(node, server_round, TRAIN, share, distilling) for node in nodes]

    def _keyed(self, grid: Grid, server_round: int, nodes: list[int]) -> list[int]:
        """With relay encryption, those of ``nodes`` that hold the group key (``GroupKey``; a
        node that may have lost its state is asked its sealing key again); else ``nodes``. The
        others sit the round out, a warning of the run."""
        if self.group is None:
            return nodes
        for node in nodes:
            if self.book[node].needs_sync:
                self.group.forget(node)
        ready, failures = self.group.set_up(
            grid, server_round, nodes, self.book.node_ids, self.ensemble.version == 0
        )
        self.count_failures(failures)
        if len(ready) < len(nodes):
            missing = len(nodes) - len(ready)
            self.warn(
                server_round,
                f"{missing} of {len(nodes)} nodes hold no group key yet and sit this round out",
            )
        return ready

    def on_rebind(self, old: int, new: int, server_round: int) -> None:
        """A node that comes back is asked its sealing key again (relay encryption)."""
        if self.group is not None:
            self.group.forget(old)

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """Its first message brings the whole ensemble (a new slot holds nothing)."""
        self.boosting.join(self.book.position(node))

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """Its learners stay in f; with relay encryption its sealing key is dropped (it still
        knows the group key: the key is not rotated)."""
        self.on_rebind(node, node, server_round)

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        phase, index = self.ffgb.phase(server_round)
        if phase == DISTILL:
            metrics = self._distill(server_round, index, replies)
        else:
            good = self.screen(
                server_round,
                replies,
                lambda r: self.replies.increment(r, self.ensemble.version, index),
            )
            self.book.accept(server_round, good)
            participants, received = self.boosting.combine(
                server_round, good, self.book, self.sync, self.test_cache
            )
            self.learners_up += received
            metrics = {"participants": participants}
            if good and not self.ffgb.one_shot:
                metrics["oracle_error"] = float(np.mean([c.oracle_error for c in good.values()]))
                if self.ffgb.distill != NONE:
                    metrics["distill_error"] = float(
                        np.mean([c.distill_error for c in good.values()])
                    )
        metrics.update(self._size_metrics())
        return None, metrics

    def _distill(
        self, server_round: int, index: int, replies: Iterable[Message]
    ) -> dict[str, float]:
        """A FedAvg round of the student; after the last one the student replaces f."""
        good = self.screen(server_round, replies, self.replies.student)
        self.book.accept(server_round, good)
        self.learners_up += len(good)
        metrics, student = self.distillation.combine(index, good)
        if index >= self.ffgb.distill_rounds:
            if student is None:
                self.warn(server_round, "no node trained the student; the ensemble stays as it is")
            else:
                before = self.sync.replace(student, list(self.book.slots.values()))
                if self.test_cache is not None:
                    self.test_cache.update(self.ensemble.delta(before))
                log(INFO, "%s: the ensemble is replaced by its distilled student", self.label)
        return {"participants": len(good), **metrics}

    def _size_metrics(self) -> dict[str, float]:
        """``ensemble_size`` and ``models_exchanged``: learners up and down so far, per node
        (the paper's count, section 4.1: N K per round with full participation)."""
        return {
            "ensemble_size": len(self.ensemble.learners),
            "models_exchanged": (self.learners_up + self.learners_down) / len(self.book.node_ids),
        }

    # -- evaluation -----------------------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message brings every node f^t's new
        learners (not in one shot, whose nodes train once)."""
        f = self.ffgb
        return f.federated_eval and f.eval_with_train and not f.one_shot

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if not self.ffgb.federated_eval:
            return []
        if self.defers_evaluation(server_round):
            return []
        nodes = self.boosting.evaluation_nodes(server_round, self.book)
        if self.group is not None:  # keys are set up with the training, whose figures count it
            nodes = [node for node in nodes if self.group.holds(node)]
        share = self.ffgb.shares_downlink(len(nodes))
        return [self._message(node, server_round, EVALUATE, share) for node in nodes]

    def check_evaluation_record(self, record: Any, node: int) -> EvaluationSums:
        return decode_evaluation_sums(record, self.task)

    def on_evaluation_screened(self, screened: Screened) -> None:
        self.book.lost(screened.errors)  # they may not hold what we sent

    def evaluation_metrics(self, accepted: dict[int, EvaluationSums]) -> dict[str, float]:
        combined = federated_figures(
            accepted.values(), self.task.kind, central=self.test_cache is not None
        )
        return {**combined, **self._size_metrics()}

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        if self.test_cache is None:
            return {}
        values = self.test_cache.values
        if self.bound is not None:
            values = np.clip(values, -self.bound, self.bound)
        loss, correct = self.loss.sums(values, self.task.y_test)
        return central_figures(loss, correct, len(self.task.y_test))

    # -- state ----------------------------------------------------------------------------------
    def state_context(self) -> dict[str, Any]:
        return {
            **super().state_context(),
            LIMITS: self.replies.limits,
            SPEC: self.replies.spec,
            TEST_POINTS: len(self.x_test),
            OUTPUTS: self.task.num_outputs,
        }

    def family_state(self) -> FFGBState:
        student = self.distillation.student
        return FFGBState(
            StoredEnsemble(self.ensemble),
            self.learners_up,
            self.learners_down,
            self.distillation.student_rounds,
            None
            if student is None
            else StoredStudent(student, self.x_test.shape[1], self.task.num_outputs),
            None if self.test_cache is None else self.test_cache.values,
            *self.boosting.state(),
        )

    def load_family_state(self, state: FFGBState) -> None:
        if (state.test_values is None) != (self.test_cache is None):
            raise DecodeError(
                "test-values: saved with central evaluation, loaded without (or "
                "the other way round)"
            )
        self.sync.restore(state.ensemble.ensemble)
        self.learners_up, self.learners_down = state.learners_up, state.learners_down
        self.distillation.student_rounds = state.student_rounds
        self.distillation.student = None if state.student is None else state.student.network
        if self.test_cache is not None:
            self.test_cache = PredictionCache(
                self.x_test, self.ensemble.version, state.test_values, self.central_device
            )
        self.boosting.load_state(state.pool, state.joined, self.sync, self.book.positions)

    def segment_names(self) -> list[str]:
        return self.sync.segment_names() if self.book is not None else []

    def segment_record(self, name: str) -> RecordDict:
        return self.sync.segment_record(name)


def build_ffgb(settings: RunSettings, task: TaskData) -> FFGBStrategy:
    """FFGB, FFGB.C or FFGB.L (``algorithm``) from the ``ffgb.*`` table; FFGB.L in one shot
    with ``ffgb.one-shot``."""
    ffgb = ffgb_settings(settings)
    check_task(ffgb, task)
    return FFGBStrategy(
        ffgb,
        task,
        resolve_device(settings.central_device, "central-device")
        if settings.central_evaluation
        else None,
        settings.fraction_train,
        settings.seed,
        settings.num_rounds,
    )
