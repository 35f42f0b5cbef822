"""FedFun family end to end on the in-process grid: the relay, learning, sync, checked replies."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord

from client_app.app import app as client_app
from client_app.fedfun import bounds
from functions.node_models import ModelLimits, decode_node_model
from functions.params import record_to_arrays
from functions.protocol import (
    BOUNDS,
    METRICS,
    MODEL_ARRAYS,
    MODELS,
    NEIGHBOURS,
    OWN_PREFIX,
    TRAIN_EXAMPLES,
    neighbour_prefix,
)
from oracles.graphs import make_graph
from run_config.common import RunSettings
from server_app.app import InvalidRunConfig
from server_app.checkpoint import read_checkpoint
from strategies.registry import strategy_for
from testing.inprocess_grid import run_config
from tests.helpers import forgetting, run_app

FAST = {
    "algorithm": "fedfun",
    "task": "wine",
    "partitioning": "kmeans",
    "fedfun.initial-steps": 400,
    "fedfun.local-steps": 60,
    "fedfun.penalty-samples": 200,
    "fedfun.hidden": "16,16",
    "central-evaluation": False,
}


def messages_to(run, node: int, kind: str) -> list:
    return [
        m
        for m in run.grid.down
        if m.metadata.message_type == kind and m.metadata.dst_node_id == node
    ]


def vertex_of(run, node: int) -> int:
    return run.grid.contexts[node].node_config["partition-id"]


def coarse(ends: np.ndarray) -> bool:
    """Whether every value is 0 or a signed power of two."""
    return bool(np.all((ends == 0) | (np.abs(np.frexp(ends)[0]) == 0.5)))


def sent_vertices(message) -> set[int]:
    """The neighbours whose models a message carries."""
    return {
        int(key[1:].split("/")[0])
        for key in message.content[MODELS]
        if key.startswith("p") and key.endswith("/kind")
    }


@pytest.mark.parametrize("rides", [True, False])
def test_the_relay_sends_each_node_exactly_its_neighbours_changed_models(tmp_path, rides):
    """Each round's new models reach a node once: with the next round's train message (its
    evaluation riding on it, ``eval-with-train``) or with the round's evaluate message."""
    run = run_app(
        tmp_path,
        5,
        **{
            **FAST,
            "task": "digits",
            "partitioning": "iid",
            "num-server-rounds": 3,
            "fedfun.initial-steps": 30,
            "fedfun.local-steps": 10,
            "eval-with-train": rides,
        },
    )
    graph = make_graph("ring", 5, 0)
    for node in run.grid.node_ids:
        neighbours = set(graph.neighbours(vertex_of(run, node)))
        train, evaluate = messages_to(run, node, "train"), messages_to(run, node, "evaluate")
        # round 0 and rounds 1-3; an evaluate exchange after round 3 only, or after each
        assert len(train) == 4 and len(evaluate) == (1 if rides else 3)
        assert sent_vertices(train[0]) == set() and not train[0].content[NEIGHBOURS]["ids"]
        box = record_to_arrays(train[0].content[BOUNDS])  # the agreed domain: coarse ends
        assert coarse(box["lower"]) and coarse(box["upper"])
        assert sent_vertices(train[1]) == neighbours  # the h^0 of every neighbour
        carriers = [*train[2:], *evaluate] if rides else evaluate
        for message in carriers:  # each round's new models
            assert sent_vertices(message) == neighbours
            assert set(message.content[NEIGHBOURS]["ids"]) == neighbours
        for message in [] if rides else train[2:]:  # already delivered: nothing sent twice
            assert sent_vertices(message) == set()
    rows = run.rows
    assert all(r["failures"] == 0 for r in rows[1:])
    assert all(
        0.0 <= r["test_accuracy_min"] <= r["test_accuracy_mean"] <= r["test_accuracy_max"] <= 1.0
        for r in rows[1:]
    )


