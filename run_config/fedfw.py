"""The ``fedfw.*`` run-config tables (``DOMAIN_KEYS``: the constraint set D, also read by FedDR
and projected FedAvg; ``FEDFW_KEYS``: the rest), validated once and shared by the client and
server halves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oracles.frank_wolfe import VARIANTS
from oracles.lmo import CONSTRAINT_NAMES, SCOPES, Constraint, make_constraint
from oracles.schedules import SCHEDULE_NAMES, FWSchedule, make_schedule
from run_config.common import RunSettings
from run_config.family import (
    FUSED_EVALUATION,
    MODEL,
    NODE_DP,
    Algorithm,
    Family,
    Table,
    require_fusable,
)
from run_config.keys import Key, OneOf, at_least, build, finite_at_least, read_keys, require, within
from run_config.node_keys import NodeKey
from tasks.datasets import DEFAULT_MODELS, SITE_TASK
from tasks.site_data import SITE_MODEL

AUTO_SCHEDULE = "auto"
NODE_CONSTRAINT_KEY = "fedfw.constraint"
NODE_RADIUS_KEY = "fedfw.radius"

DOWNLINKS = ("auto", "compact", "dense")

# The default D is the box |w| <= 0.1 (every weight of every tensor): its extreme points are the
# sign vectors, one bit a coordinate on the wire, and 0.1 is the scale of a network's initial
# weights (U(+-1/sqrt(fan-in)), fan-in 4 to 784 here). The paper's l1 ball of radius 10 adds one
# coordinate per tensor and step: after round 1 (eta_1 = 1) the MLP on digits has 3 nonzero
# first-layer weights and 1 live ReLU unit of 128, and stays at chance (its own Table 2: 23.88 %
# for a CNN on MNIST). Its l2 ball (radius 10 per tensor) swings a scalar bias by +-eta*10 a
# step (diabetes: 1.21, the mean scores 1.07). 20 rounds, 10 nodes: the box reaches at least
# half of FedAvg's gain over the trivial predictor on every bundled task but lipschitz, and on
# the penguins and cars sites. Each set keeps its own radius (``DEFAULT_RADII``): a run that names
# only ``fedfw.constraint='l1'`` still gets the paper's 10 (0.1 would be 0.326 against 0.587 on
# synthetic).
DEFAULT_RADII = {"box": 0.1, "l1": 10.0, "l2": 10.0, "nuclear": 10.0, "simplex": 10.0}
DOMAIN_KEYS = (
    Key(
        "fedfw.constraint",
        str,
        "box",
        "D: `l1`, `l2`, `box`, `nuclear`, `simplex` (also D for "
        "`feddr`, `fedavg-proj`); `box` bounds every weight by the radius",
        OneOf(CONSTRAINT_NAMES),
    ),
    Key(
        "fedfw.radius",
        float,
        0.0,
        "radius of D; 0 = the set's own: 0.1 for `box` (each "
        "weight's bound, the scale of a network's initial weights), 10 for the others (the "
        "paper's section 5)",
        finite_at_least(0, "(0: the set's own)"),
    ),
    Key(
        "fedfw.scope",
        str,
        "per-tensor",
        "one ball per parameter tensor (as in the paper's "
        "experiments) or `global` (`box` is the same either way)",
        OneOf(SCOPES),
    ),
)
FEDFW_KEYS = (
    Key(
        "fedfw.schedule",
        str,
        AUTO_SCHEDULE,
        "`convex` (Thm 1: η=2/(t+1), λ=λ0√(t+1)), "
        "`nonconvex` (Thm 2: η=T^-2/3, λ=λ0T^1/3), `stochastic` (Thm 3: η=9/(t+8), λ=λ0√(t+8), "
        "ρ=4/(t+7)^2/3), `constant`; `auto` = the theorem that covers the model: nonconvex for a "
        "network (every model but `mclr`; fedfw-sto then takes ρ=1), convex for `mclr` "
        "(stochastic for fedfw-sto). With participation p < 1 the section 4.2 forms are used",
        OneOf((AUTO_SCHEDULE, *SCHEDULE_NAMES)),
    ),
    Key("fedfw.lambda0", float, 0.01, "λ0", finite_at_least(0)),
    Key(
        "fedfw.participation",
        float,
        1.0,
        "p: each node takes part in a round with probability p",
        within(0, 1, "(]"),
    ),
    Key("fedfw.eta-constant", float, 0.1, "η of the `constant` schedule", within(0, 1, "(]")),
    Key("fedfw.lambda-constant", float, 0.001, "λ of the `constant` schedule", finite_at_least(0)),
    Key("fedfw.batch-size", int, 64, "FedFW-sto minibatch, and the local pass's", at_least(1)),
    Key(
        "fedfw.local-pass",
        bool,
        False,
        "one FW step per minibatch over the node's data each "
        "round, every step's point sent (the authors' code); see FedFW on the wire in "
        "docs/algorithms.md",
    ),
    Key(
        "fedfw.gap",
        bool,
        False,
        "compute `fw_gap` each round; `true` makes every node send "
        "its dense gradient at x̄ in the evaluation step (it reveals gradients; see FedFW on the "
        "wire in docs/algorithms.md)",
    ),
    Key(
        "fedfw.federated-eval",
        bool,
        True,
        "evaluate F(x̄) on all clients' training data each round (`train_loss`)",
    ),
    Key(
        "fedfw.downlink",
        str,
        "auto",
        "`dense` (x̄ in every message), `compact` (the rounds' "
        "points; nodes rebuild x̄ bit for bit) or `auto` (compact where it is smaller); see "
        "FedFW on the wire in docs/algorithms.md",
        OneOf(DOWNLINKS),
    ),
)


@dataclass(frozen=True)
class ConstraintSet:
    """D: a ball per tensor (``scope="per-tensor"``) or one ball over the flattened model.

    Read from the ``fedfw.*`` keys by FedFW and by its baselines (FedDR, projected FedAvg),
    so that every algorithm of the comparison solves the same constrained problem.
    """

    constraint: Constraint
    scope: str


def domain_constraint(kind: str, radius: object) -> Constraint:
    """The set ``kind`` of ``radius``, where a radius of 0 is the set's own (``DEFAULT_RADII``);
    ConfigError names the key."""
    try:
        value = float(radius)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = radius  # make_constraint refuses it, naming the key
    if value == 0.0:
        value = DEFAULT_RADII.get(str(kind), 0.0)
    return make_constraint(kind, value)


def constraint_set(settings: RunSettings) -> ConstraintSet:
    """D from ``DOMAIN_KEYS``; ConfigError names the key."""
    v = read_keys(settings.raw, DOMAIN_KEYS)
    return ConstraintSet(
        domain_constraint(v["fedfw.constraint"], v["fedfw.radius"]), v["fedfw.scope"]
    )


@dataclass(frozen=True)
class FedFWSettings:
    """Everything the FedFW family reads from the run config."""

    variant: str
    constraint: Constraint
    scope: str
    schedule: FWSchedule
    batch_size: int
    gap: bool
    federated_eval: bool
    downlink: str = "auto"  # dense x-bar, compact points, or the smaller of the two
    local_pass: bool = False  # one FW step per minibatch of batch_size, over the node's data
    radius: float = 0.0  # fedfw.radius as given (0: each set's own), for the nodes' own sets
    eval_with_train: bool = True  # round t's evaluation rides on round t + 1's train messages

    def local_steps(self, num_samples: int) -> int:
        """FW steps a node takes per round: 1, or one per minibatch of its local pass."""
        return -(-num_samples // self.batch_size) if self.local_pass else 1

    @property
    def participation(self) -> float:
        return self.schedule.participation


CONVEX_MODELS = ("mclr",)  # linear in the weights: softmax or squared loss is convex in them


def run_model(settings: RunSettings) -> str:
    """The run's model: ``model``, else the task's default (as ``tasks.models.model_for``)."""
    if settings.model:
        return settings.model
    return SITE_MODEL if settings.task == SITE_TASK else DEFAULT_MODELS.get(settings.task, "mlp")


def default_schedule(variant: str, model: str) -> str:
    """The theorem that covers the variant and the model (``fedfw.schedule='auto'``).

    A convex model (``mclr``): Theorem 1 (``convex``), Theorem 3 (``stochastic``) for FedFW-sto.
    A network: Theorem 2 (``nonconvex``, the paper's only guarantee without convexity), for
    every variant; FedFW-sto then averages nothing (rho_t = 1: the paper gives no rho_t without
    convexity). Theorems 1 and 3 start with eta_1 = 1, so x^2 is an extreme point of D, and their
    steps stay large for a short run (eta_20 = 0.095, 0.32): a network is replaced by the LMO's
    answer in round 1 and its ReLU units die (digits, 10 nodes, box 0.1, 20 rounds: FedFW-sto
    0.100 with Theorem 3, 0.750 with Theorem 2's constant eta = T^(-2/3) = 0.136).
    """
    if model not in CONVEX_MODELS:
        return "nonconvex"
    return "stochastic" if variant == "fedfw-sto" else "convex"


def fedfw_settings(settings: RunSettings) -> FedFWSettings:
    """Parse D and ``FEDFW_KEYS``; ConfigError names the key. ``eval-with-train=false`` is
    refused where it has no effect (no federated evaluation, the FW gap on, nodes sampled)."""
    variant = settings.algorithm if settings.algorithm in VARIANTS else "fedfw"
    domain = constraint_set(settings)
    v = read_keys(settings.raw, FEDFW_KEYS)
    kind = v["fedfw.schedule"]
    schedule = make_schedule(
        default_schedule(variant, run_model(settings)) if kind == AUTO_SCHEDULE else kind,
        v["fedfw.lambda0"],
        settings.num_rounds,
        participation=v["fedfw.participation"],
        eta_constant=v["fedfw.eta-constant"],
        lambda_constant=v["fedfw.lambda-constant"],
    )
    local_pass, downlink = v["fedfw.local-pass"], v["fedfw.downlink"]
    # the compact downlink relays one point per node and round, with the round's eta_t
    require(
        not (local_pass and downlink == "compact"),
        "fedfw.downlink",
        downlink,
        "'dense' or 'auto' with fedfw.local-pass=true (several points per node and round)",
    )
    out = build(
        FedFWSettings,
        v,
        FEDFW_KEYS,
        variant=variant,
        constraint=domain.constraint,
        scope=domain.scope,
        schedule=schedule,
        downlink="dense" if local_pass else downlink,
        radius=read_keys(settings.raw, DOMAIN_KEYS)["fedfw.radius"],
        eval_with_train=settings.eval_with_train,
    )
    require_fusable(
        out.eval_with_train,
        out.federated_eval and not out.gap and out.participation >= 1,
        "fedfw.federated-eval is true, fedfw.gap is false and fedfw.participation is 1",
    )
    _check_privacy(out, settings, downlink)
    return out


def _check_privacy(fw: FedFWSettings, settings: RunSettings, downlink: str) -> None:
    """What differential privacy and secure aggregation refuse: the FW gap (every node's
    gradient in plain) and, with a secure sum, the compact ``downlink`` asked for (it relays
    every node's points)."""
    require(
        not (fw.gap and settings.node_dp is not None),
        "fedfw.gap",
        fw.gap,
        "false with dp.noise-multiplier (the FW gap sends every node's gradient in plain)",
    )
    if settings.secure_aggregation:
        require(
            not fw.gap,
            "fedfw.gap",
            fw.gap,
            "false with secure-aggregation (the FW gap sends every node's gradient in plain)",
        )
        require(
            downlink != "compact",
            "fedfw.downlink",
            downlink,
            "'dense' or 'auto' with secure-aggregation (the compact downlink relays every "
            "node's points)",
        )


def node_constraint(
    node_config: dict, default: Constraint, run_radius: float | None = None
) -> Constraint:
    """A node's own set D_i (section 4.3) from its node config, else the run's D.

    A node that names its set but no radius takes the run's ``fedfw.radius`` (``run_radius``;
    None: the run's D's radius); where that is 0, and for a node radius of 0, the set's own."""
    if NODE_CONSTRAINT_KEY not in node_config and NODE_RADIUS_KEY not in node_config:
        return default
    kind = str(node_config.get(NODE_CONSTRAINT_KEY, default.kind))
    fallback = default.radius if run_radius is None else run_radius
    if fallback == 0.0 and kind == default.kind:
        fallback = default.radius
    return domain_constraint(kind, node_config.get(NODE_RADIUS_KEY, fallback))


def node_set(fw: FedFWSettings, node_config: Mapping[str, Any]) -> Constraint:
    """This node's set D_i (section 4.3): node config ``fedfw.constraint`` / ``fedfw.radius``,
    else the run's D."""
    return node_constraint(dict(node_config), fw.constraint, fw.radius)


DOMAIN = Table(
    "`fedfw.*`: the constraint set D",
    "FedFW and the baselines that solve the same constrained problem",
    DOMAIN_KEYS,
)
FEDFW_TABLE = Table("`fedfw.*`: Frank-Wolfe", "FedFW's variants", FEDFW_KEYS)

FEDFW: Family[FedFWSettings, Constraint] = Family(
    "fedfw",
    (
        Algorithm("fedfw", "Federated Frank-Wolfe, quadratic penalty"),
        Algorithm("fedfw-plus", "FedFW+, augmented Lagrangian"),
        Algorithm("fedfw-sto", "FedFW-sto, averaged minibatch gradients"),
    ),
    fedfw_settings,
    tables=(DOMAIN, FEDFW_TABLE),
    reads=(*MODEL, *FUSED_EVALUATION, *NODE_DP, "secure-aggregation"),
    steps=("fedfw.schedule", "fedfw.lambda0"),
    node_keys=(
        NodeKey(
            NODE_CONSTRAINT_KEY,
            str,
            "this node's own set D_i (section 4.3), a superset of the run's D (default: D)",
        ),
        NodeKey(NODE_RADIUS_KEY, float, "the radius of D_i (default: the run's `fedfw.radius`)"),
    ),
    node_overrides=node_set,
)
