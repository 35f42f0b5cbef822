"""FedFW's local pass (``fedfw.local-pass``, the authors' code): one FW step per minibatch of a
node's data each round, every step's point on the wire, and the server's mirror of x_i still
bit-identical to the node's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from client_app.app import app as client_app
from functions.errors import DecodeError
from functions.extreme_points import decode_model_points, encode_model_point, join_points
from functions.protocol import FW_POINT, UPDATES
from oracles.lmo import Constraint
from run_config.common import RunSettings
from server_app.app import InvalidRunConfig
from server_app.checkpoint import read_checkpoint
from tasks.federation import local_data
from testing.inprocess_grid import run_config
from tests.helpers import run_app, state_params, train_messages

BATCH = 300
LOCAL = {
    "task": "synthetic",
    "fedfw.local-pass": True,
    "fedfw.batch-size": BATCH,
    "num-server-rounds": 4,
    "fedfw.federated-eval": False,
}


def _server_points(run, node: int) -> list[np.ndarray]:
    record = read_checkpoint(run.out_dir).strategy["mirror"]
    prefix = f"{node}/"
    return [v.numpy() for k, v in record.items() if k.startswith(prefix)]


@pytest.mark.parametrize("algorithm", ["fedfw", "fedfw-plus", "fedfw-sto"])
def test_the_mirror_is_bit_identical_to_every_node_after_a_local_pass(tmp_path, algorithm):
    run = run_app(tmp_path, 4, **{**LOCAL, "algorithm": algorithm})
    for node in run.grid.node_ids:
        mine = state_params(run.grid, node, "fedfw.pending.x")
        for a, b in zip(mine, _server_points(run, node)):
            np.testing.assert_array_equal(a, b)
    assert all(r["failures"] == 0 and r["participants"] == 4 for r in run.rows[1:])
    assert run.rows[-1]["test_accuracy"] > run.rows[0]["test_accuracy"]


def test_each_node_sends_one_point_per_minibatch(tmp_path):
    config = {**LOCAL, "algorithm": "fedfw", "fedfw.constraint": "l1"}
    run = run_app(tmp_path, 4, **config)
    data = RunSettings.from_run_config(run_config(**config)).data
    steps = [math.ceil(len(local_data(data, pid, 4).y_train) / BATCH) for pid in range(4)]
    # l1 MCLR point: two uint16 vertex codes, 4 bytes per step
    assert min(steps) >= 2
    assert [r["bytes_up_train"] for r in run.rows[1:]] == [4 * sum(steps)] * 4
    assert all(
        UPDATES not in m.content for n in run.grid.node_ids for m in train_messages(run.grid, n)
    )  # auto: the dense x-bar


def test_a_local_pass_with_a_missing_point_is_refused(tmp_path):
    """Node 0 drops its last step's point: every reply of it is refused, the others go on."""

    def short(message, context):
        reply = client_app(message, context)
        if (
            message.metadata.message_type == "train"
            and reply.has_content()
            and context.node_config["partition-id"] == 0
        ):
            arrays = {k: v.numpy() for k, v in reply.content[FW_POINT].items()}
            last = max(int(k.partition(".")[0]) for k in arrays)
            kept = {k: v for k, v in arrays.items() if not k.startswith(f"{last}.")}
            reply.content = RecordDict(
                {FW_POINT: ArrayRecord({k: np.ascontiguousarray(v) for k, v in kept.items()})}
            )
        return reply

    run = run_app(tmp_path, 4, None, short, **{**LOCAL, "algorithm": "fedfw"})
    assert [r["failures"] for r in run.rows[1:]] == [1] * 4
    assert [r["participants"] for r in run.rows[1:]] == [3] * 4


def test_the_compact_downlink_is_refused_with_a_local_pass(tmp_path):
    with pytest.raises(InvalidRunConfig, match="fedfw.downlink='compact'"):
        run_app(tmp_path, 2, **{**LOCAL, "algorithm": "fedfw", "fedfw.downlink": "compact"})


def test_joined_points_round_trip_and_refuse_gaps():
    c = Constraint("l1", 10.0)
    shapes = [(3, 2), (2,)]
    points = [[c.lmo(np.random.default_rng(k).normal(size=s)) for s in shapes] for k in range(3)]
    arrays = join_points([encode_model_point(c, p, "per-tensor") for p in points])
    again = decode_model_points(c, arrays, shapes, "per-tensor", 3)
    for p, q in zip(points, again):
        for a, b in zip(p, q):
            np.testing.assert_array_equal(a, b)
    for bad, limit in (
        ({k: v for k, v in arrays.items() if not k.startswith("1.")}, 3),
        (arrays, 2),
        ({}, 3),
        ({**arrays, "x": arrays["0.vertex"]}, 3),
        ({**arrays, "3": arrays["0.vertex"]}, 5),
    ):
        with pytest.raises(DecodeError):
            decode_model_points(c, bad, shapes, "per-tensor", limit)
