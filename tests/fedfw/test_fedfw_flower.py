"""FedFW family end to end on the in-process grid: wire size, mirror exactness, robustness."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from client_app.app import app as client_app
from client_app.registry import handlers_for
from functions.acceptance import last_accepted, sync_value
from functions.protocol import CONSTRAINT, LOCAL_STEPS, NODE
from server_app.app import InvalidRunConfig
from tests.helpers import forgetting, last_xbar, run_app, state_params, train_messages

FAST = {
    "task": "synthetic",
    "num-server-rounds": 6,
    "fedfw.gap": False,
    "fedfw.downlink": "dense",
}  # these tests read the dense x-bar; test_fedfw_downlink.py


def run_fw(tmp_path, num_nodes=5, node_configs=None, client=client_app, **overrides):
    run = run_app(
        tmp_path, num_nodes, node_configs, client, **{"algorithm": "fedfw", **FAST, **overrides}
    )
    return run.grid, run.rows


def client_x(grid, node) -> list[np.ndarray]:
    return state_params(grid, node, "fedfw.pending.x")


def test_l1_upload_is_a_few_bytes_per_client(tmp_path):
    grid, rows = run_fw(  # the points alone: no evaluation sums riding on the train replies
        tmp_path,
        num_nodes=10,
        **{"num-server-rounds": 3, "fedfw.constraint": "l1", "eval-with-train": False},
    )
    for row in rows[1:]:
        assert row["participants"] == 10 and row["failures"] == 0
        # MCLR 60x10: two uint16 vertex codes (index and sign), packed = 4 bytes per client
        assert row["bytes_up_train"] / row["participants"] <= 64
        assert row["bytes_up_train"] == 10 * 4
        # on the wire Flower adds keys, dtypes, shapes and a ~128-byte header per array
        assert 10 * 4 < row["wire_bytes_up"] < 10 * 2440  # (train and evaluation replies)


def test_server_mirror_equals_the_mean_of_client_states(tmp_path):
    grid, rows = run_fw(tmp_path, num_nodes=4)
    xbar = last_xbar(grid)
    xs = [client_x(grid, node) for node in grid.node_ids]
    for k, xb in enumerate(xbar):
        mean = np.mean([x[k] for x in xs], axis=0)
        np.testing.assert_allclose(mean, xb, rtol=0, atol=1e-6)
    assert rows[-1]["consensus_distance"] > 0
    assert rows[-1]["test_accuracy"] > rows[0]["test_accuracy"]


@pytest.mark.parametrize("algorithm", ["fedfw", "fedfw-plus", "fedfw-sto"])
def test_each_variant_learns_and_reports_the_gap(tmp_path, algorithm):
    _, rows = run_fw(tmp_path, algorithm=algorithm, **{"num-server-rounds": 12, "fedfw.gap": True})
    late = rows[-3:]  # Frank-Wolfe iterates oscillate early: judge the last three rounds
    assert max(r["train_loss"] for r in late) < rows[1]["train_loss"]
    assert max(r["test_accuracy"] for r in late) > 0.3
    assert all(r["fw_gap"] >= -1e-9 for r in rows[1:])
    assert max(r["fw_gap"] for r in late) < rows[1]["fw_gap"]


def test_partial_participation_keeps_the_average_exact(tmp_path):
    grid, rows = run_fw(
        tmp_path, num_nodes=6, **{"fedfw.participation": 0.5, "num-server-rounds": 8}
    )
    counts = [r["participants"] for r in rows[1:]]
    assert min(counts) < 6 and sum(counts) > 0
    # every pending step was accepted (no failures), so each node's pending x_i is its mirror x_i
    # even for nodes that sat out the last rounds; their mean must be x-bar
    assert all(r["failures"] == 0 for r in rows[1:])
    xbar = last_xbar(grid)
    xs = [client_x(grid, node) for node in grid.node_ids]
    for k, xb in enumerate(xbar):
        np.testing.assert_allclose(np.mean([x[k] for x in xs], axis=0), xb, atol=1e-6)


def test_a_point_outside_the_declared_set_is_dropped_and_the_node_resynced(
    tmp_path, monkeypatch, caplog
):
    """Node 0 declares the run's l2 ball but answers from an l2 ball 3x larger.

    (An l1 point cannot leave D at all: its radius is implied, never sent.)"""
    handlers = handlers_for("fedfw")

    def declares_small_ball(job):
        return RecordDict(
            {
                "node": ConfigRecord(
                    {
                        "constraint": "l2",
                        "radius": 10.0,
                        "partition-id": job.data.partition_id,
                        "num-partitions": job.data.num_partitions,
                    }
                )
            }
        )

    monkeypatch.setitem(handlers, "query.node", declares_small_ball)
    caplog.set_level(logging.WARNING, logger="flwr")
    cheat = [{"fedfw.radius": 30.0}, {}, {}, {}]
    grid, rows = run_fw(tmp_path, num_nodes=4, node_configs=cheat, **{"fedfw.constraint": "l2"})
    # its train replies are dropped whole, with the evaluation of the round before riding on
    # them: one failure of training and one of evaluation a round, the last round's evaluation
    # (an exchange of its own) excepted
    assert [r["failures"] for r in rows[1:]] == [2] * 5 + [1]
    assert [r["participants"] for r in rows[1:]] == [3] * 6
    assert any("l2 norm 30 is outside D (r=10.0)" in r.getMessage() for r in caplog.records)
    to_cheat = train_messages(grid, grid.node_ids[0])
    # never accepted: the node keeps its committed x_i = x^1 (no re-sync needed), every round
    # it is told its last accepted round is 0, and its state still matches the server's mirror
    assert [sync_value(m.content["config"]) for m in to_cheat] == ["xbar"] + ["none"] * 5
    assert [last_accepted(m.content["config"]) for m in to_cheat] == [0] * 6
    x1 = [a.numpy() for a in to_cheat[0].content["xbar"].values()]
    committed = grid.contexts[grid.node_ids[0]].state["fedfw.x"]
    for kept, first in zip(committed.values(), x1):
        np.testing.assert_array_equal(kept.numpy(), first)


def test_a_node_with_an_unusable_set_or_pass_is_a_warning_of_the_run(tmp_path, monkeypatch):
    """Partition 0 declares a D_i that is no set and a local pass of 0 steps: the run goes on
    with the run's D for it and its points refused, and its outcome names the node and both
    reasons once (the node's facts are read again at every roster change)."""
    handlers = handlers_for("fedfw")
    describe = handlers["query.node"]

    def declares_nonsense(job):
        answer = describe(job)
        if job.data.partition_id == 0:
            answer[NODE][CONSTRAINT], answer[NODE][LOCAL_STEPS] = "l7", 0
        return answer

    monkeypatch.setitem(handlers, "query.node", declares_nonsense)
    run = run_app(
        tmp_path,
        3,
        **{"algorithm": "fedfw", **FAST, "num-server-rounds": 2, "fedfw.local-pass": True},
    )
    outcome = json.loads((run.out_dir / "config.json").read_text())["outcome"]
    node = run.grid.partition_node(0)
    assert outcome["warnings"] == [
        f"round 1: node {node}: no usable D_i (fedfw.constraint='l7' is not valid; allowed "
        "values: l1, l2, box, nuclear, simplex); it uses the run's D",
        f"round 1: node {node}: local pass of 0 steps is not in [1, 10000]; its points are refused",
    ]
    assert outcome["status"] == "completed"
    assert [r["participants"] for r in run.rows[1:]] == [2, 2]


def test_per_client_l2_superset_runs_and_sends_dense_points(tmp_path):
    sets = [{"fedfw.constraint": "l2", "fedfw.radius": 10.0}, {}, {}, {}]
    _, rows = run_fw(
        tmp_path,
        num_nodes=4,
        node_configs=sets,
        **{"num-server-rounds": 3, "fedfw.constraint": "l1", "eval-with-train": False},
    )
    assert rows[-1]["failures"] == 0
    assert rows[-1]["bytes_up_train"] == 3 * 4 + (60 * 10 + 10) * 4


def test_a_node_that_lost_its_state_is_resent_x_i(tmp_path):
    """Node 1 forgets everything before round 3; it fails once (its round-3 reply, and with
    it its evaluation of round 2), then is resynced."""
    grid, rows = run_fw(tmp_path, num_nodes=4, client=forgetting(client_app, 1, 3))
    assert [r["failures"] for r in rows[1:]] == [0, 1, 1, 0, 0, 0]
    syncs = [sync_value(m.content["config"]) for m in train_messages(grid, grid.node_ids[1])]
    assert syncs == ["xbar", "none", "none", "xi", "none", "none"]
    xbar = last_xbar(grid)
    xs = [client_x(grid, node) for node in grid.node_ids]
    np.testing.assert_allclose(np.mean([x[0] for x in xs], axis=0), xbar[0], atol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"fedfw.constraint": "l3"}, "fedfw.constraint='l3' is not valid; allowed values: l1, l2"),
        ({"fedfw.radius": -1.0}, "fedfw.radius=-1.0 is not valid"),
        ({"fedfw.schedule": "fast"}, "fedfw.schedule='fast' is not valid"),
        ({"fedfw.participation": 1.5}, "fedfw.participation=1.5 is not valid"),
    ],
)
def test_bad_fedfw_config_stops_before_training(tmp_path, caplog, overrides, fragment):
    caplog.set_level(logging.ERROR, logger="flwr")
    with pytest.raises(InvalidRunConfig):
        run_fw(tmp_path, **overrides)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and fragment in errors[0], errors


def test_by_default_no_gradient_leaves_a_node(tmp_path):
    """FedFW's design keeps gradients on the nodes: a default run's evaluations carry loss
    sums only (``fedfw.gap`` is off; round 1's rides on round 2's train replies, the last
    round's has its exchange), and the train replies compact points and those sums only."""
    replies = []

    def recording(message, context):
        reply = client_app(message, context)
        replies.append((message.metadata.message_type, reply))
        return reply

    rows = run_app(
        tmp_path,
        3,
        None,
        recording,
        **{"algorithm": "fedfw", "task": "synthetic", "num-server-rounds": 2},
    ).rows
    kinds = {
        kind: {tuple(sorted(r.content.keys())) for k, r in replies if k == kind}
        for kind in ("train", "evaluate")
    }
    assert kinds == {"train": {("point",), ("evaluation", "point")}, "evaluate": {("metrics",)}}
    ridden = [r.content["evaluation"] for k, r in replies if "evaluation" in r.content]
    assert len(ridden) == 3 and all(isinstance(m, MetricRecord) for m in ridden)
    assert "train_loss" in rows[-1] and "fw_gap" not in rows[-1]
