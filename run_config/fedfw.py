"""The ``fedfw.*`` run-config tables (``DOMAIN_KEYS``: the constraint set D, also read by FedDR
and projected FedAvg; ``FEDFW_KEYS``: the rest), validated once and shared by the client and
server halves."""

from __future__ import annotations

from dataclasses import dataclass

from oracles.frank_wolfe import VARIANTS
from oracles.lmo import CONSTRAINT_NAMES, SCOPES, Constraint, make_constraint
from oracles.schedules import SCHEDULE_NAMES, FWSchedule, make_schedule
from run_config.common import RunSettings
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

AUTO_SCHEDULE = "auto"
NODE_CONSTRAINT_KEY = "fedfw.constraint"
NODE_RADIUS_KEY = "fedfw.radius"

DOWNLINKS = ("auto", "compact", "dense")

DOMAIN_KEYS = (
    Key("fedfw.constraint", str, "l1", "D: `l1`, `l2`, `box`, `nuclear`, `simplex` (also D for "
        "`feddr`, `fedavg-proj`)", OneOf(CONSTRAINT_NAMES)),
    Key("fedfw.radius", float, 10.0, "radius of D", finite_above(0)),
    Key("fedfw.scope", str, "per-tensor", "one ball per parameter tensor (as in the paper's "
        "experiments) or `global`", OneOf(SCOPES)),
)
FEDFW_KEYS = (
    Key("fedfw.schedule", str, AUTO_SCHEDULE, "`convex` (Thm 1: η=2/(t+1), λ=λ0√(t+1)), "
        "`nonconvex` (Thm 2: η=T^-2/3, λ=λ0T^1/3), `stochastic` (Thm 3: η=9/(t+8), λ=λ0√(t+8), "
        "ρ=4/(t+7)^2/3), `constant`; `auto` = convex, stochastic for fedfw-sto. With "
        "participation p < 1 the section 4.2 forms are used",
        OneOf((AUTO_SCHEDULE, *SCHEDULE_NAMES))),
    Key("fedfw.lambda0", float, 0.01, "λ0", finite_at_least(0)),
    Key("fedfw.participation", float, 1.0, "p: each node takes part in a round with "
        "probability p", within(0, 1, "(]")),
    Key("fedfw.eta-constant", float, 0.1, "η of the `constant` schedule", within(0, 1, "(]")),
    Key("fedfw.lambda-constant", float, 0.001, "λ of the `constant` schedule",
        finite_at_least(0)),
    Key("fedfw.batch-size", int, 64, "FedFW-sto minibatch, and the local pass's", at_least(1)),
    Key("fedfw.local-pass", bool, False, "one FW step per minibatch over the node's data each "
        "round, every step's point sent (the authors' code); see FedFW on the wire in "
        "docs/algorithms.md"),
    Key("fedfw.gap", bool, False, "compute `fw_gap` each round; `true` makes every node send "
        "its dense gradient at x̄ in the evaluation step (it reveals gradients; see FedFW on the "
        "wire in docs/algorithms.md)"),
    Key("fedfw.federated-eval", bool, True, "evaluate F(x̄) on all clients' training data each "
        "round (`train_loss`)"),
    Key("fedfw.downlink", str, "auto", "`dense` (x̄ in every message), `compact` (the rounds' "
        "points; nodes rebuild x̄ bit for bit) or `auto` (compact where it is smaller); see "
        "FedFW on the wire in docs/algorithms.md", OneOf(DOWNLINKS)),
)

@dataclass(frozen=True)
class ConstraintSet:
    """D: a ball per tensor (``scope="per-tensor"``) or one ball over the flattened model.

    Read from the ``fedfw.*`` keys by FedFW and by its baselines (FedDR, projected FedAvg),
    so that every algorithm of the comparison solves the same constrained problem.
    """

    constraint: Constraint
    scope: str


def constraint_set(settings: RunSettings) -> ConstraintSet:
    """D from ``DOMAIN_KEYS``; ConfigError names the key."""
    v = read_keys(settings.raw, DOMAIN_KEYS)
    return ConstraintSet(make_constraint(v["fedfw.constraint"], v["fedfw.radius"]),
                         v["fedfw.scope"])


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

    def local_steps(self, num_samples: int) -> int:
        """FW steps a node takes per round: 1, or one per minibatch of its local pass."""
        return -(-num_samples // self.batch_size) if self.local_pass else 1

    @property
    def participation(self) -> float:
        return self.schedule.participation


def default_schedule(variant: str) -> str:
    """The theorem that covers the variant: Theorem 1 (convex) or Theorem 3 (stochastic)."""
    return "stochastic" if variant == "fedfw-sto" else "convex"


def fedfw_settings(settings: RunSettings) -> FedFWSettings:
    """Parse D and ``FEDFW_KEYS``; ConfigError names the key."""
    variant = settings.algorithm if settings.algorithm in VARIANTS else "fedfw"
    domain = constraint_set(settings)
    v = read_keys(settings.raw, FEDFW_KEYS)
    kind = v["fedfw.schedule"]
    schedule = make_schedule(
        default_schedule(variant) if kind == AUTO_SCHEDULE else kind, v["fedfw.lambda0"],
        settings.num_rounds, participation=v["fedfw.participation"],
        eta_constant=v["fedfw.eta-constant"], lambda_constant=v["fedfw.lambda-constant"],
    )
    local_pass, downlink = v["fedfw.local-pass"], v["fedfw.downlink"]
    # the compact downlink relays one point per node and round, with the round's eta_t
    require(not (local_pass and downlink == "compact"), "fedfw.downlink", downlink,
            "'dense' or 'auto' with fedfw.local-pass=true (several points per node and round)")
    return build(FedFWSettings, v, FEDFW_KEYS, variant=variant, constraint=domain.constraint,
                 scope=domain.scope, schedule=schedule,
                 downlink="dense" if local_pass else downlink)


def node_constraint(node_config: dict, default: Constraint) -> Constraint:
    """A node's own set D_i (section 4.3) from its node config, else the run's D."""
    if NODE_CONSTRAINT_KEY not in node_config and NODE_RADIUS_KEY not in node_config:
        return default
    return make_constraint(str(node_config.get(NODE_CONSTRAINT_KEY, default.kind)),
                           float(node_config.get(NODE_RADIUS_KEY, default.radius)))
