"""The global function of the torch-model algorithms (FedAvg family, FedFW, FedDR): the run's
model, its start point and its central evaluation."""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ArrayRecord
from torch import nn

from functions.params import ParamLayout, Params
from oracles.douglas_rachford import project_params
from run_config.common import RunSettings
from run_config.fedfw import ConstraintSet
from strategies.base import FederatedStrategy
from strategies.evaluation import (
    CentralEvaluator,
    EvaluationSums,
    combine_evaluation_sums,
    decode_evaluation_sums,
)
from tasks.datasets import TaskData
from tasks.devices import resolve_device
from tasks.models import model_for


class TorchGlobal:
    """The run's task and model: layout, initial weights, and a central evaluator if wanted."""

    def __init__(self, settings: RunSettings, task: TaskData) -> None:
        self.task = task
        self.name = settings.model or self.task.default_model
        self.model: nn.Module = model_for(self.name, self.task, settings.seed)
        self.layout = ParamLayout.of_state_dict(self.model.state_dict())
        self.evaluator = None
        if settings.central_evaluation:
            device = resolve_device(settings.central_device, "central-device")
            self.evaluator = CentralEvaluator(
                model_for(self.name, self.task, settings.seed).to(device), self.task
            )

    def initial_params(self) -> Params:
        """The model's initial weights as numpy arrays (float32 values)."""
        return [v.detach().numpy() for v in self.model.state_dict().values()]

    def projected_start(self, domain: ConstraintSet) -> Params:
        """The initial weights projected onto D, rounded to float32 (exact on the wire)."""
        x0 = project_params(domain.constraint, self.initial_params(), domain.scope)
        return [np.asarray(p, np.float32).astype(np.float64) for p in x0]


class TorchModelStrategy(FederatedStrategy):
    """A strategy whose global function is the run's torch model (``model``)."""

    model: TorchGlobal
    label: str

    @property
    def layout(self) -> ParamLayout:
        return self.model.layout

    @property
    def kind(self) -> str:
        """The task's kind: what the nodes' evaluation sums hold."""
        return self.model.task.kind

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        evaluator = self.model.evaluator
        return evaluator(arrays) if evaluator is not None else {}

    def check_evaluation_record(self, record: Any, node: int) -> EvaluationSums:
        """The node's loss sums and counts at the global model."""
        return decode_evaluation_sums(record, self.model.task)

    def evaluation_metrics(self, accepted: dict[int, EvaluationSums]) -> dict[str, float]:
        return combine_evaluation_sums(accepted.values(), self.kind)

    def description(self) -> dict[str, Any]:
        return {
            "kind": "torch model",
            "model": self.model.name,
            "parameters": self.model.layout.size,
        }
