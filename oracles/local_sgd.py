"""Local minibatch SGD on one client's data: the local solver of FedAvg and FedProx."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tasks.devices import on_device
from tasks.evaluation import TARGETS, loss_function

# the step a run gets with learning-rate=0, by the loss: cross-entropy's gradients are bounded,
# squared error's grow with the residual (0.3 diverged on diabetes: test MSE 1.40, 171,570,
# inf; 0.05 reached 0.441 after 20 rounds, 0.1 0.465; cars by origin 0.143 against 103 at 0.3)
DEFAULT_STEPS = {"classification": 0.3, "regression": 0.05}


def default_step(kind: str) -> float:
    """Local SGD's step size for a task of ``kind`` when the run leaves it to the task."""
    return DEFAULT_STEPS[kind]


@dataclass(frozen=True)
class SGDConfig:
    """How much and how fast to train locally; ``steps > 0`` overrides ``epochs``."""

    epochs: int = 1
    steps: int = 0
    batch_size: int = 32
    learning_rate: float = 0.1
    proximal_mu: float = 0.0


def _batches(n: int, cfg: SGDConfig, rng: np.random.Generator):
    """Index batches: ``steps`` batches if set, else ``epochs`` shuffled passes."""
    if cfg.steps > 0:
        for _ in range(cfg.steps):
            yield rng.choice(n, size=min(cfg.batch_size, n), replace=False)
        return
    for _ in range(cfg.epochs):
        order = rng.permutation(n)
        for start in range(0, n, cfg.batch_size):
            yield order[start : start + cfg.batch_size]


def train_sgd(
    model: nn.Module, x: np.ndarray, y: np.ndarray, kind: str, cfg: SGDConfig, seed: int
) -> float:
    """Train ``model`` in place; return the mean training loss over the batches seen.

    With ``proximal_mu > 0`` the loss gains FedProx's (mu/2)||w - w_global||^2, the
    global weights being the model's weights on entry.
    """
    rng = np.random.default_rng(seed)
    criterion = loss_function(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    anchor = [p.detach().clone() for p in model.parameters()] if cfg.proximal_mu > 0 else []
    device = next(model.parameters()).device  # the data go there once (on_device)
    x_all = on_device(x, device)
    y_all = on_device(y, device, TARGETS[kind])
    model.train()
    total, count = 0.0, 0
    for idx in _batches(len(x), cfg, rng):
        index = torch.as_tensor(idx, device=device)
        optimizer.zero_grad()
        loss = criterion(model(x_all[index]), y_all[index])
        total += float(loss.detach()) * len(idx)
        count += len(idx)
        if anchor:
            loss = loss + 0.5 * cfg.proximal_mu * sum(
                ((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor)
            )
        loss.backward()
        optimizer.step()
    return total / max(count, 1)
