"""One node's share of a task: training partition, test shard, early errors."""

import numpy as np
import pytest

from run_config.common import RunSettings
from tasks.errors import ConfigError
from tasks.federation import DataSpec, check_partitioning, local_data, task_for
from testing.inprocess_grid import run_config


def settings(**overrides) -> DataSpec:
    return RunSettings.from_run_config(run_config(**overrides)).data


def test_nodes_cover_train_and_test_sets_exactly_once():
    s = settings(partitioning="dirichlet")
    task = task_for(s)
    shares = [local_data(s, i, 5) for i in range(5)]
    assert sum(len(d.y_train) for d in shares) == len(task.y_train)
    assert sum(len(d.y_test) for d in shares) == len(task.y_test)
    rows = np.concatenate([d.x_test for d in shares])
    assert len(np.unique(rows, axis=0)) == len(np.unique(task.x_test, axis=0))


def test_by_class_with_the_wrong_number_of_nodes_fails_before_training():
    with pytest.raises(ConfigError, match="num-partitions"):
        check_partitioning(settings(partitioning="by-class"), 4)
    check_partitioning(settings(partitioning="by-class"), 10)


def test_partition_id_out_of_range_names_the_key():
    with pytest.raises(ConfigError, match="partition-id=7"):
        local_data(settings(), 7, 5)


def test_a_local_test_share_is_held_out_of_each_partition():
    plain, split = (
        settings(partitioning="labels-per-client"),
        settings(partitioning="labels-per-client", **{"partitioning.local-test": 0.25}),
    )
    for pid in range(5):
        whole, part = local_data(plain, pid, 5), local_data(split, pid, 5)
        assert len(part.y_test) == round(0.25 * len(whole.y_train))
        assert len(part.y_train) + len(part.y_test) == len(whole.y_train)
        # the test share comes from the node's own partition (its labels), not the task's test set
        assert set(part.y_test.tolist()) <= set(whole.y_train.tolist())
        rows = np.concatenate([part.x_train, part.x_test])
        assert len(np.unique(rows, axis=0)) == len(np.unique(whole.x_train, axis=0))
    again = local_data(split, 3, 5)
    assert np.array_equal(again.y_test, local_data(split, 3, 5).y_test)


def test_a_bad_local_test_share_names_the_key():
    with pytest.raises(ConfigError, match="partitioning.local-test=1.0"):
        settings(**{"partitioning.local-test": 1.0})
