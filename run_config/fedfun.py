"""The ``fedfun.*`` run-config table (FedFun and its four decentralised baselines), validated once
and shared by the client and server halves, and the per-node overrides of heterogeneous runs.

All five algorithms run on the same relay (``strategies.fedfun``): FSR (``fedfun``) exchanges
functions, the baselines parameters. Round 0 is local training only (h_i^0 = argmin R_i,
``fedfun.initial-steps`` steps for FSR and PSR as in appendix B, one ordinary local pass of
``fedfun.local-steps`` for the others); each server round then relays the neighbours' models and
runs one local step of the algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from functions.networks import NetworkSpec
from functions.node_models import ModelLimits
from oracles.fedfun_local import DFEDAVGM, DFEDDF, DFEDFISH, FSR, PSR, TREE_LEARNER
from oracles.fsr_network import JACOBI, STEP_FORMS
from oracles.graphs import TOPOLOGIES
from run_config.common import RunSettings
from run_config.family import (
    FUSED_EVALUATION,
    RELAY_MESSAGES,
    Algorithm,
    Family,
    Table,
    require_fusable,
)
from run_config.keys import (
    Check,
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
from run_config.node_keys import NodeKey
from tasks.datasets import TaskData
from tasks.errors import ConfigError

ALGORITHMS = (FSR, PSR, DFEDAVGM, DFEDFISH, DFEDDF)
LEARNERS = ("mlp", TREE_LEARNER)
MAX_LEAVES = 1000  # appendix B: min(training samples over all clients, 1000)
NODE_LEARNER, NODE_HIDDEN = "fedfun-learner", "fedfun-hidden"  # node-config overrides


def parse_hidden(text: str, key: str) -> tuple[int, ...]:
    """Hidden widths from "50,50" (ConfigError naming ``key``)."""
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        widths = ()
    if not widths or any(w < 1 or w > 100_000 for w in widths):
        raise ConfigError.bound(
            key, text, "a comma-separated list of widths in [1, 100000], e.g. '50,50'"
        )
    return widths


FEDFUN_KEYS = (
    Key(
        "fedfun.learner",
        str,
        "mlp",
        "FSR's model: `mlp` or `tree` (KDDT); a node may "
        "override it (node config `fedfun-learner`)",
        OneOf(LEARNERS),
    ),
    Key(
        "fedfun.hidden",
        str,
        "50,50",
        "hidden widths of every FedFun-family MLP (appendix B: "
        "two layers of 50); node config `fedfun-hidden` overrides it for one FSR node",
        lambda key, value: parse_hidden(value, key),
    ),
    Key(
        "fedfun.topology",
        str,
        "ring",
        "`ring` (random ring, as the paper), `regular` (random "
        "`fedfun.degree`-regular), `complete`, `erdos-renyi` (G(n, `fedfun.probability`), "
        "redrawn until connected), `edges` (`fedfun.edges`)",
        OneOf(TOPOLOGIES),
    ),
    Key("fedfun.degree", int, 3, "`regular` only", at_least(1)),
    Key("fedfun.probability", float, 0.5, "`erdos-renyi` only", within(0, 1, "(]")),
    Key("fedfun.edges", str, "", '`edges` only: partition-id pairs, `"0-1,1-2,2-0"`'),
    Key(
        "fedfun.lambda",
        float,
        100.0,
        "FSR's disagreement weight λ",
        finite_at_least(0),
        field="lam",
    ),
    Key(
        "fedfun.gamma",
        float,
        0.0,
        "FSR's proximal parameter γ; 0 = 1/(2λ‖L‖), half of Assumption 3's bound",
        finite_at_least(0),
    ),
    Key(
        "fedfun.delta",
        float,
        0.05,
        "box-kernel radius δ, as a fraction of the data box per "
        "side (`oracles/domain.py`); > 0 for trees",
        within(0, 1),
    ),
    Key(
        "fedfun.penalty-samples",
        int,
        1000,
        "b': uniform points of the disagreement penalty "
        "per batch (networks), or standing for a network neighbour of a tree",
        at_least(1),
    ),
    Key(
        "fedfun.step",
        str,
        JACOBI,
        "`jacobi` (eq. 14) or `prox-grad` (eq. 5), see FedFun in docs/algorithms.md",
        OneOf(STEP_FORMS),
    ),
    Key(
        "fedfun.initial-steps",
        int,
        2000,
        "round 0's local steps for `fedfun` and `psr` "
        "(appendix B: 10,000); the other baselines train `fedfun.local-steps`",
        at_least(1),
    ),
    Key(
        "fedfun.local-steps",
        int,
        200,
        "local steps per round (appendix B: 1,000 for FSR)",
        at_least(1),
    ),
    Key("fedfun.batch-size", int, 200, "minibatch of every FedFun-family step", at_least(1)),
    Key(
        "fedfun.lr",
        float,
        0.001,
        "Adam's learning rate (FSR, PSR, DFedFish, DFedDF)",
        finite_above(0),
    ),
    Key(
        "fedfun.max-leaves",
        int,
        0,
        "KDDT leaf budget; 0 = min(training samples of all nodes, 1000)",
        at_least(0, "(0: auto)"),
    ),
    Key("fedfun.psr-lambda", float, 1.0, "PSR's weight of Σ_j ‖θ − θ_j‖²", at_least(0)),
    Key(
        "fedfun.momentum-lr",
        float,
        0.01,
        "DFedAvgM's SGD learning rate",
        Check("> 0", lambda v: 0.0 < v < float("inf")),
    ),
    Key("fedfun.momentum", float, 0.9, "DFedAvgM's SGD momentum", within(0, 1, "[)")),
    Key(
        "fedfun.distill-steps",
        int,
        100,
        "DFedDF: Adam steps of distillation per round",
        at_least(0),
    ),
    Key(
        "fedfun.distill-samples",
        int,
        1000,
        "DFedDF: uniform inputs per distillation step",
        at_least(1),
    ),
    Key(
        "fedfun.federated-eval",
        bool,
        True,
        "evaluate every node model each round (and relay the new models with it)",
    ),
)


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
    eval_with_train: bool = True  # round t's evaluation rides on round t + 1's train messages

    def round_zero_steps(self) -> int:
        """Local steps of round 0: the long initial fit for FSR and PSR, one pass for the rest."""
        return self.initial_steps if self.algorithm in (FSR, PSR) else self.local_steps

    def parametric(self) -> bool:
        """Whether the algorithm exchanges parameters (the baselines: one architecture for all)."""
        return self.algorithm != FSR

    def gamma_for(self, spectral_norm: float) -> float:
        """gamma, or the default 1 / (2 lambda ||L||), half of Assumption 3's bound."""
        return self.gamma or 1.0 / (2.0 * self.lam * max(spectral_norm, 1e-12))


