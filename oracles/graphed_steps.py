"""Training steps replayed as CUDA graphs: the oracles' hot loop on a GPU.

A weak learner or a FedFun model is small: one Adam step is 30-100 kernels of a few microseconds
each, and launching them one at a time from Python costs more than running them (issue 37: a GPU
made FFGB's MLP oracle 0.46x as fast as the CPU). A CUDA graph records a few steps once and
replays them with one launch each.

What a step takes that changes from step to step (its minibatch rows, smoothing noise, penalty
points) is drawn beforehand, on the CPU and in the order the eager loop draws it, and stacked
into device tables with one row per step; a step counter on the device picks row t inside the
graph. The update is torch's fused, capturable Adam (``adam``: one kernel, its step count and
bias corrections on the device), so the graphed loop computes what the eager loop computes to
float rounding.

Written here because torch has the pieces (``torch.cuda.graph``, capturable optimisers) but no
loop that feeds per-step inputs to a replayed graph. Graphs are used on CUDA devices unless the
environment sets ``FL_CUDA_GRAPHS=0`` (the eager loop: the comparison of benchmarks.devices, and
a way out should a driver misbehave); the CPU path never changes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

ENV = "FL_CUDA_GRAPHS"
WARMUP = 3  # eager steps before a capture, on a side stream (PyTorch's recipe for whole steps)
UNROLL = 8  # steps recorded in one graph: one launch replays them all

Step = Callable[[Sequence[torch.Tensor]], None]
"""One training step, given its rows of the step tables (views, on the device)."""


def graphs_on(device: torch.device) -> bool:
    """Whether training steps on ``device`` run as replayed CUDA graphs."""
    return device.type == "cuda" and os.environ.get(ENV, "1") != "0"


def adam(params: Iterable[torch.Tensor], lr: float, capturable: bool) -> torch.optim.Adam:
    """torch.optim.Adam on ``params``; ``capturable`` (for a graph): torch's fused Adam, one
    kernel in place of a dozen, its state on the device."""
    return torch.optim.Adam(
        params, lr=lr, capturable=capturable, fused=True if capturable else None
    )


def index_table(batches: Iterable[np.ndarray], device: torch.device) -> torch.Tensor | None:
    """Every step's row indices, one row a step, on ``device`` (None for no steps)."""
    tables = index_tables(((index,) for index in batches), device)
    return tables[0] if tables else None


def index_tables(
    batches: Iterable[Sequence[np.ndarray]], device: torch.device
) -> list[torch.Tensor]:
    """Every step's index arrays (one or more a step: rows of the data, of penalty points),
    one table per array, one row a step, on ``device`` (none for no steps)."""
    rows = [tuple(torch.as_tensor(np.asarray(i, dtype=np.int64)) for i in step) for step in batches]
    return stacked(rows, device) if rows else []


def stacked(per_step: Sequence[Sequence[torch.Tensor]], device: torch.device) -> list[torch.Tensor]:
    """Step tables from each step's inputs: table i holds every step's i-th input, one row a
    step, on ``device``."""
    columns = zip(*per_step, strict=True)
    return [torch.stack(list(column)).to(device) for column in columns]


def run_steps(step: Step, tables: Sequence[torch.Tensor]) -> None:
    """``step`` once per row of ``tables`` (all on one device, as many rows each), in order.

    On a CUDA device the steps after ``WARMUP`` eager ones replay a graph of ``UNROLL`` steps
    (the last few, fewer than ``UNROLL``, run eagerly); elsewhere, and for runs too short to pay
    for a capture, every step runs eagerly through the same counter, so what is recorded is
    what runs on the CPU in tests.
    """
    steps = len(tables[0])
    if any(len(table) != steps for table in tables):
        raise ValueError("step tables must have one row per step, as many rows each")
    with warnings.catch_warnings():  # capturable Adam warns at each step it runs uncaptured
        warnings.filterwarnings("ignore", "This instance was constructed with capturable=True")
        _run(step, tables, steps)


def _run(step: Step, tables: Sequence[torch.Tensor], steps: int) -> None:
    device = tables[0].device
    counter = torch.zeros(1, dtype=torch.long, device=device)

    def one() -> None:
        step([table.index_select(0, counter).squeeze(0) for table in tables])
        counter.add_(1)

    if device.type != "cuda" or steps < WARMUP + 2 * UNROLL:
        for _ in range(steps):
            one()
        return
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            one()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records, runs nothing: the counter still reads WARMUP
        for _ in range(UNROLL):
            one()
    replays, rest = divmod(steps - WARMUP, UNROLL)
    for _ in range(replays):
        graph.replay()
    for _ in range(rest):
        one()
