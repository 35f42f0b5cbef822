"""One node's local step of FedFun (FSR) and of its four decentralised baselines, on plain models.

Given the node's data in unit-cube coordinates, its own last model and its neighbours' latest
models, each function returns the node's next model. No Flower, no run config: the client half
(``client_app.fedfun``) decodes the messages and calls these.

- FSR with a network: eq. 14 (``oracles.fsr_network``), warm-started from the node's own model.
- FSR with a KDDT: a tree refitted to the smoothed data plus, as weighted uniform boxes, the
  leaves of its own previous tree (weight w_own) and of each neighbour tree (w_nbr), section 5.4.
  A neighbour that is a network enters by the model-agnostic estimate of section 5.2: its values
  at b' uniform points, each a small box carrying 1/b' of the weight.
- PSR, DFedAvgM, DFedFish, DFedDF: ``oracles.decentralized``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from functions.networks import NetworkSpec, build
from functions.node_models import MLP, TREE, NodeModel, torch_function
from oracles.decentralized import (
    adam_train,
    average_parameters,
    diagonal_fisher,
    distill,
    momentum_sgd_train,
    psr_train,
)
from oracles.fsr_network import Anchor, fsr_train
from oracles.kddt import Boxes, data_boxes, fit_kddt, tree_boxes

FSR, PSR, DFEDAVGM, DFEDFISH, DFEDDF = "fedfun", "psr", "dfedavgm", "dfedfish", "dfeddf"
TREE_LEARNER = "tree"  # fedfun.learner; the model it fits is a KDDT (kind TREE)
POINT_BOX = 1e-3  # half-width of the box standing for one sampled value of a network neighbour


@dataclass(frozen=True)
class LocalProblem:
    """A node's training data in cube coordinates and the box kernel's radius there."""

    x: np.ndarray  # (N, p) float32 in [0, 1]^p
    labels: np.ndarray  # (N,) int
    n_outputs: int
    radius: float
    device: torch.device = torch.device("cpu")

    def one_hot(self) -> np.ndarray:
        """Squared-error targets (FSR is smoothed squared error, section 5.1)."""
        return np.eye(self.n_outputs, dtype=np.float32)[self.labels]


@dataclass(frozen=True)
class StepSettings:
    """How one local step runs (parsed from ``fedfun.*`` by the client half)."""

    algorithm: str
    steps: int
    batch_size: int
    lr: float
    seed: int
    penalty_samples: int = 1000
    w_own: float = 0.0  # FSR: weight of ||h - h_i^k||^2
    w_nbr: float = 0.0  # FSR: weight of each ||h - h_j^k||^2
    max_leaves: int = 1000
    psr_lambda: float = 1.0
    momentum_lr: float = 0.01
    momentum: float = 0.9
    distill_steps: int = 0
    distill_samples: int = 1000


def initial_model(
    learner: str, spec: NetworkSpec, problem: LocalProblem, s: StepSettings
) -> NodeModel:
    """Round 0: h_i^0 = argmin R_i, local data only (smoothed squared error for FSR, the
    baselines' own local pass otherwise)."""
    if learner == TREE_LEARNER:
        return fsr_tree_step(None, [], problem, s)
    torch.manual_seed(s.seed)
    network = build(spec).to(problem.device)
    if s.algorithm == FSR:
        return fsr_network_step(NodeModel(network), [], problem, s, anchor_own=False)
    x, y = _tensors(problem)
    if s.algorithm == DFEDAVGM:
        momentum_sgd_train(
            network, x, y, s.steps, s.batch_size, s.momentum_lr, s.momentum, _generator(s)
        )
    else:
        adam_train(network, x, y, s.steps, s.batch_size, s.lr, _generator(s))
    return _with_fisher(network, problem, s)


def fsr_network_step(
    own: NodeModel,
    neighbours: Sequence[NodeModel],
    problem: LocalProblem,
    s: StepSettings,
    anchor_own: bool = True,
) -> NodeModel:
    """Eq. 14 from the node's own network (trained in place on a copy)."""
    network = _copy(own.function, problem.device)
    anchors = [_anchor(s.w_nbr, m, problem.device) for m in neighbours]
    if anchor_own:
        anchors.insert(0, _anchor(s.w_own, own, problem.device))
    x = torch.as_tensor(problem.x, device=problem.device)
    y = torch.as_tensor(problem.one_hot(), device=problem.device)
    fsr_train(
        network,
        x,
        y,
        anchors,
        s.steps,
        problem.radius,
        s.batch_size,
        s.penalty_samples,
        s.lr,
        _generator(s),
    )
    return NodeModel(network.cpu())


def _anchor(weight: float, model: NodeModel, device: torch.device) -> Anchor:
    """``model`` as an FSR anchor (replayable in a CUDA graph when it is a network)."""
    return Anchor(weight, torch_function(model, device), replayable=model.kind == MLP)


def fsr_tree_step(
    own: NodeModel | None, neighbours: Sequence[NodeModel], problem: LocalProblem, s: StepSettings
) -> NodeModel:
    """A KDDT fitted to the smoothed data and the anchors' boxes (section 5.4)."""
    p = problem.x.shape[1]
    items = [
        data_boxes(
            problem.x.astype(np.float64), problem.one_hot().astype(np.float64), problem.radius
        )
    ]
    anchors = ([] if own is None else [(own, s.w_own)]) + [(m, s.w_nbr) for m in neighbours]
    rng = np.random.default_rng(s.seed)
    for model, weight in anchors:
        if model.kind == TREE:
            items.append(tree_boxes(model.function, weight))
        else:
            items.append(_sampled_boxes(model, weight, p, s.penalty_samples, rng))
    lower, upper = np.zeros(p), np.ones(p)
    return NodeModel(fit_kddt(Boxes.concat(*items), lower, upper, s.max_leaves))


def _sampled_boxes(
    model: NodeModel, weight: float, p: int, samples: int, rng: np.random.Generator
) -> Boxes:
    """weight * ||h - g||^2 for a network g, estimated at ``samples`` uniform points (eq. 12):
    each point a box of half-width POINT_BOX holding weight / samples of mass."""
    z = rng.uniform(0.0, 1.0, size=(samples, p))
    return Boxes(
        lower=z - POINT_BOX,
        upper=z + POINT_BOX,
        mass=np.full(samples, weight / samples),
        label=model.predict(z),
    )


def baseline_step(
    own: NodeModel, neighbours: Sequence[NodeModel], problem: LocalProblem, s: StepSettings
) -> NodeModel:
    """One round of PSR (from the node's own network) or of DFedAvgM, DFedFish, DFedDF (from
    the mix of its neighbourhood's)."""
    x, y = _tensors(problem)
    generator = _generator(s)
    if s.algorithm == PSR:
        network = _copy(own.function, problem.device)
        others = [_params(m.function) for m in neighbours]
        psr_train(network, x, y, others, s.psr_lambda, s.steps, s.batch_size, s.lr, generator)
        return NodeModel(network.cpu())
    everyone = [own, *neighbours]
    network = mixed_model(s.algorithm, own, neighbours).function.to(problem.device)
    if s.algorithm == DFEDAVGM:
        momentum_sgd_train(
            network, x, y, s.steps, s.batch_size, s.momentum_lr, s.momentum, generator
        )
    else:
        if s.algorithm == DFEDDF and s.distill_steps:
            teachers = [torch_function(m, problem.device) for m in everyone]
            distill(
                network,
                teachers,
                problem.x.shape[1],
                s.distill_steps,
                s.distill_samples,
                s.lr,
                generator,
                replayable=all(m.kind == MLP for m in everyone),
            )
        adam_train(network, x, y, s.steps, s.batch_size, s.lr, generator)
    return _with_fisher(network, problem, s)


MIXING = (DFEDAVGM, DFEDFISH, DFEDDF)  # a node's model after a round is its neighbourhood's mix


def mixed_model(algorithm: str, own: NodeModel, neighbours: Sequence[NodeModel]) -> NodeModel:
    """The mix of the node's and its neighbours' networks: uniform (DFedAvgM, DFedDF) or
    Fisher-weighted (DFedFish). It is where the node's next round starts, and the node's model
    that the mixing baselines evaluate (DFedAvgM's iterate x_i^{k+1} = sum_j w_ij z_j^k, Sun et
    al. 2022): the locally trained z_i^k alone fits one node's data, not the federation's."""
    everyone = [own, *neighbours]
    weights = [m.fisher for m in everyone] if algorithm == DFEDFISH else None
    network = _copy(own.function, torch.device("cpu"))
    _load(network, average_parameters([_params(m.function) for m in everyone], weights))
    return NodeModel(network)


def _with_fisher(network: torch.nn.Module, problem: LocalProblem, s: StepSettings) -> NodeModel:
    """The trained network; DFedFish adds its Fisher diagonal for the neighbours' averages."""
    if s.algorithm != DFEDFISH:
        return NodeModel(network.cpu())
    x, y = _tensors(problem)
    fisher = diagonal_fisher(network, x, y)
    return NodeModel(network.cpu(), tuple(np.asarray(f, np.float32) for f in fisher))


def _tensors(problem: LocalProblem) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.as_tensor(problem.x, device=problem.device),
        torch.as_tensor(problem.labels, dtype=torch.long, device=problem.device),
    )


def _generator(s: StepSettings) -> torch.Generator:
    return torch.Generator().manual_seed(s.seed)


def _copy(network: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A trainable copy of ``network`` on ``device`` (the anchor keeps the original)."""
    copy = build(network.spec)
    copy.load_state_dict(network.state_dict())
    return copy.to(device)


def _params(network: torch.nn.Module) -> list[np.ndarray]:
    return [t.detach().cpu().numpy() for t in network.state_dict().values()]


def _load(network: torch.nn.Module, params: list[np.ndarray]) -> None:
    state = network.state_dict()
    network.load_state_dict({k: torch.as_tensor(v) for k, v in zip(state, params)})
