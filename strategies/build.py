"""What a strategy factory gets from the ServerApp."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.datasets import TaskData
from tasks.run_config import RunSettings


@dataclass(frozen=True)
class BuildContext:
    """The validated settings, the task (shapes, kind) and the federation's size."""

    settings: RunSettings
    task: TaskData
    num_nodes: int
    min_nodes: int
