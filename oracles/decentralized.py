"""Local steps of the parametric baselines of FedFun's experiments (section 6 and appendix B).

Every node runs the same architecture, trains with cross-entropy on integer labels and exchanges
parameters with its graph neighbours as lists of numpy arrays in the order of
``model.parameters()`` (the state_dict order of the buffer-free MLPs used here):

- PSR (``psr_train``): synchronous DJAM / decentralised FedProx.
- DFedAvgM (``momentum_sgd_train`` then ``average_parameters``).
- DFedFish (``adam_train``, ``diagonal_fisher`` then Fisher-weighted ``average_parameters``).
- DFedDF (``adam_train``, then ``average_parameters`` and ``distill`` to the neighbours).

``optimise``, ``prepare_data``, ``sample_rows`` and ``uniform`` (the minibatch loop, the input
checks and the seeded draws) are shared with ``oracles.fsr_network``. Every function is
deterministic given its ``generator``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from oracles.graphed_steps import adam, graphs_on, run_steps, stacked

Params = list[np.ndarray]
Predict = Callable[[torch.Tensor], torch.Tensor]


Draw = Callable[[], tuple[torch.Tensor, ...]]
"""One step's random inputs (minibatch rows, noise, sample points), drawn where the generator
lives, in the order the step uses them."""
OptimizerFor = Callable[[bool], torch.optim.Optimizer]
"""The step's optimiser, capturable (its state on the device, for CUDA graphs) or not."""
TABLE_BYTES = 256 << 20  # most bytes of pre-drawn step inputs held on the device at once


@dataclass(frozen=True)
class Tabled:
    """How a loss may be computed when its steps' draws are made beforehand (the CUDA-graph
    form): ``prepare`` turns a chunk of steps' device tables into the tables ``loss`` reads a
    row of, for example a fixed function evaluated once at every step's points of the chunk
    instead of at each step. Same loss, to float rounding."""

    prepare: Callable[..., Sequence[torch.Tensor]]
    loss: Callable[..., torch.Tensor]