def test_a_node_states_its_ranges_as_the_powers_of_two_just_outside_them():
    """query.bounds: each feature's range widened to 0 or signed powers of two, neither end
    touching it (no end is a row's value, not even a value that is itself a power of two)."""
    x = np.array([[-1.5, 0.0, 4.0, 3.0, 1e-12], [0.3, 2.0, 7.9, 3.0, 1e-12]], np.float32)
    reply = bounds(SimpleNamespace(data=SimpleNamespace(x_train=x)))
    box = record_to_arrays(reply[BOUNDS])
    tiny = 2.0**-30
    assert box["lower"].tolist() == [-2.0, -tiny, 2.0, 2.0, 0.0]
    assert box["upper"].tolist() == [0.5, 4.0, 8.0, 4.0, tiny]
    assert box["lower"].dtype == np.float64 and coarse(box["lower"]) and coarse(box["upper"])
    assert np.all(box["lower"] < x.min(axis=0)) and np.all(x.max(axis=0) < box["upper"])
    assert reply[METRICS][TRAIN_EXAMPLES] == 2


def test_without_federated_evaluation_train_messages_carry_the_changed_models(tmp_path):
    run = run_app(
        tmp_path,
        3,
        **{**FAST, "num-server-rounds": 2, "fedfun.federated-eval": False, "partitioning": "iid"},
    )
    graph = make_graph("ring", 3, 0)
    for node in run.grid.node_ids:
        train = messages_to(run, node, "train")
        assert all(
            sent_vertices(m) == set(graph.neighbours(vertex_of(run, node))) for m in train[1:]
        )


@pytest.mark.e2e
def test_fsr_network_on_wine_learns_and_neighbours_agree(tmp_path):
    rows = run_app(
        tmp_path,
        2,
        **{**FAST, "num-server-rounds": 5, "fedfun.initial-steps": 1000, "fedfun.local-steps": 200},
    ).rows
    assert rows[-1]["test_accuracy_mean"] > 0.85
    assert rows[-1]["consensus_distance"] < rows[1]["consensus_distance"]
    assert rows[-1]["bytes_down"] > 0 and rows[-1]["bytes_up"] > 0


def test_fsr_trees_on_wine(tmp_path):
    rows = run_app(
        tmp_path,
        2,
        **{**FAST, "fedfun.learner": "tree", "fedfun.delta": 0.1, "num-server-rounds": 3},
    ).rows
    assert rows[-1]["test_accuracy_mean"] > 0.65
    distances = [r["consensus_distance"] for r in rows[1:]]
    assert distances == sorted(distances, reverse=True) and distances[-1] < distances[0] / 2


def test_a_tree_node_and_network_nodes_are_neighbours(tmp_path):
    configs = [{"fedfun-learner": "tree"}, {"fedfun-hidden": "8"}, {}]
    run = run_app(
        tmp_path,
        3,
        configs,
        **{**FAST, "fedfun.delta": 0.1, "num-server-rounds": 2, "partitioning": "iid"},
    )
    limits = ModelLimits(13, 3)
    kinds = {}
    for node in run.grid.node_ids:
        message = messages_to(run, node, "evaluate")[-1]
        config, arrays = (
            dict(message.content[MODELS]),
            record_to_arrays(message.content[MODEL_ARRAYS]),
        )
        for vertex in sent_vertices(message):
            model = decode_node_model(config, arrays, neighbour_prefix(vertex), limits)
            kinds[vertex] = (model.kind, getattr(model.function, "spec", None))
    assert kinds[0][0] == "kddt" and kinds[1][1].sizes == (13, 8, 3)
    assert kinds[2][1].sizes == (13, 16, 16, 3)
    assert all(r["failures"] == 0 for r in run.rows[1:])
    assert run.rows[-1]["test_accuracy_min"] > 0.5


@pytest.mark.parametrize("algorithm", ["psr", "dfedavgm", "dfedfish", "dfeddf"])
@pytest.mark.e2e
def test_the_baselines_run_on_the_relay(tmp_path, algorithm):
    """Each baseline learns on the relay: in 3 rounds, as DFedAvgM's SGD needs a third on the
    agreed box (its powers of two leave the data part of the unit cube)."""
    rows = run_app(
        tmp_path,
        3,
        **{
            **FAST,
            "algorithm": algorithm,
            "partitioning": "iid",
            "num-server-rounds": 3,
            "fedfun.distill-steps": 10,
        },
    ).rows
    assert all(r["failures"] == 0 and r["participants"] == 3 for r in rows[1:])
    assert rows[-1]["test_accuracy_mean"] > 0.5


