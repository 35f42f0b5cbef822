"""The ``fedfun.*`` run-config table (FedFun and its four decentralised baselines), validated once
and shared by the client and server halves, and the per-node overrides of heterogeneous runs.

All five algorithms run on the same relay (``strategies.fedfun``): FSR (``fedfun``) exchanges
functions, the baselines parameters. Round 0 is local training only (h_i^0 = argmin R_i,
``fedfun.initial-steps`` steps for FSR and PSR as in appendix B, one ordinary local pass of
``fedfun.local-steps`` for the others); each server round then relays the neighbours' models and
runs one local step of the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.networks import NetworkSpec
from functions.node_models import ModelLimits

from oracles.fedfun_local import DFEDAVGM, DFEDDF, DFEDFISH, FSR, PSR, TREE_LEARNER
from oracles.fsr_network import JACOBI, STEP_FORMS
from oracles.graphs import TOPOLOGIES
from run_config.common import RunSettings, read_key, require
from tasks.datasets import TaskData
from tasks.errors import ConfigError

ALGORITHMS = (FSR, PSR, DFEDAVGM, DFEDFISH, DFEDDF)
LEARNERS = ("mlp", TREE_LEARNER)
MAX_LEAVES = 1000  # appendix B: min(training samples over all clients, 1000)
NODE_LEARNER, NODE_HIDDEN = "fedfun-learner", "fedfun-hidden"  # node-config overrides


@dataclass(frozen=True)
class FedFunSettings:
    """Everything the FedFun family reads from the run config."""

    algorithm: str
    learner: str  # FSR only: 'mlp' or 'tree' (a node may override it, NODE_LEARNER)
    hidden: tuple[int, ...]  # widths of the MLP's hidden layers (a node may override, NODE_HIDDEN)
    topology: str
    degree: int  # 'regular'
    probability: float  # 'erdos-renyi'
    edges: str  # 'edges': "0-1,1-2,..."
    lam: float  # FSR's lambda
    gamma: float  # FSR's proximal parameter; 0: half of Assumption 3's bound 1/(lambda ||L||)
    delta: float  # box-kernel radius, as a fraction of the data's bounding box per side
    penalty_samples: int  # b'
    step: str  # 'jacobi' (eq. 14, the paper's experiments) or 'prox-grad' (eq. 5)
    initial_steps: int
    local_steps: int
    batch_size: int
    lr: float
    max_leaves: int  # 0: min(training samples over all nodes, 1000)
    psr_lambda: float
    momentum_lr: float  # DFedAvgM's SGD learning rate
    momentum: float
    distill_steps: int  # DFedDF
    distill_samples: int
    federated_eval: bool

    def round_zero_steps(self) -> int:
        """Local steps of round 0: the long initial fit for FSR and PSR, one pass for the rest."""
        return self.initial_steps if self.algorithm in (FSR, PSR) else self.local_steps

    def parametric(self) -> bool:
        """Whether the algorithm exchanges parameters (the baselines: one architecture for all)."""
        return self.algorithm != FSR

    def gamma_for(self, spectral_norm: float) -> float:
        """gamma, or the default 1 / (2 lambda ||L||), half of Assumption 3's bound."""
        return self.gamma or 1.0 / (2.0 * self.lam * max(spectral_norm, 1e-12))


def parse_hidden(text: str, key: str) -> tuple[int, ...]:
    """Hidden widths from "50,50" (ConfigError naming ``key``)."""
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        widths = ()
    if not widths or any(w < 1 or w > 100_000 for w in widths):
        raise ConfigError.bound(key, text, "a comma-separated list of widths in [1, 100000], "
                                "e.g. '50,50'")
    return widths


