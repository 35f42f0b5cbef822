"""The weak-learning oracles of the FFGB paper (appendix B.3): fit a small learner to a target
function given by its values on the node's points.

- WO2 (eq. 23): least squares, mean((h(x) - phi(x))^2), by Adam on minibatches (the paper: Adam,
  1000 steps, lr 0.005; the authors' code: minibatches of 128 and a freshly initialised network
  per call, as here). MLPs take the hand-written fast path (``oracles.mlp_least_squares``).
- WO-infinity (eq. 24): the sup over the points of ||h(x) - phi(x)||^2, through the smooth
  p-mean (mean_j e_j^p)^(1/p), which tends to the max as p grows.
- WO-lip (eq. 25): that sup term plus the mean squared error of the input Jacobians at sample
  points of the node's domain (Sobolev training), the integral over X estimated by Monte Carlo.
- trees: a least-squares regression tree, for every variant (a tree has no input gradient, so
  FFGB.L needs a network), fitted by scikit-learn's exact CART or, on larger nodes, by XGBoost's
  histogram method (``oracles.hist_trees``; ``tree_fitter``).

Every oracle returns the learner as it travels (float32 weights, float32 leaf values, on the CPU)
with its values on the points, so the node steps with exactly the function the others will
receive. Networks train on ``device`` (the node's, ``tasks.devices``); the node's points go there
once per oracle (per round), not once per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from sklearn.tree import DecisionTreeRegressor
from torch import nn

from functions.learners import LearnerSpec, build_learner
from functions.networks import NetworkSpec
from functions.trees import TreeArrays, TreeSpec, from_sklearn
from oracles.boosting import Fitted, LeafStep
from oracles.functional_losses import PointwiseLoss
from oracles.graphed_steps import adam, graphs_on, index_tables, run_steps
from oracles.hist_trees import HistTreeFitter
from oracles.lipschitz import LipschitzExtension
from oracles.mlp_least_squares import ACTIVATIONS, fit_mlp_least_squares, smooth_max_gradient
from oracles.tree_leaves import newton_values
from oracles.xgboost_local import INSTALL, available
from tasks.devices import on_device

CPU = torch.device("cpu")
CART, HIST, AUTO = "cart", "hist", "auto"
TREE_FITTERS = (AUTO, CART, HIST)
MEAN, NEWTON = "mean", "newton"
TREE_LEAVES = (MEAN, NEWTON)
# benchmarks.tree_fit: the histogram fit (binning included) is 2-8 times faster than CART from
# 5,000 points a node on; at 2,000 it is between 0.4 (10 outputs, depth 6) and 1.7 times as
# fast, and below XGBoost's fixed cost per tree makes it slower
HIST_FROM_ROWS = 5_000


@dataclass(frozen=True)
class OracleSettings:
    """How an oracle trains a network: Adam steps, step size, minibatch (0: all points)."""

    steps: int = 500
    lr: float = 0.005
    batch_size: int = 128
    sup_p: float = 8.0  # p of the smooth sup (WO-infinity, WO-lip)
    sobolev_weight: float = 1.0  # weight of the Jacobian term of WO-lip
    sobolev_samples: int = 256  # Monte-Carlo points of WO-lip's integral, drawn once per fit


def minibatches(
    n: int, batch_size: int, steps: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """``steps`` index batches from shuffled passes over n points (all n if batch_size is 0)."""
    size = n if batch_size <= 0 else min(batch_size, n)
    order, at = rng.permutation(n), 0
    for _ in range(steps):
        if at + size > n:
            order, at = rng.permutation(n), 0
        yield order[at : at + size]
        at += size


def new_network(spec: object, seed: int) -> nn.Module:
    """A freshly initialised learner of ``spec``; the global torch RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return build_learner(spec)


