"""The ``ffgb.*`` run-config table, validated once and shared by the client and server halves;
and the weak learner's architecture for a task (both halves build or check it from here)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from functions.convnets import ConvNetSpec
from functions.ensembles import Limits
from functions.networks import NetworkSpec
from oracles.boosting import EXPERIMENT, SCHEDULES, THEOREM, Clipping, StepSizes
from oracles.distillation import FUNCTION, MODES, NONE
from oracles.lipschitz import KINDS, UPPER
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from oracles.weak_learning import OracleSettings
from run_config.common import RunSettings, read_key, require
from tasks.datasets import TaskData
from tasks.errors import ConfigError

VARIANTS = ("ffgb", "ffgb-c", "ffgb-l")
LEARNERS = ("mlp", "cnn", "tree")
# eta0 = 0: the authors' MNIST value; FFGB.L's g <- (1 - eta) g + eta h extrapolates past eta = 1
DEFAULT_ETA0 = {"ffgb": 10.0, "ffgb-c": 10.0, "ffgb-l": 1.0}
THEOREM_CONSTANT = {"ffgb": 2.0, "ffgb-c": 4.0, "ffgb-l": 4.0}  # Theorems 3.1, 3.2, 3.3
CROSS_ENTROPY_GRAD_BOUND = 1.0  # |softmax - onehot| <= 1 in every output
BOOST, DISTILL = "boost", "distill"  # the two kinds of round
MAX_ENSEMBLE = 10_000_000  # learners in an ensemble a decoder accepts (its version)


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

    def loss(self, task: TaskData) -> PointwiseLoss:
        """Cross-entropy for classification with FFGB and FFGB.C; FFGB.L is least squares."""
        if self.variant == "ffgb-l" or task.kind != "classification":
            return PointwiseLoss(SQUARE, task.num_classes)
        return PointwiseLoss(CROSS_ENTROPY, task.num_classes)

    def clipping(self, task: TaskData) -> Clipping | None:
        """FFGB.C's G1/G2 constants (None for the other variants)."""
        if self.variant != "ffgb-c":
            return None
        bound = self.grad_bound or CROSS_ENTROPY_GRAD_BOUND
        return Clipping(bound, self.gamma)

    def final_bound(self, task: TaskData) -> float | None:
        """B of Pi_B(f^T) (FFGB.C's output, Theorem 3.2): ``output-bound``, or 2G/(mu gamma)
        when mu > 0 (the smallest B the theorem allows); None: no clipping."""
        clipping = self.clipping(task)
        if clipping is None:
            return None
        if self.output_bound > 0:
            return self.output_bound
        return 2 * clipping.grad_bound / (self.mu * self.gamma) if self.mu > 0 else None


