"""Loss and metrics of a torch model on arrays, shared by central and federated evaluation."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tasks.devices import on_device

CLASSIFICATION = "classification"


def loss_function(kind: str) -> nn.Module:
    """Cross-entropy for classification, mean squared error for regression."""
    return nn.CrossEntropyLoss() if kind == CLASSIFICATION else nn.MSELoss()


def as_targets(y: np.ndarray, kind: str) -> torch.Tensor:
    """Targets in the dtype and shape the task's loss expects."""
    if kind == CLASSIFICATION:
        return torch.tensor(y, dtype=torch.long)
    return torch.tensor(y, dtype=torch.float32).reshape(-1, 1)


def _class_targets(y: np.ndarray) -> torch.Tensor:
    return as_targets(y, CLASSIFICATION)


def _regression_targets(y: np.ndarray) -> torch.Tensor:
    return as_targets(y, "regression")


TARGETS = {CLASSIFICATION: _class_targets, "regression": _regression_targets}  # for on_device


@torch.no_grad()
def evaluate_model(
    model: nn.Module, x: np.ndarray, y: np.ndarray, kind: str, batch_size: int = 2048
) -> dict[str, float]:
    """Mean loss and accuracy (classification) or MSE (regression) over all of (x, y)."""
    model.eval()
    criterion = loss_function(kind)
    total_loss, correct, n = 0.0, 0, len(x)
    device = next(model.parameters()).device  # the data go there once (on_device)
    inputs, targets = on_device(x, device), on_device(y, device, TARGETS[kind])
    for start in range(0, n, batch_size):
        xb, yb = inputs[start : start + batch_size], targets[start : start + batch_size]
        out = model(xb)
        total_loss += float(criterion(out, yb)) * len(xb)
        if kind == CLASSIFICATION:
            correct += int((out.argmax(dim=1) == yb).sum())
    loss = total_loss / max(n, 1)
    if kind == CLASSIFICATION:
        return {"loss": loss, "accuracy": correct / max(n, 1)}
    return {"loss": loss, "mse": loss}