@pytest.mark.e2e
def test_a_node_that_lost_its_state_gets_everything_again(tmp_path):
    client = forgetting(client_app, partition_id=1, server_round=2)
    run = run_app(
        tmp_path, 3, None, client, **{**FAST, "num-server-rounds": 3, "partitioning": "iid"}
    )
    rows = run.rows
    # its round-2 train reply is an error, and with it the evaluation of round 1 riding on it
    assert [r["failures"] for r in rows[1:]] == [1, 1, 0]
    assert rows[2]["participants"] == 2 and rows[3]["participants"] == 3
    node = next(n for n in run.grid.node_ids if vertex_of(run, n) == 1)
    resent = messages_to(run, node, "train")[3]  # the first message after its error
    assert OWN_PREFIX + "kind" in resent.content[MODELS]
    assert sent_vertices(resent) == {0, 2} and "fedfun.setup" in resent.content


def test_a_malformed_model_is_dropped_and_never_relayed(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="flwr")

    def poisoning(message, context):
        reply = client_app(message, context)
        if (
            context.node_config["partition-id"] == 0
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == 1
        ):
            models = reply.content[MODELS]
            models["self/sizes"] = [13, 5, 3]  # the arrays no longer fit the spec
        return reply

    run = run_app(
        tmp_path, 3, None, poisoning, **{**FAST, "num-server-rounds": 2, "partitioning": "iid"}
    )
    assert run.rows[1]["failures"] == 1 and run.rows[2]["failures"] == 0
    for node in run.grid.node_ids:
        # after round 1: the train message of round 2 (round 1's evaluation rides on it)
        for message in messages_to(run, node, "train")[2:3]:
            listing = message.content[NEIGHBOURS]
            versions = dict(zip(listing["ids"], listing["versions"]))
            assert versions.get(0, 0) == 0  # partition 0's round-0 model is still relayed


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"fedfun.topology": "edges", "fedfun.edges": "0-1,1-7"}, "7"),
        ({"fedfun.topology": "edges", "fedfun.edges": "0-1,2-3"}, "components"),
        ({"fedfun.learner": "tree", "algorithm": "psr"}, "mlp"),
        ({"fedfun.topology": "circle"}, "fedfun.topology"),
        ({"task": "diabetes"}, "classification"),
    ],
)
def test_bad_graphs_and_settings_stop_before_training(tmp_path, overrides, reason):
    with pytest.raises(InvalidRunConfig, match=reason):
        run_app(tmp_path, 4, **{**FAST, **overrides})


@pytest.mark.e2e
def test_the_checkpoint_restores_the_relay(tmp_path):
    run = run_app(tmp_path, 3, **{**FAST, "num-server-rounds": 2, "partitioning": "iid"})
    state = read_checkpoint(run.out_dir).strategy
    strategy = strategy_for(RunSettings.from_run_config(run_config(**FAST)))
    strategy.load_state_record(state)
    again = strategy.state_record()
    assert sorted(again.keys()) == sorted(state.keys())
    for key in state:
        if isinstance(state[key], ConfigRecord):
            assert dict(again[key]) == dict(state[key])
        else:
            a, b = record_to_arrays(again[key]), record_to_arrays(state[key])
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_the_graphs_constants_are_computed_once_per_run(tmp_path, monkeypatch):
    """||L|| enters every message (gamma): its eigenvalues are computed once per run, not once
    per message (O(N^3) each, minutes a round at N = 1,000)."""
    shapes = []
    eigvalsh = np.linalg.eigvalsh

    def counted(matrix, *args, **kwargs):
        shapes.append(matrix.shape)
        return eigvalsh(matrix, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "eigvalsh", counted)
    run = run_app(tmp_path, 6, **{**FAST, "num-server-rounds": 3})
    assert len(run.rows) == 4 and shapes == [(6, 6)]
