"""Least-squares training of a multilayer perceptron with Adam, written out by hand: the fast path
of the WO2 oracle (and, with ``smooth_max_gradient``, of WO-infinity's smooth sup).

A weak learner of the FFGB paper is tiny (784-32-32-10: 26.5k parameters) and is fitted with
hundreds of Adam steps on a few hundred points, K times per round on every node. At that size
autograd's bookkeeping and the per-tensor optimiser costs more than the arithmetic: this loop does
the same forward pass, backward pass and Adam update (torch.optim.Adam's formulas, no weight
decay) on one flat parameter buffer with preallocated gradients, about twice as fast
(benchmarks/README.md). ``tests/ffgb/test_ffgb_math.py`` checks it against autograd + torch's Adam.

Inside a lockstep run of several nodes (``oracles.lockstep``, the in-process engine's
``together``) the fits the nodes ask for at one point are made as one stacked network
(``_fit_stacked``: batched matrix products over the networks, one Adam over all their
parameters), which ends where each fit alone would, to float32 rounding
(``tests/ffgb/test_lockstep.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from oracles import lockstep
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
    """d/d output of mean((output - wanted)^2) over a batch's entries (WO2); the last two
    dimensions are one fit's batch (rows, outputs), any before them stack fits."""
    return (output - wanted) * (2.0 / (output.shape[-2] * output.shape[-1]))