def fedfun_settings(settings: RunSettings) -> FedFunSettings:
    """Parse ``FEDFUN_KEYS``, then the checks across keys; ConfigError names the key."""
    v = read_keys(settings.raw, FEDFUN_KEYS)
    out = build(
        FedFunSettings,
        v,
        FEDFUN_KEYS,
        algorithm=settings.algorithm if settings.algorithm in ALGORITHMS else FSR,
        hidden=parse_hidden(v["fedfun.hidden"], "fedfun.hidden"),
        eval_with_train=settings.eval_with_train,
    )
    require_fusable(out.eval_with_train, out.federated_eval, "fedfun.federated-eval is true")
    require(
        out.topology != "edges" or out.edges.strip() != "",
        "fedfun.edges",
        out.edges,
        "a list like '0-1,1-2' when fedfun.topology='edges'",
    )
    require(
        out.lam > 0.0 or out.gamma > 0.0,
        "fedfun.gamma",
        out.gamma,
        "> 0 when fedfun.lambda is 0 (the default gamma is 1 / (2 lambda ||L||))",
    )
    return out


def node_learner(
    settings: FedFunSettings, node_config: Mapping[str, Any]
) -> tuple[str, tuple[int, ...]]:
    """This node's learner and hidden widths: the run's, unless its node config overrides them
    (FSR only: heterogeneous models, appendix C.1). ConfigError names the node-config key."""
    learner = str(node_config.get(NODE_LEARNER, settings.learner))
    hidden = settings.hidden
    if NODE_HIDDEN in node_config:
        hidden = parse_hidden(str(node_config[NODE_HIDDEN]), f"node config {NODE_HIDDEN}")
    if learner not in LEARNERS:
        raise ConfigError.choice(f"node config {NODE_LEARNER}", learner, LEARNERS)
    if settings.parametric() and (learner, hidden) != ("mlp", settings.hidden):
        raise ConfigError(
            f"{settings.algorithm} averages parameters: every node needs the run's "
            f"mlp {settings.hidden}; drop {NODE_LEARNER}/{NODE_HIDDEN} from the node "
            "config"
        )
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
    return ModelLimits(
        n_features,
        task.num_outputs,
        max_nodes=2 * leaves - 1,
        spec=spec,
        fisher=fedfun.algorithm == DFEDFISH,
    )


FEDFUN_TABLE = Table("`fedfun.*`", "FedFun (FSR) and its four decentralised baselines", FEDFUN_KEYS)

FEDFUN: Family[FedFunSettings, tuple[str, tuple[int, ...]]] = Family(
    "fedfun",
    (
        Algorithm(FSR, "FedFun: function-space regularisation on a graph (FSR)"),
        Algorithm(PSR, "PSR: parameter-space regularisation (synchronous DJAM)"),
        Algorithm(DFEDAVGM, "DFedAvgM: neighbour averaging, local momentum SGD"),
        Algorithm(DFEDFISH, "DFedFish: Fisher-weighted neighbour averaging"),
        Algorithm(DFEDDF, "DFedDF: neighbours' ensemble distilled on sampled inputs"),
    ),
    fedfun_settings,
    tables=(FEDFUN_TABLE,),
    reads=(*FUSED_EVALUATION, "relay-encryption"),
    steps=("fedfun.lr", "fedfun.step"),
    message_types=RELAY_MESSAGES,
    node_keys=(
        NodeKey(
            NODE_LEARNER, str, "FSR: this node's own model, `mlp` or `tree` (default: the run's)"
        ),
        NodeKey(
            NODE_HIDDEN, str, "FSR: this node's own MLP hidden widths, `50,50` (default: the run's)"
        ),
    ),
    node_overrides=node_learner,
)
