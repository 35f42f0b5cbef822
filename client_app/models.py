"""The run's torch model on a node, and weights received from the server loaded into it."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord
from torch import nn

from run_config.common import RunSettings
from tasks.datasets import TaskData
from tasks.models import model_for

CPU = torch.device("cpu")


def new_model(settings: RunSettings, task: TaskData, device: torch.device = CPU) -> nn.Module:
    """A freshly initialised model for the run (same weights for the same seed), on ``device``."""
    return model_for(settings.model, task, settings.seed).to(device)


def model_from_arrays(
    settings: RunSettings, task: TaskData, arrays: ArrayRecord, device: torch.device = CPU
) -> nn.Module:
    """The run's model with weights from ``arrays`` (strict: shapes and names must match)."""
    model = new_model(settings, task)
    model.load_state_dict(arrays.to_torch_state_dict(), strict=True)
    return model.to(device)
