"""The ``fedxgb.*`` run-config table of the XGBoost baselines, read once by the server and once
per node; and what both halves derive from it for a task: the booster's spec and the loss."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.boosters import BoosterSpec
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from run_config.common import RunSettings
from run_config.family import FUSED_EVALUATION, SAMPLED, Algorithm, Family, Table, require_fusable
from run_config.keys import Key, build, read_keys, within
from tasks.datasets import TaskData

BAGGING, CYCLIC = "fedxgb-bagging", "fedxgb-cyclic"
ALGORITHMS = (BAGGING, CYCLIC)

FEDXGB_KEYS = (
    Key(
        "fedxgb.local-rounds",
        int,
        1,
        "boosting iterations a node adds per round on top of the "
        "global booster (one tree per class each)",
        within(1, 1000),
    ),
    Key(
        "fedxgb.max-depth",
        int,
        6,
        "maximum depth of every tree (XGBoost's `max_depth`; the server refuses deeper trees)",
        within(1, 16),
    ),
    Key(
        "fedxgb.eta",
        float,
        0.3,
        "XGBoost's learning rate η: each new tree's shrinkage",
        within(0, 1, "(]"),
    ),
    Key(
        "fedxgb.scaled-eta",
        bool,
        True,
        "`fedxgb-bagging`: each node boosts with η / "
        "num-partitions, so a round's N sets of trees add up to one step of η (Flower's example's "
        "`scaled-lr`; `false`, its default, diverged on `synthetic` with 10 nodes)",
    ),
    Key(
        "fedxgb.max-booster-bytes",
        int,
        64 * 2**20,
        "largest booster (XGBoost JSON bytes) a "
        "reply, the global booster or a train message may hold, checked before parsing",
        within(1024, 2**31 - 1),
    ),
    Key(
        "fedxgb.federated-eval",
        bool,
        True,
        "evaluate the global booster on every node after "
        "each round (`train_loss`; the test metrics with sites' own data): the whole booster "
        "goes down once more",
    ),
)


@dataclass(frozen=True)
class FedXgbSettings:
    """Everything the XGBoost baselines read from the run config."""

    algorithm: str
    local_rounds: int
    max_depth: int
    eta: float
    scaled_eta: bool
    max_booster_bytes: int
    federated_eval: bool
    eval_with_train: bool = True  # bagging: round t's evaluation rides on round t + 1's training

    @property
    def bagging(self) -> bool:
        return self.algorithm == BAGGING

    def spec(self, task: TaskData) -> BoosterSpec:
        """The run's booster: softmax over the task's classes, or squared error."""
        num_class = task.num_classes if task.kind == "classification" else 0
        return BoosterSpec(
            num_class, int(np.prod(task.input_shape)), self.max_depth, self.max_booster_bytes
        )

    def loss(self, task: TaskData) -> PointwiseLoss:
        """What the boosters minimise, on their margins: cross-entropy, or the squared error."""
        if task.kind == "classification":
            return PointwiseLoss(CROSS_ENTROPY, task.num_classes)
        return PointwiseLoss(SQUARE, 0)

    def node_eta(self, num_partitions: int) -> float:
        """A node's η: ``eta``, divided by the number of partitions with ``scaled-eta``."""
        return self.eta / num_partitions if self.scaled_eta and self.bagging else self.eta


def fedxgb_settings(settings: RunSettings) -> FedXgbSettings:
    """Parse ``FEDXGB_KEYS``; ConfigError names the key. For bagging, ``eval-with-train=false``
    is refused where it has no effect (no federated evaluation, nodes sampled); cyclic does not
    read it (one node trains a round)."""
    out = build(
        FedXgbSettings,
        read_keys(settings.raw, FEDXGB_KEYS),
        FEDXGB_KEYS,
        algorithm=settings.algorithm,
        eval_with_train=settings.eval_with_train,
    )
    if out.bagging:
        require_fusable(
            out.eval_with_train,
            out.federated_eval and settings.fraction_train >= 1,
            "fedxgb.federated-eval is true and fraction-train is 1",
        )
    return out


def check_task(task: TaskData) -> None:
    """Softmax needs two classes; ConfigError otherwise."""
    task.require_classes("the XGBoost baselines need")


FEDXGB_TABLE = Table(
    "`fedxgb.*`", "the XGBoost baselines on Flower's FedXgbBagging and FedXgbCyclic", FEDXGB_KEYS
)

FEDXGB: Family[FedXgbSettings, None] = Family(
    "fedxgb",
    (
        Algorithm(
            BAGGING,
            "XGBoost, Flower's FedXgbBagging: nodes' new trees appended",
            (*SAMPLED, *FUSED_EVALUATION),
        ),
        Algorithm(CYCLIC, "XGBoost, Flower's FedXgbCyclic: nodes boost in turn"),
    ),
    fedxgb_settings,
    tables=(FEDXGB_TABLE,),
    steps=("fedxgb.eta",),
)