def fedfun_settings(settings: RunSettings) -> FedFunSettings:
    """Parse ``fedfun.*``; ConfigError names the key."""
    raw = settings.raw
    algorithm = settings.algorithm if settings.algorithm in ALGORITHMS else FSR
    out = FedFunSettings(
        algorithm=algorithm,
        learner=read_key(raw, "fedfun.learner", str, "mlp"),
        hidden=parse_hidden(read_key(raw, "fedfun.hidden", str, "50,50"), "fedfun.hidden"),
        topology=read_key(raw, "fedfun.topology", str, "ring"),
        degree=read_key(raw, "fedfun.degree", int, 3),
        probability=read_key(raw, "fedfun.probability", float, 0.5),
        edges=read_key(raw, "fedfun.edges", str, ""),
        lam=read_key(raw, "fedfun.lambda", float, 100.0),
        gamma=read_key(raw, "fedfun.gamma", float, 0.0),
        delta=read_key(raw, "fedfun.delta", float, 0.05),
        penalty_samples=read_key(raw, "fedfun.penalty-samples", int, 1000),
        step=read_key(raw, "fedfun.step", str, JACOBI),
        initial_steps=read_key(raw, "fedfun.initial-steps", int, 2000),
        local_steps=read_key(raw, "fedfun.local-steps", int, 200),
        batch_size=read_key(raw, "fedfun.batch-size", int, 200),
        lr=read_key(raw, "fedfun.lr", float, 1e-3),
        max_leaves=read_key(raw, "fedfun.max-leaves", int, 0),
        psr_lambda=read_key(raw, "fedfun.psr-lambda", float, 1.0),
        momentum_lr=read_key(raw, "fedfun.momentum-lr", float, 0.01),
        momentum=read_key(raw, "fedfun.momentum", float, 0.9),
        distill_steps=read_key(raw, "fedfun.distill-steps", int, 100),
        distill_samples=read_key(raw, "fedfun.distill-samples", int, 1000),
        federated_eval=read_key(raw, "fedfun.federated-eval", bool, True),
    )
    if out.learner not in LEARNERS:
        raise ConfigError.choice("fedfun.learner", out.learner, LEARNERS)
    if out.topology not in TOPOLOGIES:
        raise ConfigError.choice("fedfun.topology", out.topology, TOPOLOGIES)
    if out.step not in STEP_FORMS:
        raise ConfigError.choice("fedfun.step", out.step, STEP_FORMS)
    require(out.degree >= 1, "fedfun.degree", out.degree, ">= 1")
    require(0.0 < out.probability <= 1.0, "fedfun.probability", out.probability, "in (0, 1]")
    require(out.topology != "edges" or out.edges.strip() != "", "fedfun.edges", out.edges,
            "a list like '0-1,1-2' when fedfun.topology='edges'")
    require(0.0 <= out.lam < float("inf"), "fedfun.lambda", out.lam, "finite and >= 0")
    require(out.lam > 0.0 or out.gamma > 0.0, "fedfun.gamma", out.gamma,
            "> 0 when fedfun.lambda is 0 (the default gamma is 1 / (2 lambda ||L||))")
    require(0.0 <= out.gamma < float("inf"), "fedfun.gamma", out.gamma, "finite and >= 0")
    require(0.0 <= out.delta <= 1.0, "fedfun.delta", out.delta, "in [0, 1]")
    require(out.penalty_samples >= 1, "fedfun.penalty-samples", out.penalty_samples, ">= 1")
    require(out.initial_steps >= 1, "fedfun.initial-steps", out.initial_steps, ">= 1")
    require(out.local_steps >= 1, "fedfun.local-steps", out.local_steps, ">= 1")
    require(out.batch_size >= 1, "fedfun.batch-size", out.batch_size, ">= 1")
    require(0.0 < out.lr < float("inf"), "fedfun.lr", out.lr, "finite and > 0")
    require(out.max_leaves >= 0, "fedfun.max-leaves", out.max_leaves, ">= 0 (0: auto)")
    require(out.psr_lambda >= 0.0, "fedfun.psr-lambda", out.psr_lambda, ">= 0")
    require(0.0 < out.momentum_lr < float("inf"), "fedfun.momentum-lr", out.momentum_lr, "> 0")
    require(0.0 <= out.momentum < 1.0, "fedfun.momentum", out.momentum, "in [0, 1)")
    require(out.distill_steps >= 0, "fedfun.distill-steps", out.distill_steps, ">= 0")
    require(out.distill_samples >= 1, "fedfun.distill-samples", out.distill_samples, ">= 1")
    return out


def node_learner(settings: FedFunSettings, node_config: dict) -> tuple[str, tuple[int, ...]]:
    """This node's learner and hidden widths: the run's, unless its node config overrides them
    (FSR only: heterogeneous models, appendix C.1). ConfigError names the node-config key."""
    learner = str(node_config.get(NODE_LEARNER, settings.learner))
    hidden = settings.hidden
    if NODE_HIDDEN in node_config:
        hidden = parse_hidden(str(node_config[NODE_HIDDEN]), f"node config {NODE_HIDDEN}")
    if learner not in LEARNERS:
        raise ConfigError.choice(f"node config {NODE_LEARNER}", learner, LEARNERS)
    if settings.parametric() and (learner, hidden) != ("mlp", settings.hidden):
        raise ConfigError(f"{settings.algorithm} averages parameters: every node needs the run's "
                          f"mlp {settings.hidden}; drop {NODE_LEARNER}/{NODE_HIDDEN} from the node "
                          "config")
    return learner, hidden


def max_leaves(settings: FedFunSettings, total_samples: int) -> int:
    """The KDDT's leaf budget: the key, or min(training samples over all nodes, 1000)."""
    return settings.max_leaves or max(1, min(total_samples, MAX_LEAVES))


def model_limits(fedfun: FedFunSettings, task: TaskData) -> ModelLimits:
    """What a node's model may be, checked by the relay and by every receiving node alike: any
    MLP or KDDT of the task's widths for FSR; the run's network (with its Fisher diagonal for
    DFedFish) for the parametric baselines."""
    n_features = int(np.prod(task.input_shape))
    spec = None
    if fedfun.parametric():
        spec = NetworkSpec((n_features, *fedfun.hidden, task.num_outputs))
    leaves = max(fedfun.max_leaves, MAX_LEAVES)
    return ModelLimits(n_features, task.num_outputs, max_nodes=2 * leaves - 1, spec=spec,
                       fisher=fedfun.algorithm == DFEDFISH)
