"""The ``ffgb.*`` run-config table, validated once and shared by the client and server halves;
what the settings make of a task (the learner, the loss, the limits) is
``oracles.boosting_model``'s."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from oracles.boosting import CONSTANT, EXPERIMENT, SCHEDULES, THEOREM, StepSizes
from oracles.boosting_model import BoostingModel, boosting_model
from oracles.distillation import FUNCTION, MODES, NONE
from oracles.lipschitz import KINDS, MIDPOINT, UPPER
from oracles.weak_learning import (
    AUTO,
    HIST_FROM_ROWS,
    MEAN,
    NEWTON,
    TREE_FITTERS,
    TREE_LEAVES,
    OracleSettings,
)
from run_config.common import RunSettings
from run_config.family import FUSED_EVALUATION, SAMPLED, Algorithm, Family, Table, require_fusable
from run_config.keys import (
    Key,
    OneOf,
    at_least,
    build,
    finite_above,
    finite_at_least,
    read_keys,
    require,
    within,
)
from tasks.datasets import TaskData
from tasks.errors import ConfigError

VARIANTS = ("ffgb", "ffgb-c", "ffgb-l")
LEARNERS = ("mlp", "cnn", "tree")
# eta0 = 0: the authors' MNIST value; FFGB.L's g <- (1 - eta) g + eta h extrapolates past eta = 1
DEFAULT_ETA0 = {"ffgb": 10.0, "ffgb-c": 10.0, "ffgb-l": 1.0}
# ... and on a regression task a step for the square loss (the paper's experiments are all
# classification): 10 overshoots, 1 overfits small sites, 0.5 does neither (benchmarks/README.md
# case `defaults` measures the three)
SQUARE_LOSS_ETA0 = 0.5
# Ours, measured (benchmarks/README.md, case `boosting_ablation`): FFGB with trees boosts best
# as XGBoost does, with Newton leaves and a constant shrinkage
NEWTON_ETA0 = 0.3
THEOREM_CONSTANT = {"ffgb": 2.0, "ffgb-c": 4.0, "ffgb-l": 4.0}  # Theorems 3.1, 3.2, 3.3
BOOST, DISTILL = "boost", "distill"  # the two kinds of round
PER_NODE, SHARED = "per-node", "shared"  # ffgb.downlink
DOWNLINKS = (AUTO, PER_NODE, SHARED)
SHARED_FROM = 100  # recipients from which `auto` shares one downlink (1 % more bytes at most)

FFGB_KEYS = (
    Key(
        "ffgb.local-steps",
        int,
        3,
        "K, boosting steps (weak learners) per node and round",
        at_least(1),
    ),
    Key(
        "ffgb.eta0",
        float,
        0.0,
        "η0 of the `experiment` schedule η_{k,t} = η0/(K t + k + 1) "
        "and the step of the `constant` one; "
        f"0 = {NEWTON_ETA0} with the `constant` schedule, else 10 for `ffgb` and `ffgb-c` (the "
        "authors' MNIST value) on classification, 0.5 on regression (the square loss) and 1 "
        "for `ffgb-l`, whose step g ← (1 − η) g + η h extrapolates when η > 1",
        finite_at_least(0, "(0 = auto)"),
    ),
    Key(
        "ffgb.schedule",
        str,
        AUTO,
        "`experiment` (section 4), `theorem`: c/(μ(Kt+k+1)) "
        "with c = 2 (FFGB, Theorem 3.1) or 4 (FFGB.C, FFGB.L, Theorems 3.2-3.3), μ = `ffgb.mu` "
        "(must be > 0; FFGB.L uses 1, the square loss's modulus), or `constant`: η0 at every "
        "step (ours, XGBoost's shrinkage; not covered by the paper's theorems); `auto`: "
        "`constant` with Newton leaves, else `experiment`",
        OneOf((AUTO, *SCHEDULES)),
    ),
    Key(
        "ffgb.mu",
        float,
        0.0,
        "μ of the regulariser (μ/2)‖g‖²: each step first scales g by (1 − η μ)",
        finite_at_least(0),
    ),
    Key(
        "ffgb.residual",
        bool,
        True,
        "keep the residual Δ (Algorithm 2); `false` = the no-residual ablation",
    ),
    Key(
        "ffgb.learner",
        str,
        "mlp",
        "`mlp` (two hidden layers of `ffgb.hidden`, leaky ReLU "
        "0.01: the paper's MNIST learner), `cnn` (the PyTorch-tutorial LeNet with `ffgb.hidden` "
        "dense layers: the paper's CIFAR learner; image tasks), `tree` (least-squares regression "
        "tree, fitted as `ffgb.tree-fitter` says; not with `ffgb-l`, which needs input "
        "gradients)",
        OneOf(LEARNERS),
    ),
    Key("ffgb.hidden", int, 32, "width of the learners' dense hidden layers", within(1, 4096)),
    Key(
        "ffgb.tree-depth",
        int,
        3,
        "maximum depth of tree learners (the server refuses deeper trees)",
        within(1, 20),
    ),
    Key(
        "ffgb.tree-fitter",
        str,
        AUTO,
        "how a node fits tree learners: `cart` (scikit-learn's "
        "exact CART), `hist` (XGBoost's histogram method: the node's points binned once a "
        "round into at most 256 quantile bins per feature, leaf values the exact means; needs "
        f"the `xgboost` extra), `auto` (`hist` on nodes with at least {HIST_FROM_ROWS:,} points "
        "when xgboost is installed, else `cart`); see benchmarks/README.md, case `tree_fit`",
        OneOf(TREE_FITTERS),
    ),
    Key(
        "ffgb.tree-leaves",
        str,
        AUTO,
        "leaf values of tree learners: `mean` (the least-squares "
        "fit, the paper's oracle), `newton` (ours: the least-squares tree's shape with "
        "XGBoost's second-order leaf values sum(target) / (sum(hessian) + 1); the residual stays "
        "the least-squares error) or `auto`: `newton` with tree learners and algorithm `ffgb`, "
        "else `mean` (FFGB.C keeps the paper's oracle, whose outputs its bounds assume); see "
        "benchmarks/README.md, case `boosting_ablation`",
        OneOf((AUTO, *TREE_LEAVES)),
    ),
    Key(
        "ffgb.oracle-steps",
        int,
        500,
        "Adam steps per network fit (the paper: 1,000 for MNIST; the authors' code 500-2,000)",
        at_least(1),
    ),
    Key("ffgb.oracle-lr", float, 0.005, "Adam step size of the fits", finite_above(0)),
    Key(
        "ffgb.oracle-batch-size",
        int,
        128,
        "minibatch of the fits (shuffled passes); 0 = all local points",
        at_least(0, "(0 = all points)"),
    ),
    Key(
        "ffgb.sup-p",
        float,
        8.0,
        "FFGB.C's sup-norm oracle WO∞ (eq. 24): the smooth surrogate's exponent",
        within(1, 64),
    ),
    Key(
        "ffgb.gamma",
        float,
        0.5,
        "γ of the weak-learning assumption: sets FFGB.C's clipping bounds G1, G2",
        within(0, 1, "(]"),
    ),
    Key(
        "ffgb.grad-bound",
        float,
        0.0,
        "G, the bound on the loss gradient; 0 = 1 "
        "(cross-entropy); required > 0 for FFGB.C on regression",
        finite_at_least(0, "(0 = auto)"),
    ),
    Key(
        "ffgb.lipschitz",
        float,
        0.0,
        "FFGB.L's Lipschitz constant of u_i; 0 = the largest label slope on the node's data",
        finite_at_least(0, "(0 = from the node's data)"),
    ),
    Key(
        "ffgb.output-bound",
        float,
        0.0,
        "B of FFGB.C's final clip Π_B(f); 0 = 2G/(μγ) when μ > 0, else no final clip",
        finite_at_least(0, "(0 = auto)"),
    ),
    Key(
        "ffgb.sobolev-weight",
        float,
        1.0,
        "FFGB.L's WO-lip (eq. 25): weight of the input-gradient term",
        at_least(0),
    ),
    Key(
        "ffgb.sobolev-samples",
        int,
        256,
        "FFGB.L: points drawn in the node's bounding box for the gradient term",
        at_least(1),
    ),
    Key(
        "ffgb.federated-eval",
        bool,
        True,
        "evaluate f on every node after each round "
        "(`train_loss`, `federated_test_*`; also keeps nodes in sync)",
    ),
    Key(
        "ffgb.downlink",
        str,
        AUTO,
        "what a round's recipients get: `per-node` = each node "
        "the learners it lacks, without its own of the last round (the paper's (N − 1) K), "
        "packed per node; `shared` = one delta for all nodes at the same version, own learners "
        "included (N K: 1/N more bytes), built once and sent as the same records (Flower's "
        "content-addressed objects upload it once); `auto`: `shared` from "
        f"{SHARED_FROM} recipients in a round, else `per-node`; see benchmarks/README.md, "
        "case `scale`",
        OneOf(DOWNLINKS),
    ),
    Key(
        "ffgb.distill",
        str,
        NONE,
        "`increment`: each node distils its K new learners into one "
        'before upload; `function`: its whole g^{K+1} into one (scale 0); see "Bounding the '
        'ensemble" in docs/algorithms.md',
        OneOf(MODES),
    ),
    Key(
        "ffgb.distill-every",
        int,
        0,
        "after every D boosting rounds, a global distillation by "
        "FedAvg replaces the ensemble by one network (0 = never; not with trees)",
        at_least(0, "(0 = never)"),
    ),
    Key(
        "ffgb.distill-rounds",
        int,
        1,
        "FedAvg rounds (server rounds) of each global distillation",
        at_least(1),
    ),
    Key(
        "ffgb.distill-steps",
        int,
        0,
        "Adam steps of the student per node and FedAvg round; 0 = `ffgb.oracle-steps`",
        at_least(0, "(0 = ffgb.oracle-steps)"),
    ),
    Key(
        "ffgb.one-shot",
        bool,
        False,
        "`ffgb-l` only: one upload per node, the server replays the rounds (Remark 3.1)",
    ),
    Key(
        "ffgb.extension",
        str,
        AUTO,
        "FFGB.L's u_i: `upper` = eq. 17, min_j (y_j + L‖x − "
        "x_j‖); `midpoint` = its mean with max_j (y_j − L‖x − x_j‖), also L-Lipschitz and "
        "interpolating but not biased upwards away from the node's data (not the paper's; see "
        "`oracles/lipschitz.py`); `auto` = `upper` when `ffgb.lipschitz` gives L (the paper's "
        "assumption: a known constant), `midpoint` when L comes from the data",
        OneOf((AUTO, *KINDS)),
    ),
)


@dataclass(frozen=True)
class FFGBSettings:
    """Everything the FFGB family reads from the run config."""

    variant: str
    local_steps: int  # K
    steps: StepSizes
    mu: float  # Tikhonov weight of FFGB and FFGB.C (eq. 3); FFGB.L has none
    residual: bool
    learner: str
    hidden: int
    tree_depth: int
    tree_fitter: str
    tree_leaves: str
    oracle: OracleSettings
    gamma: float
    grad_bound: float  # 0: auto
    lipschitz: float  # 0: from each node's data
    output_bound: float  # 0: auto
    federated_eval: bool
    distill: str = NONE  # client side: none, increment or function (oracles.distillation)
    distill_every: int = 0  # a global distillation after every D boosting rounds (0: never)
    distill_rounds: int = 1  # R FedAvg rounds per global distillation
    distill_steps: int = 500  # local Adam steps of the student per FedAvg round
    one_shot: bool = False  # FFGB.L in one round of communication (Remark 3.1)
    extension: str = UPPER  # FFGB.L's u_i: eq. 17 (upper) or the midpoint interpolant
    downlink: str = AUTO  # per-node, shared or auto (by the round's recipients)
    eval_with_train: bool = True  # round t's evaluation rides on round t + 1's train messages
    relay_encryption: bool = False  # learners sealed node to node under a group key

    def shares_downlink(self, recipients: int) -> bool:
        """Whether a round with ``recipients`` nodes sends one shared delta (``ffgb.downlink``)."""
        return self.downlink == SHARED or (self.downlink == AUTO and recipients >= SHARED_FROM)

    def student_training(self) -> OracleSettings:
        """How a node trains the distillation student in one FedAvg round."""
        return replace(self.oracle, steps=self.distill_steps)

    def phase(self, server_round: int) -> tuple[str, int]:
        """What server round r (1-based) is: (BOOST, t) with t the 0-based boosting round (the
        step sizes' t), or (DISTILL, j) with j the 1-based FedAvg round of a global distillation.
        With distillation every D rounds, each period is D boosting then R distillation rounds."""
        if self.distill_every == 0:
            return BOOST, server_round - 1
        period = self.distill_every + self.distill_rounds
        cycle, at = divmod(server_round - 1, period)
        if at < self.distill_every:
            return BOOST, cycle * self.distill_every + at
        return DISTILL, at - self.distill_every + 1

    def model(self, task: TaskData) -> BoostingModel:
        """The run's functions on ``task``: learner spec, loss, clipping, decoder limits
        (``oracles.boosting_model``); ConfigError names the key of an architecture the task
        cannot take."""
        try:
            return boosting_model(
                self.variant,
                self.learner,
                self.hidden,
                self.tree_depth,
                self.grad_bound,
                self.gamma,
                self.mu,
                self.output_bound,
                task,
            )
        except ValueError as err:
            raise ConfigError.bound("ffgb.learner", self.learner, str(err)) from None


def ffgb_settings(settings: RunSettings) -> FFGBSettings:
    """Parse ``FFGB_KEYS``, then the checks across keys; ConfigError names the key."""
    variant = settings.algorithm if settings.algorithm in VARIANTS else "ffgb"
    v = read_keys(settings.raw, FFGB_KEYS)
    learner, distill = v["ffgb.learner"], v["ffgb.distill"]
    leaves = auto_tree_leaves(variant, learner, v["ffgb.tree-leaves"])
    steps = _step_sizes(settings, variant, v, leaves)
    _check_learner(variant, learner, leaves)
    oracle = OracleSettings(
        steps=v["ffgb.oracle-steps"],
        lr=v["ffgb.oracle-lr"],
        batch_size=v["ffgb.oracle-batch-size"],
        sup_p=v["ffgb.sup-p"],
        sobolev_weight=v["ffgb.sobolev-weight"],
        sobolev_samples=v["ffgb.sobolev-samples"],
    )
    require(
        not (distill == FUNCTION and variant == "ffgb-c"),
        "ffgb.distill",
        distill,
        "'none' or 'increment' with ffgb-c (a distilled g^(K+1) has no bound G2)",
    )
    out = build(
        FFGBSettings,
        v,
        FFGB_KEYS,
        variant=variant,
        steps=steps,
        oracle=oracle,
        tree_leaves=leaves,
        extension=auto_extension(v["ffgb.extension"], v["ffgb.lipschitz"]),
        mu=0.0 if variant == "ffgb-l" else v["ffgb.mu"],
        distill_steps=v["ffgb.distill-steps"] or oracle.steps,
        eval_with_train=settings.eval_with_train,
        relay_encryption=settings.relay_encryption,
    )
    _check_rounds(out, settings)
    return out


def _step_sizes(settings: RunSettings, variant: str, v: dict[str, Any], leaves: str) -> StepSizes:
    """The step sizes of ``ffgb.schedule`` (`auto` resolved by the tree leaves), with η0's
    default for the variant and task when ``ffgb.eta0`` is 0; the `theorem` schedule needs a
    strongly convex objective (μ > 0, or FFGB.L's square loss)."""
    kind = v["ffgb.schedule"]
    if kind == AUTO:
        kind = CONSTANT if leaves == NEWTON else EXPERIMENT
    local_steps, mu = v["ffgb.local-steps"], v["ffgb.mu"]
    eta0 = v["ffgb.eta0"] or (
        NEWTON_ETA0
        if kind == CONSTANT
        else SQUARE_LOSS_ETA0
        if settings.regression and variant != "ffgb-l"
        else DEFAULT_ETA0[variant]
    )
    modulus = 1.0 if variant == "ffgb-l" else mu  # the square loss is 1-strongly convex
    require(
        kind != THEOREM or modulus > 0,
        "ffgb.mu",
        mu,
        "> 0 with ffgb.schedule='theorem' (eta = c / (mu (K t + k + 1)))",
    )
    return StepSizes(kind, local_steps, eta0, modulus, THEOREM_CONSTANT[variant])


def _check_learner(variant: str, learner: str, leaves: str) -> None:
    """FFGB.L needs a network (its oracle fits input gradients); Newton leaves need trees."""
    require(
        not (variant == "ffgb-l" and learner == "tree"),
        "ffgb.learner",
        learner,
        "a network with ffgb-l (its oracle fits input gradients, which a tree has not)",
    )
    require(
        leaves != NEWTON or learner == "tree",
        "ffgb.tree-leaves",
        leaves,
        "'mean' or 'auto' unless ffgb.learner='tree'",
    )


def _check_rounds(ffgb: FFGBSettings, settings: RunSettings) -> None:
    """The checks of how the rounds run: FFGB.L's one shot alone, evaluation riding on
    training only where it can, sealed learners (``_check_relay_encryption``), and global
    distillation into a network only."""
    require(
        not (
            ffgb.one_shot
            and (ffgb.variant != "ffgb-l" or ffgb.distill != NONE or ffgb.distill_every)
        ),
        "ffgb.one-shot",
        ffgb.one_shot,
        "false unless algorithm='ffgb-l' without distillation (Remark 3.1 is FFGB.L's)",
    )
    require_fusable(
        ffgb.eval_with_train,
        ffgb.federated_eval and not ffgb.one_shot and settings.fraction_train >= 1,
        "ffgb.federated-eval is true, fraction-train is 1 and ffgb.one-shot is false",
    )
    if ffgb.relay_encryption:
        _check_relay_encryption(ffgb, settings)
    require(
        not (ffgb.distill_every and ffgb.learner == "tree"),
        "ffgb.distill-every",
        ffgb.distill_every,
        "0 with tree learners (FedAvg distils into a network)",
    )


def _check_relay_encryption(ffgb: FFGBSettings, settings: RunSettings) -> None:
    """With sealed learners the server cannot evaluate f or average a student: central
    evaluation, global distillation and FFGB.L's one shot (whose server combines the pool) are
    refused, and federated evaluation gives the metrics."""
    why = "with relay-encryption (the server holds the learners sealed)"
    require(not settings.central_evaluation, "central-evaluation", True, f"false {why}")
    require(ffgb.federated_eval, "ffgb.federated-eval", False, f"true {why}")
    require(not ffgb.one_shot, "ffgb.one-shot", True, f"false {why}")
    require(ffgb.distill_every == 0, "ffgb.distill-every", ffgb.distill_every, f"0 {why}")


def auto_extension(extension: str, lipschitz: float) -> str:
    """``ffgb.extension`` resolved: `auto` is the paper's eq. 17 when L is given, else the
    midpoint. With L from the data (the largest label slope, which one pair of close points
    inflates) eq. 17's upper envelope sits far above the data between its points and FFGB.L
    diverged: cars by origin RMSE 63 mpg, diabetes 69 (the mean: 7.7, 73), against 3.80 and
    55.9 with the midpoint; on the lipschitz task, whose target is 1-Lipschitz, eq. 17 with L
    from the data gave test MSE 0.0299 and the midpoint gives 0.0366 (FedAvg 0.037)."""
    if extension != AUTO:
        return extension
    return UPPER if lipschitz > 0 else MIDPOINT


def auto_tree_leaves(variant: str, learner: str, leaves: str) -> str:
    """``ffgb.tree-leaves`` resolved: `auto` is Newton leaves for FFGB with trees (measured:
    benchmarks/README.md, case `boosting_ablation`), the paper's least-squares leaves otherwise."""
    if leaves != AUTO:
        return leaves
    return NEWTON if learner == "tree" and variant == "ffgb" else MEAN


def check_task(ffgb: FFGBSettings, task: TaskData) -> None:
    """What needs the task: FFGB.C on regression needs an explicit gradient bound; a CNN needs
    images; cross-entropy needs two classes. ConfigError names the key."""
    if ffgb.variant == "ffgb-c" and task.kind != "classification" and ffgb.grad_bound == 0:
        raise ConfigError.bound(
            "ffgb.grad-bound",
            0.0,
            "> 0 with ffgb-c on a regression task (the square loss has no a-priori gradient bound)",
        )
    if ffgb.variant != "ffgb-l":
        task.require_classes(f"{ffgb.variant} needs")
    ffgb.model(task)


FFGB_TABLE = Table("`ffgb.*`", "the FFGB family", FFGB_KEYS)

FFGB: Family[FFGBSettings, None] = Family(
    "ffgb",
    (
        Algorithm("ffgb", "Federated functional gradient boosting with residuals"),
        Algorithm("ffgb-c", "FFGB.C, clipped learners and residuals"),
        Algorithm("ffgb-l", "FFGB.L, square loss, Lipschitz extension, Sobolev oracle"),
    ),
    ffgb_settings,
    tables=(FFGB_TABLE,),
    reads=(*SAMPLED, *FUSED_EVALUATION, "relay-encryption"),
    steps=("ffgb.eta0", "ffgb.schedule", "ffgb.oracle-lr"),
)
