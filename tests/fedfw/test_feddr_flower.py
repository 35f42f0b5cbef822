"""FedDR end to end on the in-process grid: learning in D, exact average, robustness, config."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client_app import feddr
from client_app.app import app as client_app
from client_app.registry import handlers_for
from functions.acceptance import last_accepted, sync_value
from oracles.douglas_rachford import project_params
from oracles.lmo import make_constraint
from server_app.app import InvalidRunConfig
from server_app.packed_grid import unpacked
from tests.helpers import last_xbar, run_app, state_params, train_messages

FAST = {"task": "synthetic", "algorithm": "feddr", "num-server-rounds": 5, "fedfw.constraint": "l1"}
MCLR_BYTES = (60 * 10 + 10) * 4  # x_hat_i as dense float32


def run_dr(tmp_path, num_nodes=4, client=client_app, **overrides):
    run = run_app(tmp_path, num_nodes, client=client, **{**FAST, **overrides})
    return run.grid, run.rows


def state_of(grid, node, key="feddr.pending.x_hat") -> list[np.ndarray]:
    return state_params(grid, node, key)


def assert_xbar_is_projected_mean(grid, x_hats, constraint):
    """x-bar = proj_D(mean_i x_hat_i) over every node, from the nodes' own Context.state."""
    mean = [np.mean([x[k] for x in x_hats], axis=0) for k in range(len(x_hats[0]))]
    for expected, got in zip(project_params(constraint, mean), last_xbar(grid)):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("kind", "radius", "batch_size"), [("l1", 10.0, 0), ("l2", 2.0, 64)])
def test_learns_inside_d_and_averages_exactly(tmp_path, kind, radius, batch_size):
    grid, rows = run_dr(
        tmp_path,
        **{"fedfw.constraint": kind, "fedfw.radius": radius, "feddr.batch-size": batch_size},
    )
    assert all(r["participants"] == 4 and r["failures"] == 0 for r in rows[1:])
    # from round 2 on each reply also carries the node's five evaluation sums of x-bar^(t-1)
    assert [r["bytes_up_train"] for r in rows[1:]] == [4 * MCLR_BYTES] + [4 * MCLR_BYTES + 160] * 4
    assert rows[-1]["test_accuracy"] > rows[0]["test_accuracy"] + 0.3
    assert rows[-1]["train_loss"] < rows[1]["train_loss"]
    constraint = make_constraint(kind, radius)
    xbar = last_xbar(grid)
    assert all(constraint.contains(p) for p in xbar)
    assert any(constraint.norm(p) > 0.999 * radius for p in xbar)  # the constraint is active
    assert_xbar_is_projected_mean(grid, [state_of(grid, n) for n in grid.node_ids], constraint)


def test_partial_participation_averages_over_all_nodes(tmp_path):
    grid, rows = run_dr(
        tmp_path, num_nodes=6, **{"feddr.participation": 0.5, "num-server-rounds": 6}
    )
    assert [r["participants"] for r in rows[1:]] == [3] * 6
    assert rows[-1]["test_accuracy"] > rows[0]["test_accuracy"] + 0.3
    first_train = next(m for m in grid.down if m.metadata.message_type == "train")
    x0 = [a.numpy() for a in first_train.content["xbar"].values()]
    late_starters = 0
    for node in grid.node_ids:
        first = train_messages(grid, node)[0]
        # a node first sampled after round 1 starts its DR iteration at x^0, sent as "xhat"
        if first.content["config"]["server-round"] > 1:
            late_starters += 1
            assert sync_value(first.content["config"]) == "xhat"
            for sent, start in zip(first.content["xhat"].values(), x0):
                np.testing.assert_array_equal(sent.numpy(), start)
    assert late_starters > 0
    assert_xbar_is_projected_mean(
        grid, [state_of(grid, n) for n in grid.node_ids], make_constraint("l1", 10.0)
    )


