"""How strategies evaluate: the nodes' evaluation sums, checked and combined; central evaluation
of a torch global model; and the spread of per-node metrics when nodes keep their own models.

``train_loss`` means the same for every algorithm: the papers' F(x) = (1/n) sum_i f_i(x), the
unweighted mean over the reporting nodes of each node's mean training loss at the global model.
Test metrics from nodes are sample-weighted over their test shards, which together are the test
set once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, MetricRecord
from torch import nn

from functions.errors import DecodeError, NonFiniteError
from functions.protocol import (
    NUM_EXAMPLES,
    TEST_CORRECT_SUM,
    TEST_LOSS_SUM,
    TRAIN_EXAMPLES,
    TRAIN_LOSS_SUM,
)
from tasks.datasets import TaskData
from tasks.evaluation import CLASSIFICATION, evaluate_model


def example_limit(task: TaskData) -> int:
    """The most examples a node can hold of ``task``: its train and test sets together (a node's
    shards, or its local hold-out, come from them), or with sites' own files the rows they
    reported. A count above it is a false report, and would weigh one node's figures over
    everyone's."""
    return task.max_examples or len(task.y_train) + len(task.y_test)


def checked_metrics(record: object, keys: Iterable[str]) -> dict[str, float]:
    """A MetricRecord with exactly ``keys``, each a finite non-negative number."""
    if not isinstance(record, MetricRecord):
        raise DecodeError(f"expected a MetricRecord, got {type(record).__name__}")
    keys = set(keys)
    if set(record.keys()) != keys:
        raise DecodeError(f"expected metrics {sorted(keys)}, got {sorted(record.keys())}")
    values = {}
    for key in keys:
        value = record[key]
        if type(value) in (int, float) and not math.isfinite(value):
            raise NonFiniteError(f"{key}={value!r} is not a finite number >= 0")
        if type(value) not in (int, float) or value < 0:
            raise DecodeError(f"{key}={value!r} is not a finite number >= 0")
        values[key] = float(value)
    return values


def checked_count(values: Mapping[str, float], key: str, maximum: int, minimum: int = 0) -> int:
    """``values[key]`` as an example count: an integer in [minimum, maximum] (``example_limit``)."""
    value = values[key]
    if not value.is_integer() or not minimum <= value <= maximum:
        raise DecodeError(f"{key}={value!r} is not an integer in [{minimum}, {maximum}]")
    return int(value)


@dataclass(frozen=True)
class EvaluationSums:
    """One node's evaluation of the global model: sums and counts."""

    n_test: int
    test_loss_sum: float
    test_correct_sum: float | None  # classification only
    n_train: int
    train_loss_sum: float


def decode_evaluation_sums(record: object, task: TaskData) -> EvaluationSums:
    """The sums of a node's ``metrics`` record for ``task``, range-checked (counts within
    ``example_limit``, correct predictions within the test count)."""
    keys = [NUM_EXAMPLES, TEST_LOSS_SUM, TRAIN_LOSS_SUM, TRAIN_EXAMPLES]
    if task.kind == CLASSIFICATION:
        keys.append(TEST_CORRECT_SUM)
    values = checked_metrics(record, keys)
    n_test = checked_count(values, NUM_EXAMPLES, example_limit(task))
    n_train = checked_count(values, TRAIN_EXAMPLES, example_limit(task), minimum=1)
    correct = values.get(TEST_CORRECT_SUM)
    if correct is not None and correct > n_test * (1 + 1e-9):
        raise DecodeError(f"{TEST_CORRECT_SUM}={correct} exceeds {NUM_EXAMPLES}={n_test}")
    return EvaluationSums(n_test, values[TEST_LOSS_SUM], correct, n_train, values[TRAIN_LOSS_SUM])


def combine_evaluation_sums(sums: Iterable[EvaluationSums], kind: str) -> dict[str, float]:
    """``test_loss``, ``test_accuracy`` or ``test_mse`` (sample-weighted) and ``train_loss``
    (the unweighted mean of the nodes' mean training losses, the papers' F)."""
    sums = list(sums)
    out: dict[str, float] = {}
    n_test = sum(s.n_test for s in sums)
    if n_test > 0:
        out["test_loss"] = sum(s.test_loss_sum for s in sums) / n_test
        if kind == CLASSIFICATION:
            out["test_accuracy"] = sum(s.test_correct_sum for s in sums) / n_test
        else:
            out["test_mse"] = out["test_loss"]
    if sums:
        out["train_loss"] = float(np.mean([s.train_loss_sum / s.n_train for s in sums]))
    return out


def federated_figures(sums: Iterable[EvaluationSums], kind: str, central: bool) -> dict[str, float]:
    """``combine_evaluation_sums``, the test figures named ``federated_*`` when the server also
    evaluates centrally (the central figures take the plain names)."""
    combined = combine_evaluation_sums(sums, kind)
    if not central:
        return combined
    return {k if k == "train_loss" else f"federated_{k}": v for k, v in combined.items()}


def central_figures(loss_sum: float, correct: float | None, n: int) -> dict[str, float]:
    """The central test figures from the global function's loss summed over the ``n`` test
    points and, for a classification, how many it got right (None for a regression)."""
    if correct is None:
        return {"test_mse": loss_sum / n, "test_loss": loss_sum / n}
    return {"test_accuracy": correct / n, "test_loss": loss_sum / n}


def spread_over_nodes(per_node: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """``<metric>_mean``, ``_min`` and ``_max`` over nodes, for algorithms without a global
    function (each node evaluates its own model)."""
    out: dict[str, float] = {}
    names = sorted({k for metrics in per_node.values() for k in metrics})
    for name in names:
        values = [m[name] for m in per_node.values() if name in m]
        out.update(
            {
                f"{name}_mean": float(np.mean(values)),
                f"{name}_min": float(min(values)),
                f"{name}_max": float(max(values)),
            }
        )
    return out


class CentralEvaluator:
    """Evaluates a torch global model, given as an ArrayRecord, on the task's test set."""

    def __init__(self, model: nn.Module, task: TaskData) -> None:
        self.model, self.task = model, task

    def __call__(self, arrays: ArrayRecord) -> dict[str, float]:
        self.model.load_state_dict(arrays.to_torch_state_dict(), strict=True)  # to its device
        metrics = evaluate_model(self.model, self.task.x_test, self.task.y_test, self.task.kind)
        if self.task.kind == CLASSIFICATION:
            return {"test_accuracy": metrics["accuracy"], "test_loss": metrics["loss"]}
        return {"test_mse": metrics["mse"], "test_loss": metrics["loss"]}
