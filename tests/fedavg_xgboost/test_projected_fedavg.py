"""Projected FedAvg end to end on the in-process grid: every global model is proj_D(mean), in D."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from client_app import fedavg
from client_app.app import app as client_app
from client_app.registry import handlers_for
from oracles.douglas_rachford import project_params
from oracles.lmo import make_constraint
from server_app.app import InvalidRunConfig
from server_app.packed_grid import unpacked
from tests.helpers import run_app

# federated evaluation sends the final model, so it can be checked too
FAST = {
    "task": "synthetic",
    "algorithm": "fedavg-proj",
    "num-server-rounds": 5,
    "central-evaluation": False,
    "local-epochs": 0,
    "local-steps": 5,
    "learning-rate": 0.03,
}


def run_pavg(tmp_path, num_nodes=4, **overrides):
    """Run the job; also return what the nodes replied to each train round (model, weight)."""
    replies: dict[int, list[tuple[list[np.ndarray], float]]] = {}

    def recording(message, context):
        reply = unpacked(client_app(message, context))  # its arrays as sent
        if message.metadata.message_type == "train" and not reply.has_error():
            arrays = [a.numpy() for a in reply.content["arrays"].values()]
            weight = reply.content["metrics"]["num-examples"]
            replies.setdefault(message.content["config"]["server-round"], []).append(
                (arrays, weight)
            )
        return reply

    run = run_app(tmp_path, num_nodes, client=recording, **{**FAST, **overrides})
    return run.grid, run.rows, replies


def global_models(grid) -> list[list[np.ndarray]]:
    """x^0, ..., x^T: the model each train round started from (its first train message, by
    ``server-round``), then the one evaluated last."""
    starts = {}
    for m in grid.down:
        if m.metadata.message_type == "train":
            starts.setdefault(m.content["config"]["server-round"], m.content["arrays"])
    starts = [starts[t] for t in sorted(starts)]
    final = [m for m in grid.down if m.metadata.message_type == "evaluate"][-1].content["arrays"]
    return [[a.numpy().astype(np.float64) for a in r.values()] for r in starts + [final]]


@pytest.mark.parametrize(("kind", "radius"), [("l1", 10.0), ("l2", 2.0)])
def test_every_global_model_is_the_projected_weighted_mean(tmp_path, kind, radius):
    grid, rows, replies = run_pavg(tmp_path, **{"fedfw.constraint": kind, "fedfw.radius": radius})
    assert all(r["participants"] == 4 and r["failures"] == 0 for r in rows[1:])
    assert rows[-1]["test_accuracy"] > rows[1]["test_accuracy"] + 0.1
    assert rows[-1]["train_loss"] < rows[1]["train_loss"]
    constraint = make_constraint(kind, radius)
    models = global_models(grid)
    assert len(models) == 6
    assert all(constraint.contains(p) for model in models for p in model)
    for t, model in enumerate(models[1:], start=1):
        weights = np.array([w for _, w in replies[t]], dtype=np.float64)
        mean = [
            sum(w * x[k] for (x, _), w in zip(replies[t], weights)) / weights.sum()
            for k in range(len(model))
        ]
        for expected, got in zip(project_params(constraint, mean), model):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert any(constraint.norm(p) > 0.999 * radius for p in models[-1])  # the constraint is active


@pytest.mark.parametrize("fault", ["nan", "shape"])
def test_a_bad_model_is_dropped_counted_and_the_run_goes_on(tmp_path, monkeypatch, caplog, fault):
    def faulty(job):
        reply = fedavg.train(job)
        if job.data.partition_id == 0:
            bad = {
                "nan": lambda a: np.full(a.shape, np.nan, np.float32),
                "shape": lambda a: np.zeros(a.shape[::-1] + (1,), np.float32),
            }[fault]
            reply["arrays"] = ArrayRecord(
                {k: Array(bad(v.numpy())) for k, v in reply["arrays"].items()}
            )
        return reply

    monkeypatch.setitem(handlers_for("fedavg-proj"), "train", faulty)
    caplog.set_level(logging.WARNING, logger="flwr")
    grid, rows, _ = run_pavg(tmp_path, **{"fedfw.constraint": "l1"})
    # node 0's bad training reply each round; its evaluation of rounds 1-4 rode on the next
    # round's reply and is lost with it (a reply is one reply), round 5's has its own exchange
    assert [r["failures"] for r in rows[1:]] == [2] * 4 + [1]
    assert [r["participants"] for r in rows[1:]] == [3] * 5
    reason = {"nan": "contains NaN", "shape": "shape"}[fault]
    assert any(
        f"dropped the reply of node {grid.node_ids[0]}" in r.getMessage()
        and reason in r.getMessage()
        for r in caplog.records
    )
    assert rows[-1]["test_accuracy"] > rows[1]["test_accuracy"] + 0.1
    assert all(make_constraint("l1", 10.0).contains(p) for p in global_models(grid)[-1])


def test_partial_participation_uses_fraction_train(tmp_path):
    _, rows, replies = run_pavg(tmp_path, **{"fraction-train": 0.5})
    assert [r["participants"] for r in rows[1:]] == [2] * 5
    assert [len(replies[t]) for t in range(1, 6)] == [2] * 5
    assert rows[-1]["train_loss"] < rows[1]["train_loss"]


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"fedfw.constraint": "l3"}, "fedfw.constraint='l3' is not valid"),
        ({"fedfw.radius": -1.0}, "fedfw.radius=-1.0 is not valid"),
        ({"fedfw.scope": "rows"}, "fedfw.scope='rows' is not valid"),
        ({"fedfw.constraint": "nuclear", "fedfw.scope": "global"}, "needs fedfw.scope=per-tensor"),
    ],
)
def test_bad_constraint_config_stops_before_training(tmp_path, caplog, overrides, fragment):
    caplog.set_level(logging.ERROR, logger="flwr")
    with pytest.raises(InvalidRunConfig):
        run_pavg(tmp_path, **overrides)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and fragment in errors[0], errors
