"""Loss and gradient of a task's torch model at given parameters (the first-order oracle)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tasks.devices import on_device
from tasks.evaluation import TARGETS, loss_function

Params = list[np.ndarray]


def load_params(model: nn.Module, params: Params) -> None:
    """Copy ``params`` (state_dict order) into the model's parameters."""
    named = list(model.named_parameters())
    if len(named) != len(params):
        raise ValueError(f"model has {len(named)} parameter tensors, got {len(params)}")
    with torch.no_grad():
        for (_, p), value in zip(named, params):
            p.copy_(
                torch.as_tensor(np.asarray(value), dtype=p.dtype, device=p.device).reshape(p.shape)
            )


def loss_and_grad(
    model: nn.Module,
    params: Params,
    x: np.ndarray,
    y: np.ndarray,
    kind: str,
    index: np.ndarray | None = None,
) -> tuple[float, Params]:
    """Mean loss over (x, y) (or the rows in ``index``) and its gradient, in float64, on the
    model's device (the data go there once, ``tasks.devices.on_device``)."""
    load_params(model, params)
    model.train()
    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    inputs, targets = on_device(x, device), on_device(y, device, TARGETS[kind])
    if index is not None:
        rows = torch.as_tensor(index, device=device)
        inputs, targets = inputs[rows], targets[rows]
    loss = loss_function(kind)(model(inputs), targets)
    loss.backward()
    grads = [p.grad.detach().cpu().numpy().astype(np.float64) for _, p in model.named_parameters()]
    return float(loss.detach()), grads


def clipped_mean_grad(
    model: nn.Module,
    params: Params,
    x: np.ndarray,
    y: np.ndarray,
    kind: str,
    clipping_norm: float,
    index: np.ndarray | None = None,
) -> Params:
    """The mean over the rows (or those in ``index``) of each row's gradient clipped to the L2
    norm ``clipping_norm`` over all tensors: a sum to which one row adds at most that norm, so
    Gaussian noise of z times it makes the gradient differentially private (DP-SGD's per-example
    clipping, Abadi et al. 2016). Per-row gradients by ``torch.func`` (``vmap`` of ``grad``)."""
    from torch.func import functional_call, grad, vmap

    load_params(model, params)
    model.train()
    device = next(model.parameters()).device
    inputs, targets = on_device(x, device), on_device(y, device, TARGETS[kind])
    if index is not None:
        rows = torch.as_tensor(index, device=device)
        inputs, targets = inputs[rows], targets[rows]
    weights = {name: p.detach() for name, p in model.named_parameters()}
    loss = loss_function(kind)

    def row_loss(w: dict, one_x: torch.Tensor, one_y: torch.Tensor) -> torch.Tensor:
        return loss(functional_call(model, w, (one_x[None],)), one_y[None])

    per_row = vmap(grad(row_loss), in_dims=(None, 0, 0))(weights, inputs, targets)
    flat = torch.cat([g.reshape(len(inputs), -1) for g in per_row.values()], dim=1)
    scale = (clipping_norm / flat.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
    return [
        (g * scale.reshape(-1, *[1] * (g.dim() - 1))).mean(0).cpu().numpy().astype(np.float64)
        for g in per_row.values()
    ]
