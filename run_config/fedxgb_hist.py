"""The ``fedxgb-hist.*`` run-config table of histogram-based federated XGBoost, read once by the
server and once per node; and what both halves derive from it for a task: the objective, the
booster's spec, XGBoost's tree parameters and the loss."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.boosters import BoosterSpec
from functions.protocol import EVALUATE, QUERY_NODE, QUERY_SKETCH, TRAIN
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from oracles.hist_xgboost import LOGISTIC, SOFTMAX, SQUARED, TreeParams
from run_config.common import RunSettings
from run_config.family import (
    FUSED_EVALUATION,
    ROW_DP,
    SECURE_SUM,
    Algorithm,
    Family,
    Table,
    require_fusable,
)
from run_config.keys import Key, OneOf, at_least, build, read_keys, require, within
from tasks.datasets import TaskData

HIST = "fedxgb-hist"

FEDXGB_HIST_KEYS = (
    Key(
        "fedxgb-hist.eta",
        float,
        0.3,
        "XGBoost's learning rate η: every leaf value is shrunk by it",
        within(0, 1, "(]"),
    ),
    Key(
        "fedxgb-hist.max-depth",
        int,
        6,
        "XGBoost's `max_depth`: a tree takes this many histogram exchanges at most",
        within(1, 12),
    ),
    Key(
        "fedxgb-hist.lambda",
        float,
        1.0,
        "XGBoost's `lambda`: the L2 penalty on leaf weights",
        within(0, 1e6),
        field="reg_lambda",
    ),
    Key(
        "fedxgb-hist.gamma",
        float,
        0.0,
        "XGBoost's `gamma` (`min_split_loss`): the least loss reduction that splits a leaf",
        within(0, 1e12),
    ),
    Key(
        "fedxgb-hist.min-child-weight",
        float,
        1.0,
        "XGBoost's `min_child_weight`: the least hessian sum of a child",
        within(0, 1e12),
    ),
    Key(
        "fedxgb-hist.max-bin",
        int,
        256,
        "XGBoost's `max_bin`: the most bins a feature's agreed edges make",
        within(2, 1024),
    ),
    Key(
        "fedxgb-hist.sketch-size",
        int,
        1024,
        "the size of each column's summary a node sends once to agree the bin edges: its "
        "quantiles (`bins='sketch'`: with fewer rows, its values themselves) or the cells of "
        "the fixed grid (`bins='grid'`)",
        within(2, 65536),
    ),
    Key(
        "fedxgb-hist.bins",
        str,
        "sketch",
        "how the bin edges are agreed: `sketch` (each node's quantiles, merged) or `grid` "
        "(each node counts its values in the cells of a fixed grid, equal in arctan(value); "
        "the edges are quantiles of the counts summed over the nodes, securely with "
        "`secure-aggregation`, which needs it)",
        OneOf(("sketch", "grid")),
    ),
    Key(
        "fedxgb-hist.min-bin-count",
        int,
        0,
        "privacy: a node merges every histogram slot counting fewer of its rows than this into "
        "the next one (0 or 1: none; the booster is then no longer the pooled one)",
        within(0, 1_000_000),
    ),
    Key(
        "fedxgb-hist.max-histogram-bytes",
        int,
        256 * 2**20,
        "largest histogram of one level (open leaves x bins x 24 bytes, what the server sums "
        "and a node builds): a run whose agreed bins could exceed it is refused before round 1",
        at_least(1024),
    ),
    Key(
        "fedxgb-hist.max-booster-bytes",
        int,
        64 * 2**20,
        "largest booster (XGBoost JSON bytes) the server sends; it stops adding trees there",
        within(1024, 2**31 - 1),
    ),
    Key(
        "fedxgb-hist.federated-eval",
        bool,
        True,
        "evaluate the booster on every node after each round (`train_loss`; the test metrics "
        "with sites' own data)",
    ),
)


@dataclass(frozen=True)
class FedXgbHistSettings:
    """Everything histogram-based federated XGBoost reads from the run config."""

    eta: float
    max_depth: int
    reg_lambda: float
    gamma: float
    min_child_weight: float
    max_bin: int
    sketch_size: int
    bins: str
    min_bin_count: int
    max_histogram_bytes: int
    max_booster_bytes: int
    federated_eval: bool
    eval_with_train: bool = True  # round t's evaluation rides on round t + 1's root level
    secure_aggregation: bool = False  # histograms summed by a secure sum (no node's read)
    secure_bound: float = 1024.0  # regression: the largest |label| a node may hold
    dp_noise_multiplier: float = 0.0  # row-level differential privacy (0: none)
    dp_delta: float = 1e-5

    def tree_params(self) -> TreeParams:
        return TreeParams(
            self.eta, self.reg_lambda, self.gamma, self.min_child_weight, self.max_depth
        )

    def spec(self, task: TaskData) -> BoosterSpec:
        """The run's booster: logistic for 2 classes, softmax for more, squared error."""
        classes = task.num_classes if task.kind == "classification" else 0
        return self.spec_of(
            0 if classes == 2 else classes, int(np.prod(task.input_shape)), classes == 2
        )

    def spec_of(self, num_class: int, num_feature: int, binary: bool) -> BoosterSpec:
        """The run's booster for what the task gives (``spec``'s, as a node keeps them)."""
        return BoosterSpec(num_class, num_feature, self.max_depth, self.max_booster_bytes, binary)

    def objective(self, task: TaskData) -> str:
        spec = self.spec(task)
        return LOGISTIC if spec.binary else SOFTMAX if spec.num_class else SQUARED

    def loss(self, task: TaskData) -> PointwiseLoss:
        """What the booster is scored by, on class margins (``functions.boosters``'s
        ``class_margins``): cross-entropy, or the squared error."""
        if task.kind == "classification":
            return PointwiseLoss(CROSS_ENTROPY, task.num_classes)
        return PointwiseLoss(SQUARE, 0)