def _fitted(network: nn.Module, x: np.ndarray, device: torch.device = CPU) -> Fitted:
    """The trained network back on the CPU (as it travels) and its values on ``x``: computed
    there (the CPU path), or on the accelerator it trained on from the same float32 weights
    (a LeNet's values on a node's points cost a CPU core more than its fit costs a GPU)."""
    network.eval()
    if device.type == "cpu":
        return Fitted(network.to(CPU), network.predict(x))
    with torch.no_grad():
        values = network(on_device(x, device, _flat32)).double().cpu().numpy()
    return Fitted(network.to(CPU), values)


def _adam(
    network: nn.Module,
    loss_of: Callable[..., torch.Tensor],
    batches: Iterator[np.ndarray] | Iterator[tuple[np.ndarray, ...]],
    lr: float,
) -> None:
    """One torch.optim.Adam step of ``loss_of(rows, ...)`` per batch of indices (one array, or
    a tuple of them: rows of the data, of penalty points); on a CUDA device as replayed graphs
    (``oracles.graphed_steps``, capturable Adam): the loss takes nothing from outside the step
    but its indices."""
    device = next(network.parameters()).device
    graphed = graphs_on(device)
    optimiser = adam(network.parameters(), lr, capturable=graphed and device.type == "cuda")
    network.train()
    steps = (batch if isinstance(batch, tuple) else (batch,) for batch in batches)

    def step(indices: Sequence[torch.Tensor]) -> None:
        optimiser.zero_grad(set_to_none=True)
        loss_of(*indices).backward()
        optimiser.step()

    if graphed:
        tables = index_tables(steps, device)
        if tables:
            run_steps(step, tables)
        return
    for indices in steps:
        step([torch.as_tensor(index, device=device) for index in indices])


def _flat32(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, dtype=np.float32).reshape(len(x), -1))


def _tensors(
    x: np.ndarray, target: np.ndarray, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        on_device(x, device, _flat32),
        torch.as_tensor(np.asarray(target, dtype=np.float32), device=device),
    )


def fit_least_squares(
    spec: object,
    x: np.ndarray,
    target: np.ndarray,
    settings: OracleSettings,
    seed: int,
    fast: bool = True,
    device: torch.device = CPU,
) -> Fitted:
    """WO2: a network of ``spec`` fitted to ``target`` (n, c) on the points ``x``."""
    return train_least_squares(
        new_network(spec, seed), spec, x, target, settings, seed, fast, device
    )


def train_least_squares(
    network: nn.Module,
    spec: object,
    x: np.ndarray,
    target: np.ndarray,
    settings: OracleSettings,
    seed: int,
    fast: bool = True,
    device: torch.device = CPU,
) -> Fitted:
    """``settings.steps`` Adam steps of mean((network(x) - target)^2) from the network's current
    weights (a fresh network: WO2; a shared student: a FedAvg distillation round)."""
    network.to(device)
    xt, tt = _tensors(x, target, device)
    rng = np.random.default_rng(seed)
    batches = minibatches(len(xt), settings.batch_size, settings.steps, rng)
    if fast and _has_fast_path(spec):
        fit_mlp_least_squares(network, spec.activation, xt, tt, batches, settings.lr)
    else:
        _adam(network, lambda i: ((network(xt[i]) - tt[i]) ** 2).mean(), batches, settings.lr)
    return _fitted(network, x, device)


def _has_fast_path(spec: object) -> bool:
    """An unclipped MLP with an activation ``oracles.mlp_least_squares`` writes out."""
    return (
        isinstance(spec, NetworkSpec)
        and spec.output_bound is None
        and spec.activation in ACTIVATIONS
    )


def smooth_max(errors: torch.Tensor, p: float) -> torch.Tensor:
    """(mean_j e_j^p)^(1/p) of non-negative errors, scaled by their max for stability."""
    top = errors.detach().max().clamp_min(1e-30)
    return top * ((errors / top) ** p).mean() ** (1.0 / p)


