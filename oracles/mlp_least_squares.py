"""Least-squares training of a multilayer perceptron with Adam, written out by hand: the fast path
of the WO2 oracle (and, with ``smooth_max_gradient``, of WO-infinity's smooth sup).

A weak learner of the FFGB paper is tiny (784-32-32-10: 26.5k parameters) and is fitted with
hundreds of Adam steps on a few hundred points, K times per round on every node. At that size
autograd's bookkeeping and the per-tensor optimiser costs more than the arithmetic: this loop does
the same forward pass, backward pass and Adam update (torch.optim.Adam's formulas, no weight
decay) on one flat parameter buffer with preallocated gradients, about twice as fast
(benchmarks/README.md). ``tests/test_weak_learning.py`` checks it against autograd + torch's Adam.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from oracles.graphed_steps import adam, graphs_on, index_table, run_steps

BETAS = (0.9, 0.999)
EPS = 1e-8
LEAKY_SLOPE = 0.01
ACTIVATIONS = ("relu", "leaky_relu", "tanh")


def _activate(z: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "relu":
        return torch.relu(z)
    if kind == "leaky_relu":
        return torch.nn.functional.leaky_relu(z, LEAKY_SLOPE)
    return torch.tanh(z)


def _backward_through(
    grad: torch.Tensor, z: torch.Tensor, a: torch.Tensor, kind: str
) -> torch.Tensor:
    """d loss / d z from d loss / d a, where a = activation(z): the one-kernel backward ops
    autograd itself uses (a GPU step is counted in kernels)."""
    if kind == "relu":
        return torch.ops.aten.threshold_backward(grad, z, 0.0)
    if kind == "leaky_relu":
        return torch.ops.aten.leaky_relu_backward(grad, z, LEAKY_SLOPE, False)
    return torch.ops.aten.tanh_backward(grad, a)


OutputGradient = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(network output, target) of a batch -> d loss / d output."""


def mean_squares_gradient(output: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """d/d output of mean((output - wanted)^2) over all entries (WO2)."""
    return (output - wanted) * (2.0 / output.numel())


def smooth_max_gradient(p: float) -> OutputGradient:
    """d/d output of top * (mean_j (e_j / top)^p)^(1/p), e_j = ||output_j - wanted_j||^2 and top
    = max_j e_j held constant (``oracles.weak_learning.smooth_max``: WO-infinity, eq. 24)."""

    def gradient(output: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        diff = output - wanted
        errors = (diff * diff).sum(1)
        ratio = errors / errors.max().clamp_min(1e-30)
        mean = (ratio**p).mean()
        weights = mean ** (1.0 / p - 1.0) * ratio ** (p - 1.0) / len(errors)
        return diff * (2.0 * weights)[:, None]

    return gradient


def linear_layers(network: nn.Module) -> list[nn.Linear]:
    """The network's linear layers in order (an MLP: linear, activation, linear, ...)."""
    return [m for m in network.modules() if isinstance(m, nn.Linear)]


def _run_graphed(
    gradient: Callable[[torch.Tensor], None],
    flat: torch.Tensor,
    grad: torch.Tensor,
    batches: Iterable[np.ndarray],
    lr: float,
) -> None:
    """The steps as replayed CUDA graphs (``oracles.graphed_steps``): every step's rows in a
    device table, and torch's fused Adam (one kernel, capturable, the same update to float
    rounding) on the flat parameters in place of the eager loop's nine."""
    rows = index_table(batches, flat.device)
    if rows is None:
        return
    flat.grad = grad
    optimiser = adam([flat], lr, capturable=flat.is_cuda)  # BETAS and EPS are torch's defaults

    def step(row: Sequence[torch.Tensor]) -> None:
        gradient(row[0])
        optimiser.step()

    run_steps(step, [rows])


def fit_mlp_least_squares(
    network: nn.Module,
    activation: str,
    x: torch.Tensor,
    target: torch.Tensor,
    batches: Iterable[np.ndarray],
    lr: float,
    output_gradient: OutputGradient = mean_squares_gradient,
) -> None:
    """Train ``network`` in place on mean((network(x) - target)^2) (or the loss whose output
    gradient ``output_gradient`` gives), one Adam step per batch.

    ``network`` is a stack of linear layers with ``activation`` between them and nothing after
    the last one; ``x`` (n, d) and ``target`` (n, c) are float32.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"no fast path for activation {activation!r}")
    layers = linear_layers(network)
    active = torch.nonzero(x.abs().amax(dim=0) > 0).squeeze(1)
    x = x.index_select(1, active)
    initial = [p.detach() for layer in layers for p in (layer.weight, layer.bias)]
    initial[0] = initial[0].index_select(1, active)
    shapes = [p.shape for p in initial]
    sizes = [p.numel() for p in initial]
    flat = torch.cat([p.reshape(-1) for p in initial])
    grad = torch.zeros_like(flat)
    params, grads, offset = [], [], 0
    for shape, size in zip(shapes, sizes):
        params.append(flat[offset : offset + size].view(shape))
        grads.append(grad[offset : offset + size].view(shape))
        offset += size
    weights, biases = params[0::2], params[1::2]
    weight_grads, bias_grads = grads[0::2], grads[1::2]

    def gradient(rows: torch.Tensor) -> None:
        """The batch's loss gradient into ``grad`` (forward and backward written out)."""
        inputs, wanted = x.index_select(0, rows), target.index_select(0, rows)
        zs, outs = [], [inputs]
        for i, (w, b) in enumerate(zip(weights, biases)):
            z = torch.addmm(b, outs[-1], w.t())
            if i < len(weights) - 1:
                zs.append(z)
                outs.append(_activate(z, activation))
            else:
                output = z
        upstream = output_gradient(output, wanted)
        for i in range(len(weights) - 1, -1, -1):
            torch.mm(upstream.t(), outs[i], out=weight_grads[i])
            torch.sum(upstream, 0, out=bias_grads[i])
            if i:
                upstream = _backward_through(upstream @ weights[i], zs[i - 1], outs[i], activation)

    if graphs_on(x.device):
        _run_graphed(gradient, flat, grad, batches, lr)
    else:
        m, v = torch.zeros_like(flat), torch.zeros_like(flat)
        beta1, beta2 = BETAS
        for step, index in enumerate(batches, start=1):
            gradient(torch.as_tensor(index, device=x.device))
            m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denominator = (v.sqrt() / (1.0 - beta2**step) ** 0.5).add_(EPS)
            flat.addcdiv_(m, denominator, value=-lr / (1.0 - beta1**step))
    with torch.no_grad():
        layers[0].weight[:, active] = weights[0]
        for layer, w, b in zip(layers, weights, biases):
            if layer is not layers[0]:
                layer.weight.copy_(w)
            layer.bias.copy_(b)
