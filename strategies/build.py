"""What a strategy factory gets from the ServerApp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from flwr.app import ArrayRecord

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