def ffgb_settings(settings: RunSettings) -> FFGBSettings:
    """Parse ``ffgb.*``; ConfigError names the key."""
    raw = settings.raw
    variant = settings.algorithm if settings.algorithm in VARIANTS else "ffgb"
    local_steps = read_key(raw, "ffgb.local-steps", int, 3)
    require(local_steps >= 1, "ffgb.local-steps", local_steps, ">= 1")
    kind = read_key(raw, "ffgb.schedule", str, EXPERIMENT)
    if kind not in SCHEDULES:
        raise ConfigError.choice("ffgb.schedule", kind, SCHEDULES)
    eta0 = read_key(raw, "ffgb.eta0", float, 0.0) or DEFAULT_ETA0[variant]
    require(0 < eta0 < float("inf"), "ffgb.eta0", eta0, "finite and >= 0 (0 = auto)")
    mu = read_key(raw, "ffgb.mu", float, 0.0)
    require(0 <= mu < float("inf"), "ffgb.mu", mu, "finite and >= 0")
    modulus = 1.0 if variant == "ffgb-l" else mu  # the square loss is 1-strongly convex
    require(kind != THEOREM or modulus > 0, "ffgb.mu", mu,
            "> 0 with ffgb.schedule='theorem' (eta = c / (mu (K t + k + 1)))")
    steps = StepSizes(kind, local_steps, eta0, modulus, THEOREM_CONSTANT[variant])
    learner = read_key(raw, "ffgb.learner", str, "mlp")
    if learner not in LEARNERS:
        raise ConfigError.choice("ffgb.learner", learner, LEARNERS)
    require(not (variant == "ffgb-l" and learner == "tree"), "ffgb.learner", learner,
            "a network with ffgb-l (its oracle fits input gradients, which a tree has not)")
    oracle = OracleSettings(
        steps=read_key(raw, "ffgb.oracle-steps", int, 500),
        lr=read_key(raw, "ffgb.oracle-lr", float, 0.005),
        batch_size=read_key(raw, "ffgb.oracle-batch-size", int, 128),
        sup_p=read_key(raw, "ffgb.sup-p", float, 8.0),
        sobolev_weight=read_key(raw, "ffgb.sobolev-weight", float, 1.0),
        sobolev_samples=read_key(raw, "ffgb.sobolev-samples", int, 256),
    )
    require(oracle.steps >= 1, "ffgb.oracle-steps", oracle.steps, ">= 1")
    require(0 < oracle.lr < float("inf"), "ffgb.oracle-lr", oracle.lr, "finite and > 0")
    require(oracle.batch_size >= 0, "ffgb.oracle-batch-size", oracle.batch_size,
            ">= 0 (0 = all points)")
    require(1 <= oracle.sup_p <= 64, "ffgb.sup-p", oracle.sup_p, "in [1, 64]")
    require(oracle.sobolev_weight >= 0, "ffgb.sobolev-weight", oracle.sobolev_weight, ">= 0")
    require(oracle.sobolev_samples >= 1, "ffgb.sobolev-samples", oracle.sobolev_samples, ">= 1")
    distill = read_key(raw, "ffgb.distill", str, NONE)
    if distill not in MODES:
        raise ConfigError.choice("ffgb.distill", distill, MODES)
    require(not (distill == FUNCTION and variant == "ffgb-c"), "ffgb.distill", distill,
            "'none' or 'increment' with ffgb-c (a distilled g^(K+1) has no bound G2)")
    out = FFGBSettings(
        variant=variant,
        local_steps=local_steps,
        steps=steps,
        mu=0.0 if variant == "ffgb-l" else mu,
        residual=read_key(raw, "ffgb.residual", bool, True),
        learner=learner,
        hidden=read_key(raw, "ffgb.hidden", int, 32),
        tree_depth=read_key(raw, "ffgb.tree-depth", int, 3),
        oracle=oracle,
        gamma=read_key(raw, "ffgb.gamma", float, 0.5),
        grad_bound=read_key(raw, "ffgb.grad-bound", float, 0.0),
        lipschitz=read_key(raw, "ffgb.lipschitz", float, 0.0),
        output_bound=read_key(raw, "ffgb.output-bound", float, 0.0),
        federated_eval=read_key(raw, "ffgb.federated-eval", bool, True),
        distill=distill,
        distill_every=read_key(raw, "ffgb.distill-every", int, 0),
        distill_rounds=read_key(raw, "ffgb.distill-rounds", int, 1),
        distill_steps=read_key(raw, "ffgb.distill-steps", int, 0) or oracle.steps,
        one_shot=read_key(raw, "ffgb.one-shot", bool, False),
        extension=read_key(raw, "ffgb.extension", str, UPPER),
    )
    if out.extension not in KINDS:
        raise ConfigError.choice("ffgb.extension", out.extension, KINDS)
    require(out.distill_every >= 0, "ffgb.distill-every", out.distill_every, ">= 0 (0 = never)")
    require(out.distill_rounds >= 1, "ffgb.distill-rounds", out.distill_rounds, ">= 1")
    require(out.distill_steps >= 1, "ffgb.distill-steps", out.distill_steps,
            ">= 0 (0 = ffgb.oracle-steps)")
    require(not (out.one_shot and (variant != "ffgb-l" or out.distill != NONE
                                   or out.distill_every)), "ffgb.one-shot", out.one_shot,
            "false unless algorithm='ffgb-l' without distillation (Remark 3.1 is FFGB.L's)")
    require(not (out.distill_every and learner == "tree"), "ffgb.distill-every",
            out.distill_every, "0 with tree learners (FedAvg distils into a network)")
    require(1 <= out.hidden <= 4096, "ffgb.hidden", out.hidden, "in [1, 4096]")
    require(1 <= out.tree_depth <= 20, "ffgb.tree-depth", out.tree_depth, "in [1, 20]")
    require(0 < out.gamma <= 1, "ffgb.gamma", out.gamma, "in (0, 1]")
    require(0 <= out.grad_bound < float("inf"), "ffgb.grad-bound", out.grad_bound,
            "finite and >= 0 (0 = auto)")
    require(0 <= out.lipschitz < float("inf"), "ffgb.lipschitz", out.lipschitz,
            "finite and >= 0 (0 = from the node's data)")
    require(0 <= out.output_bound < float("inf"), "ffgb.output-bound", out.output_bound,
            "finite and >= 0 (0 = auto)")
    return out


def check_task(ffgb: FFGBSettings, task: TaskData) -> None:
    """What needs the task: FFGB.C on regression needs an explicit gradient bound; a CNN needs
    images. ConfigError names the key."""
    if ffgb.variant == "ffgb-c" and task.kind != "classification" and ffgb.grad_bound == 0:
        raise ConfigError.bound("ffgb.grad-bound", 0.0, "> 0 with ffgb-c on a regression task "
                                "(the square loss has no a-priori gradient bound)")
    learner_spec(ffgb, task)


def learner_spec(ffgb: FFGBSettings, task: TaskData) -> object | None:
    """The architecture of the run's weak learners (None for trees, whose shape is fitted):
    the paper's MNIST MLP (two hidden layers of ``ffgb.hidden``, leaky ReLU 0.01) or its CIFAR
    CNN (the PyTorch-tutorial LeNet with dense layers of ``ffgb.hidden``)."""
    n_features = int(np.prod(task.input_shape))
    if ffgb.learner == "tree":
        return None
    if ffgb.learner == "mlp":
        return NetworkSpec((n_features, ffgb.hidden, ffgb.hidden, task.num_outputs), "leaky_relu")
    if len(task.input_shape) != 3:
        raise ConfigError.bound("ffgb.learner", "cnn", f"used with images (channels, height, "
                                f"width), not inputs of shape {task.input_shape}")
    try:
        return ConvNetSpec(tuple(task.input_shape), hidden=(ffgb.hidden, ffgb.hidden),
                           n_outputs=task.num_outputs)
    except ValueError as err:
        raise ConfigError.bound("ffgb.learner", "cnn", str(err)) from None


def delta_limits(ffgb: FFGBSettings, task: TaskData) -> Limits:
    """What a decoder accepts in this run: learners no larger than the run's architecture."""
    spec = learner_spec(ffgb, task)
    n_features = int(np.prod(task.input_shape))
    return Limits(max_learners=MAX_ENSEMBLE, max_nodes=2 ** (ffgb.tree_depth + 1) - 1,
                  max_params=spec.n_params if spec is not None else 1,
                  max_features=n_features, max_outputs=task.num_outputs)
