"""The ``fedfw.*`` run-config table, validated once and shared by the client and server halves."""

from __future__ import annotations

from dataclasses import dataclass

from oracles.frank_wolfe import VARIANTS
from oracles.lmo import SCOPES, Constraint, make_constraint
from oracles.schedules import SCHEDULE_NAMES, FWSchedule, make_schedule
from run_config.common import RunSettings, read_key, require
from tasks.errors import ConfigError

AUTO_SCHEDULE = "auto"
NODE_CONSTRAINT_KEY = "fedfw.constraint"
NODE_RADIUS_KEY = "fedfw.radius"

DOWNLINKS = ("auto", "compact", "dense")

@dataclass(frozen=True)
class ConstraintSet:
    """D: a ball per tensor (``scope="per-tensor"``) or one ball over the flattened model.

    Read from the ``fedfw.*`` keys by FedFW and by its baselines (FedDR, projected FedAvg),
    so that every algorithm of the comparison solves the same constrained problem.
    """

    constraint: Constraint
    scope: str


def constraint_set(settings: RunSettings) -> ConstraintSet:
    """D from ``fedfw.constraint``, ``fedfw.radius``, ``fedfw.scope``; ConfigError names the key."""
    raw = settings.raw
    scope = read_key(raw, "fedfw.scope", str, "per-tensor")
    if scope not in SCOPES:
        raise ConfigError.choice("fedfw.scope", scope, SCOPES)
    return ConstraintSet(make_constraint(read_key(raw, "fedfw.constraint", str, "l1"),
                                         read_key(raw, "fedfw.radius", float, 10.0)), scope)


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
    """Parse ``fedfw.*``; ConfigError names the key."""
    raw = settings.raw
    variant = settings.algorithm if settings.algorithm in VARIANTS else "fedfw"
    domain = constraint_set(settings)
    kind = read_key(raw, "fedfw.schedule", str, AUTO_SCHEDULE)
    if kind == AUTO_SCHEDULE:
        kind = default_schedule(variant)
    if kind not in SCHEDULE_NAMES:
        raise ConfigError.choice("fedfw.schedule", kind, (AUTO_SCHEDULE, *SCHEDULE_NAMES))
    schedule = make_schedule(
        kind, read_key(raw, "fedfw.lambda0", float, 0.01), settings.num_rounds,
        participation=read_key(raw, "fedfw.participation", float, 1.0),
        eta_constant=read_key(raw, "fedfw.eta-constant", float, 0.1),
        lambda_constant=read_key(raw, "fedfw.lambda-constant", float, 1e-3),
    )
    batch_size = read_key(raw, "fedfw.batch-size", int, 64)
    require(batch_size >= 1, "fedfw.batch-size", batch_size, ">= 1")
    local_pass = read_key(raw, "fedfw.local-pass", bool, False)
    downlink = _downlink(read_key(raw, "fedfw.downlink", str, "auto"))
    # the compact downlink relays one point per node and round, with the round's eta_t
    require(not (local_pass and downlink == "compact"), "fedfw.downlink", downlink,
            "'dense' or 'auto' with fedfw.local-pass=true (several points per node and round)")
    return FedFWSettings(
        variant=variant,
        constraint=domain.constraint,
        scope=domain.scope,
        schedule=schedule,
        batch_size=batch_size,
        gap=read_key(raw, "fedfw.gap", bool, False),  # on: every node sends its gradient
        federated_eval=read_key(raw, "fedfw.federated-eval", bool, True),
        downlink="dense" if local_pass else downlink,
        local_pass=local_pass,
    )


def _downlink(value: str) -> str:
    if value not in DOWNLINKS:
        raise ConfigError.choice("fedfw.downlink", value, DOWNLINKS)
    return value


def node_constraint(node_config: dict, default: Constraint) -> Constraint:
    """A node's own set D_i (section 4.3) from its node config, else the run's D."""
    if NODE_CONSTRAINT_KEY not in node_config and NODE_RADIUS_KEY not in node_config:
        return default
    return make_constraint(str(node_config.get(NODE_CONSTRAINT_KEY, default.kind)),
                           float(node_config.get(NODE_RADIUS_KEY, default.radius)))
