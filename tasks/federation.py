"""One node's share of a task: its training partition and a test shard for federated evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tasks.datasets import SITE_TASK, TaskData, load_task
from tasks.errors import ConfigError
from tasks.partitioning import partition


@dataclass(frozen=True)
class DataSpec:
    """Which task, how it is generated and split, and how it is partitioned over the nodes."""

    task: str = "digits"
    seed: int = 0
    test_fraction: float = 0.2
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    synthetic_samples: int = 6000
    partitioning: str = "iid"
    partitioning_s: float = 0.1
    partitioning_alpha: float = 0.5
    labels_per_client: int = 3
    local_test: float = 0.0  # > 0: a node's test shard is this share of its own partition
    image_scaling: str = "unit"


@dataclass(frozen=True)
class LocalData:
    """What one client holds; ``task`` carries the shapes, kind and default model."""

    task: TaskData
    partition_id: int
    num_partitions: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def task_for(spec: DataSpec) -> TaskData:
    """The run's bundled task, loaded (and cached) once per process."""
    if spec.task == SITE_TASK:
        raise ConfigError(
            "task='site' has no bundled data: its schema is agreed with the nodes "
            "when the run starts (tasks.site_schema)"
        )
    return load_task(
        spec.task,
        seed=spec.seed,
        test_fraction=spec.test_fraction,
        synthetic_alpha=spec.synthetic_alpha,
        synthetic_beta=spec.synthetic_beta,
        synthetic_samples=spec.synthetic_samples,
        image_scaling=spec.image_scaling,
    )


@lru_cache(maxsize=8)
def _train_partitions(spec: DataSpec, num_partitions: int) -> tuple[np.ndarray, ...]:
    task = task_for(spec)
    parts = partition(
        spec.partitioning,
        num_partitions,
        task.y_train,
        features=task.x_train,
        seed=spec.seed,
        s=spec.partitioning_s,
        alpha=spec.partitioning_alpha,
        labels_per_client=spec.labels_per_client,
        num_classes=task.num_classes or None,
    )
    return tuple(parts)


def _test_shard(n_test: int, partition_id: int, num_partitions: int, seed: int) -> np.ndarray:
    """An iid shard of the test set, so federated evaluation covers it exactly once."""
    order = np.random.default_rng(seed + 7919).permutation(n_test)
    return np.sort(np.array_split(order, num_partitions)[partition_id])


def check_partitioning(spec: DataSpec, num_partitions: int) -> None:
    """Fail before training if the partition request cannot be met."""
    _train_partitions(spec, num_partitions)


def local_split(
    part: np.ndarray, fraction: float, partition_id: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices of a partition with ``fraction`` of it held out for testing (the
    FedFW authors' per-user split: a shuffled 75/25 split of each user's data)."""
    order = np.random.default_rng([seed, 104729, partition_id]).permutation(part)
    n_test = min(len(part) - 1, max(1, round(fraction * len(part))))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def local_data(spec: DataSpec, partition_id: int, num_partitions: int) -> LocalData:
    """The data of node ``partition_id`` of ``num_partitions``: its training partition, and an
    iid shard of the task's test set, or (``local_test``) a held-out share of its partition."""
    if not 0 <= partition_id < num_partitions:
        raise ConfigError.bound("partition-id", partition_id, f"in [0, {num_partitions})")
    task = task_for(spec)
    train_idx = _train_partitions(spec, num_partitions)[partition_id]
    if spec.local_test > 0:
        train_idx, test_idx = local_split(train_idx, spec.local_test, partition_id, spec.seed)
        x_test, y_test = task.x_train[test_idx], task.y_train[test_idx]
    else:
        test_idx = _test_shard(len(task.y_test), partition_id, num_partitions, spec.seed)
        x_test, y_test = task.x_test[test_idx], task.y_test[test_idx]
    return LocalData(
        task=task,
        partition_id=partition_id,
        num_partitions=num_partitions,
        x_train=task.x_train[train_idx],
        y_train=task.y_train[train_idx],
        x_test=x_test,
        y_test=y_test,
    )
