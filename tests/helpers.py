"""Shared helpers of the in-process end-to-end tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import RecordDict

from client_app.app import app as client_app
from functions.ensembles import Ensemble
from functions.kddt import KDDT
from functions.trees import LEAF, LEAF_FEATURE, TreeArrays
from run_config.families import tables
from run_config.keys import Key
from server_app.app import main as server_main
from server_app.checkpoint import read_checkpoint
from strategies.ensemble_sync import StoredEnsemble
from strategies.state_codec import SEGMENTS
from testing.inprocess_grid import LocalGrid, run_config, server_context


def tree_from_constant(lower: np.ndarray, upper: np.ndarray, value: np.ndarray) -> KDDT:
    """The single-leaf KDDT equal to ``value`` (q,) on the box [lower, upper]."""
    value = np.asarray(value, dtype=np.float64).reshape(1, -1)
    lower = np.asarray(lower, dtype=np.float64)
    tree = TreeArrays(
        children_left=np.full(1, LEAF, dtype=np.int32),
        children_right=np.full(1, LEAF, dtype=np.int32),
        feature=np.full(1, LEAF_FEATURE, dtype=np.int32),
        threshold=np.full(1, float(LEAF_FEATURE)),
        value=value,
        n_features=len(lower),
    )
    return KDDT(tree, lower, np.asarray(upper, dtype=np.float64))


def all_keys() -> tuple[Key, ...]:
    """Every declared key, in ``tables()`` order."""
    return tuple(key for table in tables() for key in table.keys)


RUN_NAME = "job"


@dataclass
class AppRun:
    """A finished in-process run: the grid (messages, node contexts) and its results folder."""

    grid: LocalGrid
    out_dir: Path

    @property
    def rows(self) -> list[dict]:
        return json.loads((self.out_dir / "metrics.json").read_text())["rounds"]


def run_app(
    tmp_path: Path,
    num_nodes: int = 4,
    node_configs=None,
    client=client_app,
    together: int = 1,
    **overrides,
) -> AppRun:
    """Run the real ServerApp against ``num_nodes`` in-process clients (``together`` of them
    in lockstep: ``LocalGrid``)."""
    config = run_config(**{"output-dir": str(tmp_path), "run-name": RUN_NAME, **overrides})
    grid = LocalGrid(client, config, num_nodes, node_configs, together=together)
    server_main(grid, server_context(config))
    return AppRun(grid, tmp_path / RUN_NAME)


def last_xbar(grid: LocalGrid) -> list[np.ndarray]:
    """x-bar after the final round, as the server sent it for evaluation."""
    message = [m for m in grid.down if m.metadata.message_type == "evaluate"][-1]
    return [a.numpy().astype(np.float64) for a in message.content["xbar"].values()]


def train_messages(grid: LocalGrid, node: int) -> list:
    """The train messages sent to ``node``, in order."""
    return [
        m
        for m in grid.down
        if m.metadata.message_type == "train" and m.metadata.dst_node_id == node
    ]


def state_params(grid: LocalGrid, node: int, key: str) -> list[np.ndarray]:
    """A parameter record from a node's Context.state."""
    return [a.numpy() for a in grid.contexts[node].state[key].values()]


def forgetting(client, partition_id: int, server_round: int):
    """A ClientApp callable that wipes the node's Context.state before the train message of
    ``server_round`` to the node of ``partition_id`` (a restarted node that lost its state)."""

    def app(message, context):
        if (
            context.node_config["partition-id"] == partition_id
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == server_round
        ):
            for key in list(context.state.keys()):
                del context.state[key]
        return client(message, context)

    return app


SEGMENT = "segment:"  # saved(): a segment's records, under segment:<name>:<record key>


def saved(strategy) -> RecordDict:  # any FederatedStrategy
    """The strategy's whole state as a checkpoint keeps it, in one RecordDict: its
    ``state_record`` and its live segments (``segment:<name>:<key>``)."""
    state = strategy.state_record()
    for name in strategy.segment_names():
        for key, record in strategy.segment_record(name).items():
            state[f"{SEGMENT}{name}:{key}"] = record
    return state


def restore_saved(strategy, state: RecordDict) -> None:
    """``load_state_record`` of what ``saved`` wrote."""
    plain, segments = RecordDict(), {}
    for key, record in state.items():
        if key.startswith(SEGMENT):
            name, _, inner = key[len(SEGMENT) :].partition(":")
            segments.setdefault(name, RecordDict())[inner] = record
        else:
            plain[key] = record
    strategy.load_state_record(plain, segments)


def checkpoint_ensemble(out_dir: Path) -> Ensemble:
    """The FFGB ensemble of the checkpoint in ``out_dir``, its learners from the segments."""
    checkpoint = read_checkpoint(out_dir)
    state = checkpoint.strategy
    records = {"": state["ensemble"], "arrays": state["ensemble-arrays"]}
    return StoredEnsemble.from_records(records, {SEGMENTS: checkpoint.segment_records}).ensemble


# small runs of every client half's family, for the device and graph-form tests
DEVICE_CASES = {
    "fedavg": {"algorithm": "fedavg"},
    "fedfw": {"algorithm": "fedfw", "task": "synthetic"},
    "feddr": {"algorithm": "feddr", "task": "synthetic"},
    "ffgb": {
        "algorithm": "ffgb",
        "ffgb.local-steps": 2,
        "ffgb.oracle-steps": 40,
        "ffgb.hidden": 16,
    },
    "ffgb-c": {
        "algorithm": "ffgb-c",
        "ffgb.local-steps": 1,
        "ffgb.oracle-steps": 20,
        "ffgb.hidden": 16,
    },
    "ffgb-l": {
        "algorithm": "ffgb-l",
        "task": "diabetes",
        "ffgb.local-steps": 1,
        "ffgb.oracle-steps": 20,
        "ffgb.hidden": 8,
    },
    "fedfun": {
        "algorithm": "fedfun",
        "task": "wine",
        "fedfun.initial-steps": 40,
        "fedfun.local-steps": 10,
        "fedfun.penalty-samples": 50,
        "fedfun.hidden": "8",
    },
    "dfedfish": {
        "algorithm": "dfedfish",
        "task": "wine",
        "fedfun.initial-steps": 40,
        "fedfun.local-steps": 10,
        "fedfun.hidden": "8",
    },
}
# the loss each family reports: the server's central test loss, or FedFun's mean local loss
DEVICE_LOSS = {"fedfun": "local_loss", "dfedfish": "local_loss"}