def fit_sup_norm(
    spec: object,
    x: np.ndarray,
    target: np.ndarray,
    settings: OracleSettings,
    seed: int,
    device: torch.device = CPU,
    fast: bool = True,
) -> Fitted:
    """WO-infinity: minimise the smooth sup over the points of ||h(x) - target||^2."""
    network = new_network(spec, seed).to(device)
    xt, tt = _tensors(x, target, device)
    batches = minibatches(len(xt), settings.batch_size, settings.steps, np.random.default_rng(seed))
    if fast and _has_fast_path(spec):
        fit_mlp_least_squares(
            network,
            spec.activation,
            xt,
            tt,
            batches,
            settings.lr,
            smooth_max_gradient(settings.sup_p),
        )
    else:
        _adam(
            network,
            lambda i: smooth_max(((network(xt[i]) - tt[i]) ** 2).sum(1), settings.sup_p),
            batches,
            settings.lr,
        )
    return _fitted(network, x, device)


def input_jacobian(
    network: nn.Module, z: np.ndarray | torch.Tensor, create_graph: bool = False
) -> torch.Tensor:
    """d network(z) / d z at every point: (m, c, d), one backward pass per output."""
    device = next(network.parameters()).device
    zt = torch.as_tensor(z, dtype=torch.float32, device=device).detach().requires_grad_(True)
    out = network(zt)
    rows = [
        torch.autograd.grad(out[:, o].sum(), zt, create_graph=create_graph, retain_graph=True)[0]
        for o in range(out.shape[1])
    ]
    return torch.stack(rows, dim=1)


def fit_sobolev(
    spec: object,
    x: np.ndarray,
    target: np.ndarray,
    points: np.ndarray,
    target_jacobian: np.ndarray,
    settings: OracleSettings,
    seed: int,
    device: torch.device = CPU,
) -> Fitted:
    """WO-lip: the smooth sup of the value error on the node's points plus ``sobolev_weight``
    times the mean squared Frobenius error of the input Jacobian at ``points`` (m, d), where
    the target's Jacobian is ``target_jacobian`` (m, c, d)."""
    network = new_network(spec, seed).to(device)
    xt, tt = _tensors(x, target, device)
    zt = torch.as_tensor(np.asarray(points, dtype=np.float32), device=device)
    jt = torch.as_tensor(np.asarray(target_jacobian, dtype=np.float32), device=device)
    rng = np.random.default_rng(seed)
    # one draw of the data's rows, then one of the points', each step (as the loop drew them
    # when the loss took its points itself): the same batches, now drawn before the steps
    batches = zip(
        minibatches(len(xt), settings.batch_size, settings.steps, rng),
        minibatches(len(zt), settings.batch_size, settings.steps, rng),
    )

    def loss_of(index: torch.Tensor, z_index: torch.Tensor) -> torch.Tensor:
        values = smooth_max(((network(xt[index]) - tt[index]) ** 2).sum(1), settings.sup_p)
        jacobian = input_jacobian(network, zt[z_index], create_graph=True)
        return values + settings.sobolev_weight * ((jacobian - jt[z_index]) ** 2).sum((1, 2)).mean()

    _adam(network, loss_of, batches, settings.lr)
    return _fitted(network, x, device)


def fit_tree(x: np.ndarray, target: np.ndarray, depth: int, seed: int) -> Fitted:
    """A CART regression tree of at most ``depth`` levels, leaf values rounded to float32."""
    flat = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    estimator = DecisionTreeRegressor(max_depth=depth, random_state=seed).fit(flat, target)
    tree = from_sklearn(estimator, value_dtype=np.float32)
    return Fitted(tree, tree.predict(flat).astype(np.float64))


def tree_fitter_for(choice: str, rows: int) -> str:
    """The fitter of a node with ``rows`` points: ``auto`` is ``hist`` from ``HIST_FROM_ROWS``
    rows on when xgboost is installed, else ``cart``; ``hist`` without xgboost is an error."""
    if choice == HIST and not available():
        raise ImportError(f"ffgb.tree-fitter='hist' needs the xgboost package: {INSTALL}")
    if choice == AUTO:
        return HIST if rows >= HIST_FROM_ROWS and available() else CART
    return choice


