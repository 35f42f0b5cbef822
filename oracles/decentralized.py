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

import numpy as np
import torch
from torch import nn
from torch.nn import functional

Params = list[np.ndarray]
Predict = Callable[[torch.Tensor], torch.Tensor]


def optimise(
    optimizer: torch.optim.Optimizer, steps: int, batch_loss: Callable[[], torch.Tensor]
) -> float:
    """``steps`` optimiser steps on ``batch_loss()`` (a fresh minibatch each call); returns the
    mean loss over the last tenth of the steps (a less noisy value than the last batch's)."""
    if type(steps) is not int or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    tail = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = batch_loss()
        loss.backward()
        optimizer.step()
        if step >= steps - math.ceil(steps / 10):
            tail.append(float(loss.detach()))
    return sum(tail) / len(tail)


def sample_rows(
    n: int, size: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """``min(size, n)`` distinct row indices in [0, n), drawn with ``generator``."""
    if type(size) is not int or size < 1:
        raise ValueError(f"batch size must be a positive int, got {size!r}")
    return torch.randperm(n, generator=generator, device=_device(generator))[:size].to(device)


def uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """Uniform [0, 1) draws of ``shape`` made with ``generator``, moved to ``device``."""
    return torch.rand(shape, generator=generator, device=_device(generator)).to(device)


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
) -> Callable[[], torch.Tensor]:
    """A callable giving the cross-entropy of the model on a fresh minibatch."""
    x, y = prepare_data(model, x, y, 1)

    def loss() -> torch.Tensor:
        rows = sample_rows(len(x), batch_size, generator, x.device)
        return functional.cross_entropy(model(x[rows]), y[rows])

    return loss


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
    batch_loss = _cross_entropy_batches(model, x, y, batch_size, generator)
    return optimise(torch.optim.Adam(model.parameters(), lr=lr), steps, batch_loss)


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
    batch_loss = _cross_entropy_batches(model, x, y, batch_size, generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return optimise(optimizer, steps, batch_loss)


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
    cross_entropy = _cross_entropy_batches(model, x, y, batch_size, generator)

    def loss() -> torch.Tensor:
        if not received:
            return cross_entropy()
        distance = sum(((p - m) ** 2).sum() for p, m in zip(params, mean))
        return cross_entropy() + lam * (len(received) * distance + spread)

    model.train()
    return optimise(torch.optim.Adam(params, lr=lr), steps, loss)


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

    def loss() -> torch.Tensor:
        z = uniform((samples, n_features), generator, device)
        with torch.no_grad():
            target = torch.stack([t(z) for t in teachers]).mean(0).softmax(1)
        return functional.kl_div(model(z).log_softmax(1), target, reduction="batchmean")

    model.train()
    return optimise(torch.optim.Adam(model.parameters(), lr=lr), steps, loss)