@pytest.mark.parametrize("fault", ["nan", "shape"])
def test_a_bad_reply_is_dropped_and_the_node_resumes(tmp_path, monkeypatch, caplog, fault):
    """Node 0 sends a bad x_hat in round 2: dropped, counted; it drops its pending step."""

    def faulty(job):
        reply = feddr.train(job)
        if job.data.partition_id == 0 and job.content["config"]["server-round"] == 2:
            bad = {
                "nan": lambda a: np.full(a.shape, np.nan, np.float32),
                "shape": lambda a: np.zeros(a.shape + (2,), np.float32),
            }[fault]
            reply["xhat"] = ArrayRecord(
                {k: Array(bad(v.numpy())) for k, v in reply["xhat"].items()}
            )
        return reply

    monkeypatch.setitem(handlers_for("feddr"), "train", faulty)
    caplog.set_level(logging.WARNING, logger="flwr")
    grid, rows = run_dr(tmp_path)
    # round 1's evaluation by node 0 rode on that reply (eval-with-train) and went with it
    assert [r["failures"] for r in rows[1:]] == [1, 1, 0, 0, 0]
    assert [r["participants"] for r in rows[1:]] == [4, 3, 4, 4, 4]
    reason = {"nan": "contains NaN", "shape": "shape"}[fault]
    assert any(
        f"dropped the reply of node {grid.node_ids[0]}" in r.getMessage()
        and reason in r.getMessage()
        for r in caplog.records
    )
    assert [last_accepted(m.content["config"]) for m in train_messages(grid, grid.node_ids[0])] == [
        0,
        1,
        1,
        3,
        4,
    ]
    assert rows[-1]["test_accuracy"] > rows[0]["test_accuracy"] + 0.3
    assert_xbar_is_projected_mean(
        grid, [state_of(grid, n) for n in grid.node_ids], make_constraint("l1", 10.0)
    )


def test_a_node_that_lost_its_state_restarts_at_its_last_accepted_x_hat(tmp_path):
    """Node 1 forgets everything before round 3; it fails once, then is sent its x_hat_i."""
    sent_by_node_1 = {}

    def forgetful(message, context):
        is_node_1 = context.node_config["partition-id"] == 1
        is_train = message.metadata.message_type == "train"
        server_round = message.content["config"]["server-round"] if is_train else None
        if is_node_1 and is_train and server_round == 3:
            for key in list(context.state.keys()):
                del context.state[key]
        reply = unpacked(client_app(message, context))  # its arrays as sent
        if is_node_1 and is_train and not reply.has_error():
            sent_by_node_1[server_round] = [a.numpy() for a in reply.content["xhat"].values()]
        return reply

    grid, rows = run_dr(tmp_path, client=forgetful)
    # its round-3 answer is an error: round 2's evaluation, which rode on it, fails with it
    assert [r["failures"] for r in rows[1:]] == [0, 1, 1, 0, 0]
    messages = train_messages(grid, grid.node_ids[1])
    assert [sync_value(m.content["config"]) for m in messages] == [
        "xbar",
        "none",
        "none",
        "xhat",
        "none",
    ]
    # it restarts at the x_hat the server accepted from it in round 2
    assert last_accepted(messages[3].content["config"]) == 2
    for resent, accepted in zip(messages[3].content["xhat"].values(), sent_by_node_1[2]):
        np.testing.assert_array_equal(resent.numpy(), accepted)
    assert_xbar_is_projected_mean(
        grid, [state_of(grid, n) for n in grid.node_ids], make_constraint("l1", 10.0)
    )


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"feddr.alpha": 2.0}, "feddr.alpha=2.0 is not valid; it must be in (0, 2)"),
        ({"feddr.eta": 0.0}, "feddr.eta=0.0 is not valid"),
        ({"feddr.local-steps": 0}, "feddr.local-steps=0 is not valid"),
        ({"feddr.lr": -1.0}, "feddr.lr=-1.0 is not valid"),
        ({"feddr.batch-size": -1}, "feddr.batch-size=-1 is not valid"),
        ({"feddr.participation": 0.0}, "feddr.participation=0.0 is not valid"),
        ({"fedfw.constraint": "l3"}, "fedfw.constraint='l3' is not valid"),
    ],
)
def test_bad_feddr_config_stops_before_training(tmp_path, caplog, overrides, fragment):
    caplog.set_level(logging.ERROR, logger="flwr")
    with pytest.raises(InvalidRunConfig):
        run_dr(tmp_path, **overrides)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and fragment in errors[0], errors
