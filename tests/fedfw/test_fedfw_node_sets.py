"""FedFW with per-node sets D_i (section 4.3): fw_gap is measured over D = the intersection of the
D_i when one D_i lies inside all the others, and is left out when none does."""

from __future__ import annotations

import numpy as np
import pytest

from oracles.frank_wolfe import fw_gap
from oracles.lmo import make_constraint
from oracles.torch_grad import loss_and_grad
from run_config.common import RunSettings
from tasks.federation import local_data
from tasks.models import model_for
from testing.inprocess_grid import run_config
from tests.helpers import last_xbar, run_app

NUM_NODES = 4
RUN = {
    "algorithm": "fedfw",
    "task": "synthetic",
    "num-server-rounds": 4,
    "fedfw.gap": True,
    "fedfw.downlink": "dense",
}  # the gap is recomputed at the dense x-bar sent


def node_set(kind: str, radius: float) -> dict:
    return {"fedfw.constraint": kind, "fedfw.radius": radius}


def run_with_sets(tmp_path, node_configs, **overrides):
    return run_app(tmp_path, NUM_NODES, node_configs, **{**RUN, **overrides})


def gap_at_last_xbar(run, overrides: dict, kind: str, radius: float) -> float:
    """fw_gap over ``kind(radius)`` at the x-bar the server evaluated last, from each node's
    gradient on its own training partition (as a node computes and sends it, float32)."""
    settings = RunSettings.from_run_config(run_config(**{**RUN, **overrides}))
    xbar = last_xbar(run.grid)
    grads = []
    for partition_id in range(NUM_NODES):
        data = local_data(settings.data, partition_id, NUM_NODES)
        model = model_for(settings.model, data.task, settings.seed)
        params = [x.astype(np.float32) for x in xbar]
        _, grad = loss_and_grad(model, params, data.x_train, data.y_train, data.task.kind)
        grads.append([g.astype(np.float32).astype(np.float64) for g in grad])
    return fw_gap(grads, xbar, make_constraint(kind, radius), "per-tensor", NUM_NODES)


def test_gap_is_over_the_nodes_l2_ball_not_the_runs_l1_ball(tmp_path):
    overrides = {"fedfw.constraint": "l1", "fedfw.radius": 10.0}
    run = run_with_sets(tmp_path, [node_set("l2", 10.0)] * NUM_NODES, **overrides)
    rows = run.rows
    assert all(r["failures"] == 0 for r in rows[1:])
    assert all("fw_gap" in r for r in rows[1:])
    reported = rows[-1]["fw_gap"]
    over_l2 = gap_at_last_xbar(run, overrides, "l2", 10.0)
    over_l1 = gap_at_last_xbar(run, overrides, "l1", 10.0)
    assert reported == pytest.approx(over_l2, rel=1e-6)
    assert over_l1 != pytest.approx(over_l2, rel=1e-3)
    assert reported != pytest.approx(over_l1, rel=1e-3)
    # nodes stepped towards dense l2 points: x-bar is no longer in the run's l1 ball
    xbar = last_xbar(run.grid)
    assert make_constraint("l2", 10.0).contains(xbar[0])
    assert not make_constraint("l1", 10.0).contains(xbar[0])


def test_gap_is_over_the_l1_ball_inside_the_l2_balls(tmp_path):
    overrides = {"fedfw.constraint": "l2", "fedfw.radius": 10.0}
    sets = [node_set("l1", 10.0)] + [node_set("l2", 10.0)] * (NUM_NODES - 1)
    run = run_with_sets(tmp_path, sets, **overrides)
    rows = run.rows
    assert all(r["failures"] == 0 for r in rows[1:])
    reported = rows[-1]["fw_gap"]
    over_l1 = gap_at_last_xbar(run, overrides, "l1", 10.0)
    over_l2 = gap_at_last_xbar(run, overrides, "l2", 10.0)
    assert reported == pytest.approx(over_l1, rel=1e-6)
    assert reported != pytest.approx(over_l2, rel=1e-3)


def test_no_gap_when_no_node_set_lies_inside_the_others(tmp_path):
    """l1(10) and box(1) on the 60x10 MCLR weight: neither contains the other."""
    sets = [node_set("l1", 10.0), node_set("box", 1.0), node_set("l1", 10.0), node_set("box", 1.0)]
    run = run_with_sets(tmp_path, sets)
    rows = run.rows
    assert len(rows) == RUN["num-server-rounds"] + 1
    assert all("fw_gap" not in r for r in rows)
    assert all(r["failures"] == 0 for r in rows[1:])
    assert all(r["participants"] == NUM_NODES for r in rows[1:])
    assert all(np.isfinite(r["train_loss"]) for r in rows[1:])