def newton_leaf_step(x: np.ndarray, loss: PointwiseLoss) -> LeafStep:
    """FFGB's leaf step for tree learners with Newton leaf values (``oracles.tree_leaves``):
    the least-squares tree's shape, each leaf sum(target) / (sum(hessian at g_k) + 1)."""
    flat = np.asarray(x, dtype=np.float32).reshape(len(x), -1)

    def step(fitted: Fitted, target: np.ndarray, g: np.ndarray) -> Fitted:
        tree = newton_values(fitted.learner, flat, target, loss.hessian_diagonal(g))
        return Fitted(tree, tree.predict(flat).astype(np.float64))

    return step


def clip_learner(learner: object, bound: float) -> object:
    """Pi_bound(h): the learner with its outputs clipped to [-bound, bound] (FFGB.C)."""
    if isinstance(learner, TreeArrays):
        return replace(learner, value=np.clip(learner.value, -bound, bound))
    clipped = new_network(replace(learner.spec, output_bound=float(bound)), 0)
    clipped.load_state_dict(learner.state_dict())
    clipped.eval()
    return clipped


SeedOf = Callable[[int], int]  # local step k -> the seed of its fit


def boosting_oracle(
    spec: LearnerSpec,
    x: np.ndarray,
    settings: OracleSettings,
    sup_norm: bool,
    tree_depth: int,
    seed_of: SeedOf,
    device: torch.device = CPU,
    tree_fitter: str = CART,
) -> Callable[..., Fitted]:
    """FFGB's and FFGB.C's oracle on the points ``x``: a tree when ``spec`` is a ``TreeSpec``
    (fitted by ``tree_fitter_for(tree_fitter, len(x))``; the histogram fitter bins ``x`` once,
    here), else
    WO2 (FFGB) or WO-infinity (``sup_norm``: FFGB.C) with networks of ``spec``."""
    flat = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    trees = isinstance(spec, TreeSpec)
    if trees and tree_fitter_for(tree_fitter, len(flat)) == HIST:
        hist = HistTreeFitter(flat, tree_depth)
        return lambda target, k: hist.fit(target)

    def fit(target: np.ndarray, k: int) -> Fitted:
        if trees:
            return fit_tree(flat, target, tree_depth, seed_of(k))
        if sup_norm:
            return fit_sup_norm(spec, flat, target, settings, seed_of(k), device)
        return fit_least_squares(spec, flat, target, settings, seed_of(k), device=device)

    return fit


def lipschitz_oracle(
    spec: object,
    x: np.ndarray,
    extension: LipschitzExtension,
    settings: OracleSettings,
    seed_of: SeedOf,
    device: torch.device = CPU,
) -> Callable[..., Fitted]:
    """FFGB.L's WO-lip on the points ``x``: fits a * u - sum(previous) in values and in input
    Jacobian, the Jacobian matched at ``sobolev_samples`` points drawn uniformly in the bounding
    box of ``x`` (the node's part of X), the same points for every local step."""
    flat = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    rng = np.random.default_rng(seed_of(0))
    points = rng.uniform(flat.min(0), flat.max(0), size=(settings.sobolev_samples, flat.shape[1]))
    u_jacobian = extension.jacobian(points)
    calls = [0]

    def fit(target: np.ndarray, multiple: float, previous: list) -> Fitted:
        calls[0] += 1
        jacobian = multiple * u_jacobian
        for learner in previous:
            jacobian = jacobian - input_jacobian(learner, points).cpu().numpy()
        return fit_sobolev(
            spec, flat, target, points, jacobian, settings, seed_of(calls[0]), device
        )

    return fit


def fit_seed(seed: int, t: int, partition: int, k: int) -> int:
    """The seed of one oracle call: run seed, round, node's partition and local step, so a
    re-run (or a resumed run) fits the same learners."""
    return int(np.random.SeedSequence([seed, t, partition, k]).generate_state(1)[0])
