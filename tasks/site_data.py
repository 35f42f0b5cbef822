"""A site's data as the families use it: the node's own file (and test file) under the agreed
schema, and the server's view of the task (widths, classes, row bound, its own test file).

Node config (the SuperNode's ``--node-config``, or the simulation's per-node config):
- ``dataset-path``: the node's file (CSV, Parquet, NPZ; ``tasks.site_files``) or image folder
  (one sub-folder per class; ``tasks.site_images``); without it the
  run config's ``dataset-path`` template, ``{partition-id}`` replaced by the node's partition id;
- ``dataset-test-path``: the node's test file; without it a seeded hold-out of its own rows
  (``partitioning.local-test`` when > 0, else ``test-fraction``; at least one row each side);
- ``dataset-max-bytes``: the largest file the node reads (default ``MAX_BYTES``, 256 MiB),
  checked with ``stat`` before reading.
Relative paths are resolved against the SuperNode's working folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tasks.datasets import TaskData
from tasks.federation import LocalData, local_split
from tasks.site_files import MAX_BYTES, SiteDataError, SiteTable, read_site_file
from tasks.site_schema import Schema, transform

PATH_KEY, TEST_PATH_KEY, MAX_BYTES_KEY = "dataset-path", "dataset-test-path", "dataset-max-bytes"
PARTITION_TEMPLATE = "{partition-id}"
SITE_MODEL = "mlp"


def local_path(text: str) -> Path:
    """A path from a config: ``~`` expanded, relative to the working folder."""
    return Path(text).expanduser().absolute()


def site_file(node_config: Mapping[str, Any], template: str, partition_id: int) -> Path:
    """The node's ``dataset-path``, or the run config's template for its partition."""
    path = str(
        node_config.get(PATH_KEY, "") or template.replace(PARTITION_TEMPLATE, str(partition_id))
    )
    if not path:
        raise SiteDataError(
            "this node has no data file: give the SuperNode --node-config "
            "\"dataset-path='<file>'\" or the run config a dataset-path template"
        )
    return local_path(path)


def max_bytes(node_config: Mapping[str, Any]) -> int:
    """The node's ``dataset-max-bytes`` (a positive int)."""
    value = node_config.get(MAX_BYTES_KEY, MAX_BYTES)
    if type(value) is not int or value <= 0:
        raise SiteDataError(f"node config {MAX_BYTES_KEY}={value!r} must be a positive integer")
    return value


def read_own(node_config: Mapping[str, Any], template: str, partition_id: int) -> SiteTable:
    """The node's own training file, read and checked (cached while it does not change)."""
    return read_site_file(site_file(node_config, template, partition_id), max_bytes(node_config))


def read_test(node_config: Mapping[str, Any]) -> SiteTable | None:
    """The node's ``dataset-test-path`` file, read and checked; None without one."""
    path = node_config.get(TEST_PATH_KEY)
    return read_site_file(local_path(str(path)), max_bytes(node_config)) if path else None


def training_rows(
    table: SiteTable, node_config: Mapping[str, Any], share: float, partition_id: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices of the node's file: all rows and none when the node has a test
    file, else a seeded hold-out of ``share`` of them (the ``partitioning.local-test`` rule)."""
    rows = np.arange(table.rows)
    if node_config.get(TEST_PATH_KEY):
        return rows, rows[:0]
    if table.rows < 2:
        raise SiteDataError(
            f"{table.path}: {table.rows} row; a site needs at least 2 (one to "
            f"train on, one to test) unless its node config has {TEST_PATH_KEY}"
        )
    return local_split(rows, share, partition_id, seed)


def site_task(
    schema: Schema,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    max_examples: int = 0,
) -> TaskData:
    """A task over the agreed feature space."""
    return TaskData(
        "site",
        schema.kind,
        x_train,
        y_train,
        x_test,
        y_test,
        schema.num_classes,
        SITE_MODEL,
        max_examples,
        schema.target[1],
    )


def node_data(
    schema: Schema,
    node_config: Mapping[str, Any],
    template: str,
    share: float,
    partition_id: int,
    num_partitions: int,
    seed: int,
) -> LocalData:
    """The node's training rows and test rows under ``schema`` (fitted); ``SiteDataError``
    names the file and the problem (a missing column, a label or category outside the agreed
    sets, text in a numeric column)."""
    table = read_own(node_config, template, partition_id)
    train, test = training_rows(table, node_config, share, partition_id, seed)
    x, y = transform(table, schema)
    test_table = read_test(node_config)
    if test_table is not None:
        x_test, y_test = transform(test_table, schema)
    else:
        x_test, y_test = x[test], y[test]
    task = site_task(schema, x[train], y[train], x_test, y_test)
    return LocalData(task, partition_id, num_partitions, task.x_train, task.y_train, x_test, y_test)


def server_task(schema: Schema, total_rows: int, test_path: str) -> TaskData:
    """The server's view: the agreed widths and classes, at most ``total_rows`` examples a node,
    and the rows of ``test_path`` (the ServerApp machine's own file) for central evaluation, or
    none."""
    width = schema.width
    x_test = np.zeros((0, width), np.float32)
    y_test = np.zeros(0, np.int64 if schema.num_classes else np.float32)
    if test_path:
        x_test, y_test = transform(read_site_file(local_path(test_path)), schema)
    return site_task(
        schema,
        np.zeros((0, width), np.float32),
        y_test[:0],
        x_test,
        y_test,
        max_examples=total_rows,
    )