def fedxgb_hist_settings(settings: RunSettings) -> FedXgbHistSettings:
    """Parse ``FEDXGB_HIST_KEYS``; ConfigError names the key. ``eval-with-train=false`` is
    refused where it has no effect (no federated evaluation)."""
    out = build(
        FedXgbHistSettings,
        read_keys(settings.raw, FEDXGB_HIST_KEYS),
        FEDXGB_HIST_KEYS,
        eval_with_train=settings.eval_with_train,
        secure_aggregation=settings.secure_aggregation,
        secure_bound=settings.secure_bound,
        dp_noise_multiplier=settings.dp_noise_multiplier,
        dp_delta=settings.dp_delta,
    )
    require_fusable(out.eval_with_train, out.federated_eval, "fedxgb-hist.federated-eval is true")
    require(
        out.bins == "grid" or not out.secure_aggregation,
        "fedxgb-hist.bins",
        out.bins,
        "'grid' with secure-aggregation=true (a sketch is each node's quantiles: its values, "
        "which no secure sum hides)",
    )
    require(
        out.bins == "grid" or out.dp_noise_multiplier == 0,
        "fedxgb-hist.bins",
        out.bins,
        "'grid' with dp.noise-multiplier (a sketch is each node's quantiles, which no noise "
        "on sums protects)",
    )
    return out


def check_task(task: TaskData) -> None:
    """Trees need two classes at least; ConfigError otherwise."""
    task.require_classes(f"algorithm='{HIST}' needs", site_note=False)


FEDXGB_HIST_TABLE = Table(
    "`fedxgb-hist.*`",
    "histogram-based federated XGBoost: trees grown from the nodes' summed histograms",
    FEDXGB_HIST_KEYS,
)

FEDXGB_HIST: Family[FedXgbHistSettings, None] = Family(
    "fedxgb-hist",
    (
        Algorithm(
            HIST,
            "XGBoost `hist` grown from the nodes' summed gradient histograms: the pooled model",
            FUSED_EVALUATION,
        ),
    ),
    fedxgb_hist_settings,
    tables=(FEDXGB_HIST_TABLE,),
    reads=(*SECURE_SUM, *ROW_DP),
    steps=("fedxgb-hist.eta",),
    message_types=(TRAIN, EVALUATE, QUERY_NODE, QUERY_SKETCH),
)
