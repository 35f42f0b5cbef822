"""What an FFGB run's functions are on one task: the weak learners' architecture, the loss,
FFGB.C's clipping and final bound, and the limits a decoder holds a received ensemble to.

Both halves build one ``BoostingModel`` from the run's ``ffgb.*`` settings
(``run_config.ffgb.FFGBSettings.model``): the server once per run, a node once per message. A
tree learner is a learner kind like the networks: its spec is a ``TreeSpec`` (trees share their
inputs and outputs; their shape is fitted, up to ``tree_depth``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from functions.convnets import ConvNetSpec
from functions.errors import DecodeError
from functions.learners import LearnerSpec, learner_spec
from functions.limits import Limits
from functions.networks import NetworkSpec
from functions.trees import TreeArrays, TreeSpec
from oracles.boosting import Clipping
from oracles.functional_losses import CROSS_ENTROPY, SQUARE, PointwiseLoss
from tasks.datasets import TaskData

CROSS_ENTROPY_GRAD_BOUND = 1.0  # |softmax - onehot| <= 1 in every output
MAX_ENSEMBLE = 10_000_000  # learners in an ensemble a decoder accepts (its version)
LEAKY_RELU = "leaky_relu"  # the paper's MNIST MLP: leaky ReLU 0.01


@dataclass(frozen=True)
class BoostingModel:
    """One run's FFGB functions on one task (see the module docstring)."""

    spec: LearnerSpec
    tree_depth: int
    loss: PointwiseLoss
    clipping: Clipping | None  # FFGB.C's G1, G2
    final_bound: float | None  # B of FFGB.C's output Pi_B(f^T); None: not clipped
    limits: Limits

    @property
    def trees(self) -> bool:
        return isinstance(self.spec, TreeSpec)

    def describe(self) -> str:
        """The learner, for logs."""
        return f"tree of depth {self.tree_depth}" if self.trees else str(self.spec)

    def check_learner(self, learner: object) -> None:
        """The run's architecture (and FFGB.C's clipping bound G2), nothing larger: what the
        server checks of a reply's learners, and a node of the ones it opens (an encrypted
        relay's); ``DecodeError`` otherwise."""
        clipping = self.clipping
        if self.trees:
            if not isinstance(learner, TreeArrays) or learner.depth > self.tree_depth:
                raise DecodeError(f"expected a tree of depth <= {self.tree_depth}")
            if clipping is not None and np.abs(learner.value).max() > clipping.learner_bound:
                raise DecodeError(f"a leaf value exceeds G2 = {clipping.learner_bound}")
            return
        expected = self.spec
        if clipping is not None:
            expected = replace(expected, output_bound=float(clipping.learner_bound))
        if learner_spec(learner) != expected:
            raise DecodeError(f"a learner is not the run's {expected}")


def learner_architecture(learner: str, hidden: int, task: TaskData) -> LearnerSpec:
    """The weak learners' spec: a tree's inputs and outputs, the paper's MNIST MLP (two hidden
    layers of ``hidden``, leaky ReLU 0.01) or its CIFAR CNN (the PyTorch-tutorial LeNet with
    dense layers of ``hidden``). ValueError for a CNN on inputs that are not images."""
    n_features = int(np.prod(task.input_shape))
    if learner == "tree":
        return TreeSpec(n_features, task.num_outputs)
    if learner == "mlp":
        return NetworkSpec((n_features, hidden, hidden, task.num_outputs), LEAKY_RELU)
    if len(task.input_shape) != 3:
        raise ValueError(
            f"used with images (channels, height, width), not inputs of shape {task.input_shape}"
        )
    return ConvNetSpec(tuple(task.input_shape), hidden=(hidden, hidden), n_outputs=task.num_outputs)


def boosting_loss(variant: str, task: TaskData) -> PointwiseLoss:
    """Cross-entropy for classification with FFGB and FFGB.C; FFGB.L is least squares."""
    if variant == "ffgb-l" or task.kind != "classification":
        return PointwiseLoss(SQUARE, task.num_classes)
    return PointwiseLoss(CROSS_ENTROPY, task.num_classes)


def final_bound(clipping: Clipping | None, output_bound: float, mu: float) -> float | None:
    """B of Pi_B(f^T) (FFGB.C's output, Theorem 3.2): ``output_bound``, or 2G/(mu gamma) when
    mu > 0 (the smallest B the theorem allows); None: no clipping."""
    if clipping is None:
        return None
    if output_bound > 0:
        return output_bound
    return 2 * clipping.grad_bound / (mu * clipping.gamma) if mu > 0 else None


def decoder_limits(spec: LearnerSpec, tree_depth: int, task: TaskData) -> Limits:
    """What a decoder accepts in this run: learners no larger than the run's architecture."""
    return Limits(
        max_learners=MAX_ENSEMBLE,
        max_nodes=2 ** (tree_depth + 1) - 1,
        max_params=1 if isinstance(spec, TreeSpec) else spec.n_params,
        max_features=int(np.prod(task.input_shape)),
        max_outputs=task.num_outputs,
    )


def boosting_model(
    variant: str,
    learner: str,
    hidden: int,
    tree_depth: int,
    grad_bound: float,
    gamma: float,
    mu: float,
    output_bound: float,
    task: TaskData,
) -> BoostingModel:
    """The model of an FFGB run (``variant``: ffgb, ffgb-c or ffgb-l) on ``task``. FFGB.C's G
    is ``grad_bound``, or 1 for cross-entropy (0 given); ValueError for an architecture the
    task cannot take."""
    spec = learner_architecture(learner, hidden, task)
    clipping = None
    if variant == "ffgb-c":
        clipping = Clipping(grad_bound or CROSS_ENTROPY_GRAD_BOUND, gamma)
    return BoostingModel(
        spec,
        tree_depth,
        boosting_loss(variant, task),
        clipping,
        final_bound(clipping, output_bound, mu),
        decoder_limits(spec, tree_depth, task),
    )