def optimise(
    optimizer_for: OptimizerFor,
    steps: int,
    draw: Draw,
    loss_from: Callable[..., torch.Tensor],
    device: torch.device,
    replayable: bool = True,
    tabled: Tabled | None = None,
) -> float:
    """``steps`` optimiser steps on ``loss_from(*draw())`` (a fresh minibatch each step, moved to
    ``device``); returns the mean loss over the last tenth of the steps (a less noisy value than
    the last batch's). On a CUDA device the steps replay as CUDA graphs
    (``oracles.graphed_steps``) unless the loss is not ``replayable`` (it copies to the host):
    the draws are made beforehand, in the same order, at most ``TABLE_BYTES`` of them at a
    time, and go through ``tabled`` when given."""
    if type(steps) is not int or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    first_tail = steps - math.ceil(steps / 10)
    graphed = replayable and graphs_on(device)
    optimizer = optimizer_for(graphed and device.type == "cuda")

    def step(loss_of: Callable[..., torch.Tensor], draws: Sequence[torch.Tensor]) -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_of(*draws)
        loss.backward()
        optimizer.step()
        return loss.detach()

    if not graphed:
        tail = []
        for t in range(steps):
            loss = step(loss_from, [d.to(device) for d in draw()])
            if t >= first_tail:
                tail.append(float(loss))
        return sum(tail) / len(tail)
    tail_sum = torch.zeros(1, device=device)
    table_loss = tabled.loss if tabled is not None else loss_from

    def tailed(row: Sequence[torch.Tensor]) -> None:
        tail_sum.add_(step(table_loss, row[1:]) * row[0])

    done = 0
    while done < steps:
        per_step = [(torch.tensor([float(done >= first_tail)]), *draw())]
        size = sum(t.numel() * t.element_size() for t in per_step[0])
        chunk = min(steps - done, max(1, TABLE_BYTES // size))
        per_step += [
            (torch.tensor([float(t >= first_tail)]), *draw()) for t in range(done + 1, done + chunk)
        ]
        tail_weights, *tables = stacked(per_step, device)
        if tabled is not None:
            tables = list(tabled.prepare(*tables))
        run_steps(tailed, [tail_weights, *tables])
        done += chunk
    return float(tail_sum) / (steps - first_tail)


def sample_rows(n: int, size: int, generator: torch.Generator | None) -> torch.Tensor:
    """``min(size, n)`` distinct row indices in [0, n), drawn with ``generator`` (where it
    lives)."""
    if type(size) is not int or size < 1:
        raise ValueError(f"batch size must be a positive int, got {size!r}")
    return torch.randperm(n, generator=generator, device=_device(generator))[:size]


def uniform(shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
    """Uniform [0, 1) draws of ``shape`` made with ``generator`` (where it lives)."""
    return torch.rand(shape, generator=generator, device=_device(generator))


def _device(generator: torch.Generator | None) -> torch.device | None:
    return generator.device if generator is not None else None


def prepare_data(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, target_dims: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y on the model's device, x (and float targets) in its dtype, integer labels as
    int64; ``ValueError`` unless x is (N, p), N >= 1, and y has N rows and ``target_dims`` dims."""
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty (N, p) tensor, got shape {tuple(x.shape)}")
    if y.dim() != target_dims or len(y) != len(x):
        raise ValueError(
            f"y must have {len(x)} rows and {target_dims} dims, got shape {tuple(y.shape)}"
        )
    param = next(model.parameters())
    target_dtype = param.dtype if y.is_floating_point() else torch.int64
    return x.to(param.device, param.dtype), y.to(param.device, target_dtype)


def _cross_entropy_batches(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    generator: torch.Generator | None,
) -> tuple[Draw, Callable[[torch.Tensor], torch.Tensor]]:
    """A step's draw (minibatch rows) and the model's cross-entropy on those rows."""
    x, y = prepare_data(model, x, y, 1)

    def draw() -> tuple[torch.Tensor]:
        return (sample_rows(len(x), batch_size, generator),)

    def loss(rows: torch.Tensor) -> torch.Tensor:
        return functional.cross_entropy(model(x[rows]), y[rows])

    return draw, loss


def adam_for(params: Sequence[torch.Tensor], lr: float) -> OptimizerFor:
    """torch.optim.Adam on ``params``, capturable on request."""
    params = list(params)
    return lambda capturable: adam(params, lr, capturable)


def adam_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    batch_size: int = 200,
    lr: float = 1e-3,
    generator: torch.Generator | None = None,
) -> float:
    """Adam on the cross-entropy of (x, y) in place: DFedFish's and DFedDF's local pass.

    FedFish (Dhawan et al., 2024) and FedDF (Lin et al., 2020) both start a round with plain
    local training; appendix B of the FedFun paper uses Adam (lr 1e-3, batches of 200).
    Returns the mean loss of the last tenth of the steps.
    """
    model.train()
    draw, loss = _cross_entropy_batches(model, x, y, batch_size, generator)
    return optimise(adam_for(model.parameters(), lr), steps, draw, loss, x.device)


def momentum_sgd_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    batch_size: int = 200,
    lr: float = 0.01,
    momentum: float = 0.9,
    generator: torch.Generator | None = None,
) -> float:
    """Heavy-ball SGD on the cross-entropy of (x, y) in place: DFedAvgM's local pass.

    DFedAvgM (Sun et al., 2022) runs local momentum SGD (a fresh momentum buffer each round)
    and then replaces the model by an average of its neighbours' (``average_parameters``).
    Returns the mean loss of the last tenth of the steps.
    """
    model.train()
    draw, loss = _cross_entropy_batches(model, x, y, batch_size, generator)
    params = list(model.parameters())
    sgd = lambda capturable: torch.optim.SGD(params, lr=lr, momentum=momentum)  # noqa: E731
    return optimise(sgd, steps, draw, loss, x.device)


def psr_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    neighbours: Sequence[Params],
    lam: float,
    steps: int,
    batch_size: int = 200,
    lr: float = 1e-3,
    generator: torch.Generator | None = None,
) -> float:
    """Adam in place on CE + lam * sum_j ||theta - theta_j||^2 over the neighbours' parameters.

    Parameter space regularisation (PSR): a synchronous DJAM (Almeida & Xavier, 2018), close to
    a decentralised FedProx; each node starts from its own previous model and is pulled towards
    its neighbours' parameters. Returns the mean objective of the last tenth of the steps.
    """
    if not lam >= 0:
        raise ValueError(f"lam must be >= 0, got {lam!r}")
    params = list(model.parameters())
    received = [_as_tensors(p, params) for p in neighbours]
    # sum_j ||theta - theta_j||^2 = d ||theta - mean||^2 + sum_j ||mean - theta_j||^2
    mean = [torch.stack(tensors).mean(0) for tensors in zip(*received)] if received else []
    spread = sum(float(((m - t) ** 2).sum()) for r in received for m, t in zip(mean, r))
    draw, cross_entropy = _cross_entropy_batches(model, x, y, batch_size, generator)

    def loss(rows: torch.Tensor) -> torch.Tensor:
        if not received:
            return cross_entropy(rows)
        distance = sum(((p - m) ** 2).sum() for p, m in zip(params, mean))
        return cross_entropy(rows) + lam * (len(received) * distance + spread)

    model.train()
    return optimise(adam_for(params, lr), steps, draw, loss, params[0].device)


def _as_tensors(arrays: Params, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Received arrays as tensors like the model's parameters; ``ValueError`` on a mismatch."""
    shapes = [tuple(p.shape) for p in params]
    if [tuple(np.shape(a)) for a in arrays] != shapes:
        raise ValueError(
            f"parameter shapes {[np.shape(a) for a in arrays]} do not match the model's {shapes}"
        )
    return [
        torch.as_tensor(np.asarray(a), dtype=p.dtype, device=p.device)
        for a, p in zip(arrays, params)
    ]


def average_parameters(
    params: Sequence[Params], weights: Sequence[Params | float] | None = None
) -> Params:
    """The (weighted) average of models' parameters, float64.

    Uniform: DFedAvgM's mixing of a node's model with its neighbours' (Sun et al., 2022).
    Weighted: each model's weight is a number or, for DFedFish, its diagonal Fisher arrays F_j
    (FedFish, Dhawan et al., 2024, whose server update the decentralised variant replaces by this
    local average): sum_j F_j theta_j / sum_j F_j elementwise, falling back to the uniform
    average where every F_j is zero.
    """
    if not params:
        raise ValueError("average_parameters needs at least one model")
    shapes = [np.shape(a) for a in params[0]]
    if any([np.shape(a) for a in p] != shapes for p in params):
        raise ValueError("the models' parameter shapes differ")
    uniform_mean = [
        np.mean([np.asarray(p[k], dtype=np.float64) for p in params], axis=0)
        for k in range(len(shapes))
    ]
    if weights is None:
        return uniform_mean
    if len(weights) != len(params):
        raise ValueError(f"{len(weights)} weights for {len(params)} models")
    averaged = []
    for k, shape in enumerate(shapes):
        w = np.stack(
            [np.broadcast_to(np.asarray(_layer(wj, k), dtype=np.float64), shape) for wj in weights]
        )
        if not np.all(w >= 0):
            raise ValueError("weights must be non-negative (and not NaN)")
        theta = np.stack([np.asarray(p[k], dtype=np.float64) for p in params])
        total = w.sum(0)
        weighted = (w * theta).sum(0) / np.where(total > 0, total, 1.0)
        averaged.append(np.where(total > 0, weighted, uniform_mean[k]))
    return averaged


def _layer(weight: Params | float, k: int) -> np.ndarray | float:
    """The weight of tensor k: the number itself, or array k of a list of arrays."""
    return weight if np.isscalar(weight) else weight[k]


def diagonal_fisher(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 200,
    max_samples: int = 1000,
) -> Params:
    """The empirical Fisher diagonal: mean over examples of the squared per-example gradients
    of the cross-entropy at the true labels, on the first ``max_samples`` rows (float64, in
    parameter order). DFedFish's aggregation weights (FedFish, Dhawan et al., 2024)."""
    x, y = prepare_data(model, x, y, 1)
    names = [name for name, _ in model.named_parameters()]
    values = {name: p.detach() for name, p in model.named_parameters()}

    def example_loss(
        theta: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
    ) -> torch.Tensor:
        logits = torch.func.functional_call(model, theta, (xi.unsqueeze(0),))
        return functional.cross_entropy(logits, yi.unsqueeze(0))

    per_example = torch.func.vmap(torch.func.grad(example_loss), in_dims=(None, 0, 0))
    x, y = x[:max_samples], y[:max_samples]
    totals = {name: torch.zeros_like(v) for name, v in values.items()}
    for start in range(0, len(x), batch_size):
        grads = per_example(values, x[start : start + batch_size], y[start : start + batch_size])
        for name in names:
            totals[name] += (grads[name] ** 2).sum(0)
    return [(totals[name] / len(x)).cpu().numpy().astype(np.float64) for name in names]


def distill(
    model: nn.Module,
    teachers: Sequence[Predict],
    n_features: int,
    steps: int,
    samples: int = 1000,
    lr: float = 1e-3,
    generator: torch.Generator | None = None,
    replayable: bool = False,
) -> float:
    """Adam in place on KL(teacher || student) on ``samples`` fresh uniform points of [0, 1]^p
    per step, the teacher distribution being the softmax of the teachers' mean logits.

    FedDF (Lin et al., 2020) distils the clients' ensemble into the averaged model on the server
    with this loss (its "AVGLOGITS" ensemble); the decentralised DFedDF does it at each node, the
    student initialised to the average of its own and its neighbours' models and the teachers
    being those models. FedFun's appendix B draws the unlabelled points uniformly (1000 per
    step). Returns the mean KL of the last tenth of the steps.
    """
    if not teachers:
        raise ValueError("distill needs at least one teacher")
    if type(samples) is not int or samples < 1:
        raise ValueError(f"samples must be a positive int, got {samples!r}")
    device = next(model.parameters()).device

    def draw() -> tuple[torch.Tensor]:
        return (uniform((samples, n_features), generator),)

    def loss(z: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            target = torch.stack([t(z) for t in teachers]).mean(0).softmax(1)
        return functional.kl_div(model(z).log_softmax(1), target, reduction="batchmean")

    model.train()
    return optimise(adam_for(model.parameters(), lr), steps, draw, loss, device, replayable)