@dataclass(frozen=True)
class SmoothMaxGradient:
    """d/d output of top * (mean_j (e_j / top)^p)^(1/p), e_j = ||output_j - wanted_j||^2 and top
    = max_j e_j held constant (``oracles.weak_learning.smooth_max``: WO-infinity, eq. 24); per
    fit, as ``mean_squares_gradient``."""

    p: float

    def __call__(self, output: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        p = self.p
        diff = output - wanted
        errors = (diff * diff).sum(-1)
        ratio = errors / errors.amax(-1, keepdim=True).clamp_min(1e-30)
        mean = (ratio**p).mean(-1, keepdim=True)
        weights = mean ** (1.0 / p - 1.0) * ratio ** (p - 1.0) / errors.shape[-1]
        return diff * (2.0 * weights)[..., None]


def smooth_max_gradient(p: float) -> OutputGradient:
    """WO-infinity's output gradient with exponent ``p`` (``SmoothMaxGradient``)."""
    return SmoothMaxGradient(p)


def linear_layers(network: nn.Module) -> list[nn.Linear]:
    """The network's linear layers in order (an MLP: linear, activation, linear, ...)."""
    return [m for m in network.modules() if isinstance(m, nn.Linear)]


def _train(
    gradient: Callable[[torch.Tensor], None],
    flat: torch.Tensor,
    grad: torch.Tensor,
    batches: Sequence[np.ndarray],
    lr: float,
) -> None:
    """One Adam step of ``flat`` per batch of rows, ``gradient(rows)`` filling ``grad``: torch's
    formulas (no weight decay) written out on the CPU; on a GPU replayed CUDA graphs
    (``oracles.graphed_steps``: every step's rows in a device table) with torch's fused Adam
    (one kernel, capturable, the same update to float rounding) in place of the loop's nine."""
    if graphs_on(flat.device):
        rows = index_table(batches, flat.device)
        if rows is None:
            return
        flat.grad = grad
        optimiser = adam([flat], lr, capturable=flat.is_cuda)  # BETAS, EPS: torch's defaults

        def step(row: Sequence[torch.Tensor]) -> None:
            gradient(row[0])
            optimiser.step()

        run_steps(step, [rows])
        return
    m, v = torch.zeros_like(flat), torch.zeros_like(flat)
    beta1, beta2 = BETAS
    for step_count, index in enumerate(batches, start=1):
        gradient(torch.as_tensor(index, device=flat.device))
        m.mul_(beta1).add_(grad, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denominator = (v.sqrt() / (1.0 - beta2**step_count) ** 0.5).add_(EPS)
        flat.addcdiv_(m, denominator, value=-lr / (1.0 - beta1**step_count))


@dataclass(eq=False)
class MlpFit:
    """One least-squares fit of an MLP, as ``fit_mlp_least_squares`` was asked for it."""

    network: nn.Module
    activation: str
    x: torch.Tensor
    target: torch.Tensor
    batches: list[np.ndarray]
    lr: float
    output_gradient: OutputGradient

    @property
    def group(self) -> Hashable:
        """What fits must share to be fitted together: architecture, steps, batch size, step
        size, loss, device (a fit whose batches differ in size, or whose loss is not one of
        this module's, is a group of its own)."""
        sizes = {len(batch) for batch in self.batches}
        shapes = tuple(tuple(p.shape) for p in self.network.parameters())
        stackable = len(sizes) <= 1 and (
            self.output_gradient is mean_squares_gradient
            or isinstance(self.output_gradient, SmoothMaxGradient)
        )
        if not stackable:
            return self
        return (
            self.activation,
            shapes,
            tuple(self.target.shape[1:]),
            len(self.batches),
            next(iter(sizes), 0),
            self.lr,
            self.output_gradient,
            self.x.device,
            self.x.dtype,
        )


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
    the last one; ``x`` (n, d) and ``target`` (n, c) are float32. Inside a lockstep run of
    several nodes (``oracles.lockstep``) the fit is made together with theirs.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"no fast path for activation {activation!r}")
    fit = MlpFit(
        network, activation, x, target, [np.asarray(b) for b in batches], lr, output_gradient
    )
    lockstep.ask(fit.group, fit, fit_together)


def fit_together(fits: list[MlpFit]) -> None:
    """Carry out compatible fits (one ``MlpFit.group``): one alone as it always was, several
    as one stacked network (``_fit_stacked``)."""
    if len(fits) == 1:
        _fit_one(fits[0])
    else:
        _fit_stacked(fits)


def _flat_views(flat: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    """Consecutive views of ``flat`` with ``shapes``."""
    views, offset = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        views.append(flat[offset : offset + size].view(shape))
        offset += size
    return views


def _fit_one(fit: MlpFit) -> None:
    """One network's fit on one flat parameter buffer; input columns that are zero at every
    point are left out (their weights get no gradient)."""
    layers = linear_layers(fit.network)
    active = torch.nonzero(fit.x.abs().amax(dim=0) > 0).squeeze(1)
    x, target, activation = fit.x.index_select(1, active), fit.target, fit.activation
    initial = [p.detach() for layer in layers for p in (layer.weight, layer.bias)]
    initial[0] = initial[0].index_select(1, active)
    shapes = [p.shape for p in initial]
    flat = torch.cat([p.reshape(-1) for p in initial])
    grad = torch.zeros_like(flat)
    params, grads = _flat_views(flat, shapes), _flat_views(grad, shapes)
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
        upstream = fit.output_gradient(output, wanted)
        for i in range(len(weights) - 1, -1, -1):
            torch.mm(upstream.t(), outs[i], out=weight_grads[i])
            torch.sum(upstream, 0, out=bias_grads[i])
            if i:
                upstream = _backward_through(upstream @ weights[i], zs[i - 1], outs[i], activation)

    _train(gradient, flat, grad, fit.batches, fit.lr)
    _write_back(layers, active, weights, biases)


def _fit_stacked(fits: list[MlpFit]) -> None:
    """Several networks of one architecture, each on its own points, batches and Adam state,
    trained as one: every layer a batched matrix product over the networks (each step one
    chain of kernels for all of them, where ``_fit_one`` would launch a chain per network).

    Points are padded to the largest node's count (a node's batches index its own rows only);
    input columns zero for every node are left out, those zero for some nodes only get no
    gradient there, so their weights stay as they were (Adam's update of a zero gradient is
    zero). Each network ends where ``_fit_one`` would take it, to float32 rounding (batched
    products sum in another order)."""
    count, activation = len(fits), fits[0].activation
    layers = [linear_layers(fit.network) for fit in fits]
    active = torch.nonzero(
        torch.stack([fit.x.abs().amax(dim=0) for fit in fits]).amax(dim=0) > 0
    ).squeeze(1)
    x, target, rows_each = _padded_points(fits, active)
    initial = [[p.detach() for layer in net for p in (layer.weight, layer.bias)] for net in layers]
    for one in initial:
        one[0] = one[0].index_select(1, active)
    # parameter-major: parameter j of every network is one contiguous (count, ...) block
    shapes = [torch.Size((count, *p.shape)) for p in initial[0]]
    flat = torch.cat([torch.stack(list(ps)).reshape(-1) for ps in zip(*initial)])
    grad = torch.zeros_like(flat)
    params, grads = _flat_views(flat, shapes), _flat_views(grad, shapes)
    weights, biases = params[0::2], params[1::2]
    weight_grads, bias_grads = grads[0::2], grads[1::2]
    batches = _stacked_batches(fits, rows_each)
    output_gradient = fits[0].output_gradient

    def gradient(rows: torch.Tensor) -> None:
        """Every network's batch gradient into ``grad``; ``rows`` are the networks' rows of
        the padded points, one batch after another."""
        inputs = x.index_select(0, rows).view(count, -1, x.shape[1])
        wanted = target.index_select(0, rows).view(count, -1, target.shape[1])
        zs, outs = [], [inputs]
        for i, (w, b) in enumerate(zip(weights, biases)):
            z = torch.baddbmm(b.unsqueeze(1), outs[-1], w.transpose(1, 2))
            if i < len(weights) - 1:
                zs.append(z)
                outs.append(_activate(z, activation))
            else:
                output = z
        upstream = output_gradient(output, wanted)
        for i in range(len(weights) - 1, -1, -1):
            torch.bmm(upstream.transpose(1, 2), outs[i], out=weight_grads[i])
            torch.sum(upstream, 1, out=bias_grads[i])
            if i:
                upstream = _backward_through(
                    torch.bmm(upstream, weights[i]), zs[i - 1], outs[i], activation
                )

    _train(gradient, flat, grad, batches, fits[0].lr)
    for i, net in enumerate(layers):
        _write_back(net, active, [w[i] for w in weights], [b[i] for b in biases])


def _padded_points(
    fits: list[MlpFit], active: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Every fit's points (their ``active`` columns) and targets, each fit's block padded with
    zero rows to the largest fit's count and the blocks one after another: (x, target, the
    rows of a block)."""
    count = len(fits)
    rows_each = max(len(fit.x) for fit in fits)
    x = fits[0].x.new_zeros((count, rows_each, len(active)))
    target = fits[0].target.new_zeros((count, rows_each, fits[0].target.shape[1]))
    for i, fit in enumerate(fits):
        x[i, : len(fit.x)] = fit.x.index_select(1, active)
        target[i, : len(fit.target)] = fit.target
    return x.view(count * rows_each, -1), target.view(count * rows_each, -1), rows_each


def _stacked_batches(fits: list[MlpFit], rows_each: int) -> list[np.ndarray]:
    """Each step's batches of every fit as one batch of the padded points: fit i's rows
    shifted by i blocks of ``rows_each``, the fits' batches one after another."""
    offsets = np.arange(len(fits))[:, None] * rows_each
    return [
        (np.stack(step) + offsets).reshape(-1)
        for step in zip(*(fit.batches for fit in fits), strict=True)
    ]


def _write_back(
    layers: list[nn.Linear],
    active: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor],
) -> None:
    """Trained weights into the network's layers (the first layer's ``active`` columns)."""
    with torch.no_grad():
        layers[0].weight[:, active] = weights[0]
        for layer, w, b in zip(layers, weights, biases):
            if layer is not layers[0]:
                layer.weight.copy_(w)
            layer.bias.copy_(b)
