"""FedFW and FedDR with ``secure-aggregation=true`` (in-process engine): each node sends the change
of what it holds (x_i, x_hat_i) into a secure sum and the server keeps their running sum
(``strategies.held_sum``). The run follows the plain run, whose server holds every node's vector,
to float tolerance (partial participation, a local pass, a node missing a round); no reply the
ServerApp receives holds a node's point, x_hat_i or change; and after a node lost its state (a
restarted SuperNode, a resumed run) every node restarts at x-bar, so the server's x-bar stays the
mean of what the nodes hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message

from client_app.app import app as client_app
from client_app.feddr import STORE as FEDDR_STORE
from client_app.fedfw import STORE as FEDFW_STORE
from functions.acceptance import sync_value
from functions.protocol import DR_XHAT, FW_POINT, HELD_CHANGE, SYNC_NONE, TRAIN
from oracles.douglas_rachford import project_params
from run_config.common import RunSettings
from run_config.fedfw import constraint_set, fedfw_settings
from server_app.app import run
from server_app.checkpoint import read_checkpoint
from tasks.errors import ConfigError
from testing.inprocess_grid import LocalGrid, round_of, run_config, server_context
from testing.recording_grid import RecordingGrid
from tests.helpers import RUN_NAME
from tests.lifecycle.test_checkpoints import crashed_before

NODES, ROUNDS = 6, 5
SMALL = {"task": "synthetic", "num-server-rounds": ROUNDS, "fedfw.radius": 5.0}
CASES = {
    "fedfw": {"algorithm": "fedfw"},
    "fedfw-plus-pass": {
        "algorithm": "fedfw-plus",
        "fedfw.participation": 0.7,
        "fedfw.local-pass": True,
        "fedfw.batch-size": 64,
    },
    "fedfw-sto-sampled": {"algorithm": "fedfw-sto", "fedfw.participation": 0.7},
    "feddr": {"algorithm": "feddr", "feddr.participation": 0.7},
    # eta_1 = 1: a change as large as the set allows (0.1 is not a float32)
    "fedfw-one-round": {"algorithm": "fedfw", "num-server-rounds": 1, "fedfw.radius": 0.1},
}
SECURE = {"secure-aggregation": True}


def config_for(out: Path, case: str, **extra) -> dict:
    return run_config(
        **{"output-dir": str(out), "run-name": RUN_NAME, **SMALL, **CASES[case], **extra}
    )


def warnings_of(out: Path) -> list[str]:
    return json.loads((out / RUN_NAME / "config.json").read_text())["outcome"]["warnings"]


def rows_of(out: Path) -> list[dict]:
    return json.loads((out / RUN_NAME / "metrics.json").read_text())["rounds"]


def missing(partition: int, server_round: int):
    """A ClientApp whose node of ``partition`` fails its train message of ``server_round``."""

    def app(message, context):
        if (
            context.node_config["partition-id"] == partition
            and message.metadata.message_type == TRAIN
            and round_of(message) == server_round
        ):
            raise RuntimeError("the node is gone for a round")
        return client_app(message, context)

    return app


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_secure_run_follows_the_plain_one_and_the_server_reads_no_node_s_vector(tmp_path, case):
    runs = {}
    for name, extra in (("plain", {}), ("secure", SECURE)):
        config = config_for(tmp_path / name, case, **extra)
        grid = RecordingGrid(LocalGrid(missing(1, 3), config, NODES))
        run(grid, server_context(config))
        runs[name] = (grid, rows_of(tmp_path / name))
    plain, secure = runs["plain"][1], runs["secure"][1]
    assert [r["participants"] for r in secure[1:]] == [r["participants"] for r in plain[1:]]
    assert min(r["participants"] for r in secure[1:]) >= 2  # a sum of one node is refused
    assert [r["failures"] for r in secure] == [r["failures"] for r in plain]
    assert case != "fedfw" or secure[3]["failures"] == 1  # partition 1 missed round 3
    for p, s in zip(plain, secure):
        assert p.keys() - {"consensus_distance"} <= s.keys()  # no x_i: no distance
        for key in {"train_loss", "test_loss"} & p.keys():
            assert s[key] == pytest.approx(p[key], rel=1e-7, abs=1e-10), (s["round"], key)
    for reply in filter(Message.has_content, runs["secure"][0].replies(TRAIN)):
        assert not {FW_POINT, DR_XHAT, HELD_CHANGE} & set(reply.content.keys())


def mean_held(grid: LocalGrid, config: dict, case: str) -> tuple[list, list]:
    """The checkpoint's x-bar, and what it must be from the vectors the roster's nodes hold
    (their committed steps by the book's last accepted rounds): their mean (FedFW), its
    projection onto D (FedDR)."""
    state = read_checkpoint(Path(config["output-dir"]) / RUN_NAME).strategy
    book = state["book"]
    nodes = [int(n) for n in book["node-ids"]]
    store, field = (FEDDR_STORE, "x_hat") if case == "feddr" else (FEDFW_STORE, "x")
    held = []
    for node, accepted in zip(nodes, book["last-accepted"]):
        records = store.resolve(grid.contexts[node].state, accepted)
        held.append([a.numpy() for a in records[field].values()])
    mean = [np.mean([h[k] for h in held], axis=0) for k in range(len(held[0]))]
    if case == "feddr":
        domain = constraint_set(RunSettings.from_run_config(config))
        mean = project_params(domain.constraint, mean, domain.scope)
    xbar = [a.numpy() for a in state["xbar"].values()]
    return xbar, mean


@pytest.mark.parametrize("case", ["fedfw-plus-pass", "feddr"])
def test_a_node_that_lost_its_state_restarts_every_node_at_x_bar(tmp_path, case):
    """Partition 2's node is gone from round 3 and a restarted SuperNode (a new id, no state)
    serves it from round 4: every node's next train message carries a restart point, and at
    the end x-bar is still what the nodes hold."""
    config = config_for(tmp_path, case, **SECURE)
    grid = LocalGrid(client_app, config, NODES)
    old = grid.partition_node(2)
    grid.leave(old, from_round=3)
    new = grid.join(2, from_round=4)
    run(grid, server_context(config))
    rows = rows_of(tmp_path)
    assert len(rows) == ROUNDS + 1 and all(np.isfinite(r["test_loss"]) for r in rows)
    first = {}
    for message in grid.down:
        node = message.metadata.dst_node_id
        if message.metadata.message_type == TRAIN and round_of(message) >= 4:
            first.setdefault(node, sync_value(message.content["config"]))
    assert new in first and all(sync != SYNC_NONE for sync in first.values())
    held = "x_i" if case.startswith("fedfw") else "x_hat_i"
    assert warnings_of(tmp_path) == [
        f"round 4: node {old} lost its {held}; every node restarts at x-bar"
    ]
    xbar, mean = mean_held(grid, config, case)
    for a, b in zip(xbar, mean):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_a_resumed_secure_run_restarts_at_x_bar_and_keeps_x_bar_the_nodes_mean(tmp_path):
    config = config_for(tmp_path, "fedfw-plus-pass", **SECURE)
    grid = crashed_before(config, 3, NODES)
    run(grid, server_context(config), resume_from=tmp_path / RUN_NAME)
    assert len(rows_of(tmp_path)) == ROUNDS + 1
    restarts = [m for m in grid.down if m.metadata.message_type == TRAIN and round_of(m) == 3]
    assert restarts and all(sync_value(m.content["config"]) != SYNC_NONE for m in restarts)
    assert warnings_of(tmp_path) == [
        f"round 3: node {node} lost its x_i; every node restarts at x-bar" for node in grid.node_ids
    ]
    xbar, mean = mean_held(grid, config, "fedfw-plus-pass")
    for a, b in zip(xbar, mean):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_secure_fedfw_refuses_what_would_send_a_node_s_vector_in_plain():
    for key, value, words in (
        ("fedfw.gap", True, "false with secure-aggregation"),
        ("fedfw.downlink", "compact", "'dense' or 'auto' with secure-aggregation"),
    ):
        settings = RunSettings.from_run_config(
            run_config(**{"algorithm": "fedfw", "task": "synthetic", key: value, **SECURE})
        )
        with pytest.raises(ConfigError, match=words):
            fedfw_settings(settings)


def test_a_round_without_a_secure_sum_is_a_warning_of_the_run(tmp_path):
    """Two nodes, one of them gone in round 2: a sum of one node would be that node's own, so
    the round has no secure sum; the run goes on, and its outcome says which round lost its
    sum and why."""
    config = config_for(tmp_path, "fedfw", **SECURE)
    run(LocalGrid(missing(1, 2), config, 2), server_context(config))
    ended = json.loads((tmp_path / RUN_NAME / "config.json").read_text())["outcome"]
    assert [w.split(":")[0] for w in ended["warnings"]] == ["round 2"]
    assert "no secure sum: only 1 node(s)" in ended["warnings"][0]
    assert ended["status"] == "completed" and ", 1 warning," in ended["line"]
