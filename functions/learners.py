"""The weak-learner kinds an ensemble holds (trees, MLPs, CNNs, and on the server of an encrypted
relay sealed ones): their specs and construction."""

from __future__ import annotations

from collections.abc import Sequence

from functions import convnets, networks
from functions.convnets import ConvNet, ConvNetSpec
from functions.networks import Network, NetworkSpec
from functions.sealed_learners import SealedLearner, SealedSpec
from functions.trees import TreeArrays, TreeSpec

Learner = TreeArrays | Network | ConvNet | SealedLearner
LearnerSpec = TreeSpec | NetworkSpec | ConvNetSpec | SealedSpec
KINDS = ("tree", "mlp", "cnn")


def learner_spec(learner: Learner) -> LearnerSpec:
    """The frozen spec of a learner (equal specs = same architecture, inputs and outputs)."""
    if not isinstance(learner, (TreeArrays, Network, ConvNet, SealedLearner)):
        raise TypeError(f"not a learner kind (tree, mlp, cnn, sealed): {type(learner).__name__}")
    return learner.spec


def build_learner(spec: NetworkSpec | ConvNetSpec) -> Network | ConvNet:
    """A freshly initialised network of ``spec`` (seed torch's generator for determinism)."""
    if isinstance(spec, NetworkSpec):
        return networks.build(spec)
    if isinstance(spec, ConvNetSpec):
        return convnets.build(spec)
    raise TypeError(f"no network for a spec of type {type(spec).__name__}")


def same_spec_runs(learners: Sequence[Learner]) -> list[tuple[int, int]]:
    """(start, stop) of each maximal run of consecutive learners with equal specs."""
    runs: list[tuple[int, int]] = []
    previous = None
    for k, learner in enumerate(learners):
        spec = learner_spec(learner)
        if runs and spec == previous:
            runs[-1] = (runs[-1][0], k + 1)
        else:
            runs.append((k, k + 1))
        previous = spec
    return runs
