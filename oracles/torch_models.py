"""Build the run's torch model and move weights between it and Flower ArrayRecords."""

from __future__ import annotations

from flwr.app import ArrayRecord
from torch import nn

from tasks.datasets import TaskData
from tasks.models import build_model
from tasks.run_config import RunSettings


def model_name(settings: RunSettings, task: TaskData) -> str:
    """The configured model, or the task's default."""
    return settings.model or task.default_model


def new_model(settings: RunSettings, task: TaskData) -> nn.Module:
    """A freshly initialised model for the run (same weights for the same seed)."""
    return build_model(model_name(settings, task), task.input_shape, task.num_outputs, seed=settings.seed)


def model_from_arrays(settings: RunSettings, task: TaskData, arrays: ArrayRecord) -> nn.Module:
    """The run's model with weights from ``arrays`` (strict: shapes and names must match)."""
    model = new_model(settings, task)
    model.load_state_dict(arrays.to_torch_state_dict(), strict=True)
    return model
