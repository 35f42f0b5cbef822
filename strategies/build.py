"""What a strategy factory gets from the ServerApp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from flwr.app import ArrayRecord

from functions.params import ParamLayout, Params
from oracles.douglas_rachford import project_params
from oracles.fedfw_settings import ConstraintSet
from oracles.torch_models import new_model

from tasks.datasets import TaskData
from tasks.run_config import RunSettings


@dataclass(frozen=True)
class BuildContext:
    """The validated settings, the task (shapes, kind) and the federation's size."""

    settings: RunSettings
    task: TaskData
    num_nodes: int
    min_nodes: int


@runtime_checkable
class ProvidesInitialArrays(Protocol):
    """A strategy whose starting point is not the model's initial weights (e.g. projected onto D)."""

    def initial_arrays(self) -> ArrayRecord: ...


def projected_start(ctx: BuildContext, domain: ConstraintSet) -> tuple[ParamLayout, Params]:
    """The model's initial weights projected onto D, rounded to float32 (exact on the wire)."""
    state = new_model(ctx.settings, ctx.task).state_dict()
    x0 = project_params(domain.constraint, [v.detach().numpy() for v in state.values()],
                        domain.scope)
    return ParamLayout.of_state_dict(state), [np.asarray(p, np.float32).astype(np.float64)
                                              for p in x0]
