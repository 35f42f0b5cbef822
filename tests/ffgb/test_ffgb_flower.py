"""FFGB family end to end on the in-process grid: learning, delta sync, traffic, checked replies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message
from flwr.common.serde import message_from_proto, message_to_proto
from sklearn.tree import DecisionTreeRegressor

from client_app.app import app as client_app
from client_app.ffgb import CACHE, VALUES
from functions.ensembles import Delta, Ensemble, pack_delta, unpack_delta
from functions.networks import NetworkSpec, build
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import CONFIG, DELTA, DELTA_ARRAYS, EVALUATE_FIRST, EVALUATION, SERVER_ROUND
from functions.trees import from_sklearn
from run_config.common import RunSettings
from server_app.app import InvalidRunConfig
from server_app.results import CLOCKS
from strategies.registry import strategy_for
from tasks.federation import local_data
from testing.inprocess_grid import LocalGrid, run_config
from tests.helpers import checkpoint_ensemble, forgetting, run_app, train_messages

FAST = {
    "algorithm": "ffgb",
    "task": "digits",
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 60,
    "ffgb.hidden": 16,
}


def run_ffgb(tmp_path, num_nodes=4, client=client_app, **overrides):
    return run_app(tmp_path, num_nodes, None, client, **{**FAST, **overrides})


def final_ensemble(run) -> Ensemble:
    return checkpoint_ensemble(run.out_dir)


def node_values(run, node: int) -> tuple[int, np.ndarray]:
    state = run.grid.contexts[node].state
    return int(state[CACHE]["version"]), state[VALUES]["train"].numpy()


def node_inputs(run, node: int) -> np.ndarray:
    context = run.grid.contexts[node]
    settings = RunSettings.from_run_config(context.run_config)
    data = local_data(
        settings.data, context.node_config["partition-id"], context.node_config["num-partitions"]
    )
    return data.x_train.reshape(len(data.x_train), -1)


def test_learns_digits_and_counts_models_as_the_paper(tmp_path):
    """N K models a round per node: K up, (N - 1) K down. With its own evaluate exchange a
    round's new learners go down in that round; riding on the next round's training (the
    default), one round later, and the last round's evaluate exchange brings the count level."""
    rows = run_ffgb(tmp_path, **{"num-server-rounds": 3, "eval-with-train": False}).rows
    assert rows[0]["test_accuracy"] == pytest.approx(0.1, abs=0.02)  # f0 = 0
    assert rows[-1]["test_accuracy"] > 0.9
    fused = run_ffgb(tmp_path / "fused", **{"num-server-rounds": 3}).rows
    for t, (row, late) in enumerate(zip(rows[1:], fused[1:], strict=True), 1):
        assert row["failures"] == 0 and row["participants"] == 4
        assert row["ensemble_size"] == t * 4 * 2
        assert row["models_exchanged"] == t * 4 * 2  # N K per round: K up, (N - 1) K down
        assert late["models_exchanged"] == (t * 4 * 2 if t == 3 else t * 4 * 2 - 3 * 2)
        assert row["federated_test_accuracy"] == pytest.approx(row["test_accuracy"])
        assert 0 < row["oracle_error"] < 1


def test_evaluation_with_the_next_round_gives_every_figure_of_its_own_exchange(tmp_path):
    """``eval-with-train`` (the default): no evaluate exchange but the last round's, each
    later train message asks for the last round's evaluation, and every row holds the figures
    of a run with an evaluate exchange a round, bit for bit."""
    config = {"num-server-rounds": 4, "ffgb.mu": 0.05}
    own = run_ffgb(tmp_path / "own", **config, **{"eval-with-train": False})
    fused = run_ffgb(tmp_path / "fused", **config)
    evaluates = [m for m in fused.grid.down if m.metadata.message_type == "evaluate"]
    assert {m.content[CONFIG][SERVER_ROUND] for m in evaluates} == {4}
    trains = [m for m in fused.grid.down if m.metadata.message_type == "train"]
    asked = {
        (m.content[CONFIG][SERVER_ROUND], m.content[CONFIG].get(EVALUATE_FIRST)) for m in trains
    }
    assert asked == {(1, None), (2, True), (3, True), (4, True)}
    moved = {"models_exchanged", "exchanges", *CLOCKS} | {k for k in own.rows[1] if "bytes" in k}
    for row, late in zip(own.rows, fused.rows, strict=True):
        assert "train_loss" in late or late["round"] == 0
        assert {k: v for k, v in row.items() if k not in moved} == {
            k: v for k, v in late.items() if k not in moved
        }
    assert fused.rows[-1]["models_exchanged"] == own.rows[-1]["models_exchanged"]


def test_delta_sync_equals_the_server_function_for_nodes_that_missed_rounds(tmp_path):
    """Half the nodes train each round and nothing else is sent: nodes skip versions."""
    run = run_ffgb(
        tmp_path, **{"num-server-rounds": 6, "fraction-train": 0.5, "ffgb.federated-eval": False}
    )
    ensemble = final_ensemble(run)  # mu = 0: every update has scale 1, so prefixes are exact
    sinces = set()
    for node in run.grid.node_ids:
        version, values = node_values(run, node)
        prefix = Ensemble(
            ensemble.base,
            ensemble.n_features,
            ensemble.learners[:version],
            ensemble.weights[:version],
        )
        np.testing.assert_allclose(values, prefix.predict(node_inputs(run, node)), atol=1e-5)
        sinces |= {m.content[DELTA]["since"] for m in train_messages(run.grid, node)[1:]}
    assert len(sinces) >= 3
    assert all(r["failures"] == 0 and r["participants"] == 2 for r in run.rows[1:])


def test_own_learners_are_not_sent_back_and_mu_rescales_exactly(tmp_path):
    run = run_ffgb(
        tmp_path,
        **{"num-server-rounds": 3, "fraction-train": 0.5, "ffgb.mu": 0.05, "ffgb.eta0": 2.0},
    )
    for row in run.rows[1:]:  # every node's federated evaluation uses its delta-synced values
        assert row["federated_test_accuracy"] == pytest.approx(row["test_accuracy"], abs=1e-9)
        assert row["federated_test_loss"] == pytest.approx(row["test_loss"], rel=1e-6)
    ensemble = final_ensemble(run)
    for node in run.grid.node_ids:
        version, values = node_values(run, node)
        assert version == ensemble.version
        np.testing.assert_allclose(values, ensemble.predict(node_inputs(run, node)), atol=1e-5)
    evaluates = [m for m in run.grid.down if m.metadata.message_type == "evaluate"]
    assert any(m.content[DELTA]["own_count"] == 2 for m in evaluates)


def test_a_shared_downlink_learns_the_same_function_sending_each_node_its_own_learners_too(
    tmp_path,
):
    """``ffgb.downlink='shared'``: one delta per round and version, the same records in every
    message, own learners included; the function learnt equals the per-node downlink's to
    rounding, and every node holds the server's f."""
    common = {
        "num-server-rounds": 3,
        "fraction-train": 0.5,
        "ffgb.learner": "tree",
        "ffgb.local-steps": 2,
    }
    per_node = run_ffgb(tmp_path / "a", **common, **{"ffgb.downlink": "per-node"})
    shared = run_ffgb(tmp_path / "b", **common, **{"ffgb.downlink": "shared"})
    for a, b in zip(per_node.rows[1:], shared.rows[1:], strict=True):
        assert b["test_loss"] == pytest.approx(a["test_loss"], rel=1e-9)
        assert b["federated_test_loss"] == pytest.approx(b["test_loss"], rel=1e-6)
        assert b["bytes_down"] > a["bytes_down"]  # each node's own learners travel back
    evaluates = [m for m in shared.grid.down if m.metadata.message_type == "evaluate"]
    assert all(m.content[DELTA]["own_count"] == 0 for m in evaluates)
    by_round: dict[str, set[int]] = {}
    for m in evaluates:
        by_round.setdefault(m.metadata.group_id, set()).add(id(m.content[DELTA_ARRAYS]))
    # round 1: the nodes that trained hold version 0, the others nothing (the whole ensemble)
    assert [len(by_round[r]) for r in ("1", "2", "3")] == [2, 1, 1]
    ensemble = final_ensemble(shared)
    for node in shared.grid.node_ids:
        version, values = node_values(shared, node)
        assert version == ensemble.version
        np.testing.assert_allclose(values, ensemble.predict(node_inputs(shared, node)), atol=1e-5)


@pytest.mark.parametrize(
    ("with_train", "expected"),
    [
        (False, [True, False, False, False, False, True, False, False]),  # train, evaluate
        (True, [True, False, False, True, False]),  # trains, the last round's evaluate
    ],
)
def test_a_node_that_lost_its_state_fails_once_and_gets_everything(tmp_path, with_train, expected):
    """Its state is wiped before round 3's training, which fails (with the evaluation riding on
    it, round 2's evaluation fails with it: both rounds count the failure) and the next message
    brings everything."""
    run = run_ffgb(
        tmp_path,
        client=forgetting(client_app, 1, 3),
        **{"num-server-rounds": 4, "eval-with-train": with_train},
    )
    failures = [0, 1, 1, 0] if with_train else [0, 0, 1, 0]
    assert [r["failures"] for r in run.rows[1:]] == failures
    node = run.grid.node_ids[1]
    full = [
        m.content[DELTA]["full"]
        for m in run.grid.down
        if m.metadata.dst_node_id == node and m.metadata.message_type in ("train", "evaluate")
    ]
    assert full == expected
    assert run.rows[-1]["federated_test_accuracy"] == pytest.approx(run.rows[-1]["test_accuracy"])


@pytest.mark.parametrize(
    ("algorithm", "task", "overrides"),
    [
        ("ffgb-c", "digits", {}),
        ("ffgb", "digits", {"ffgb.learner": "tree", "ffgb.local-steps": 3}),
        (
            "ffgb",
            "digits",
            {"ffgb.learner": "tree", "ffgb.local-steps": 3, "ffgb.tree-fitter": "hist"},
        ),
        (
            "ffgb",
            "digits",
            {
                "ffgb.learner": "tree",
                "ffgb.tree-leaves": "newton",
                "ffgb.schedule": "constant",
                "ffgb.eta0": 0.5,
            },
        ),
        ("ffgb", "digits", {"ffgb.residual": False}),
        pytest.param(
            "ffgb",
            "mnist-5k",
            {"ffgb.learner": "cnn", "ffgb.oracle-steps": 40},
            marks=pytest.mark.e2e,
        ),  # the LeNet
        ("ffgb-l", "diabetes", {"ffgb.eta0": 1.0}),
    ],
)
def test_each_variant_learns(tmp_path, algorithm, task, overrides):
    rows = run_ffgb(
        tmp_path, **{"algorithm": algorithm, "task": task, "num-server-rounds": 3, **overrides}
    ).rows
    assert all(r["failures"] == 0 for r in rows[1:])
    if task == "diabetes":
        assert rows[-1]["test_mse"] < 0.7 * rows[0]["test_mse"]
    else:
        assert rows[-1]["test_accuracy"] > 0.8


# -- replies the server must refuse -------------------------------------------------------------
def _copy(message: Message) -> Message:
    return message_from_proto(message_to_proto(message))


def _round_one(algorithm: str, **overrides):
    config = run_config(**{**FAST, "algorithm": algorithm, **overrides})
    strategy = strategy_for(RunSettings.from_run_config(config))
    grid = LocalGrid(client_app, config, 3)
    replies = list(grid.send_and_receive(strategy.configure_train(1, None, ConfigRecord(), grid)))
    return strategy, replies


def _with_delta(reply: Message, change) -> Message:
    reply = _copy(reply)
    delta = unpack_delta(dict(reply.content[DELTA]), record_to_arrays(reply.content[DELTA_ARRAYS]))
    config, arrays = pack_delta(change(delta))
    reply.content[DELTA] = ConfigRecord(config)
    reply.content[DELTA_ARRAYS] = arrays_to_record(arrays)
    return reply


def _other_mlp(delta: Delta) -> Delta:
    spec = NetworkSpec((64, 8, 8, 10), "leaky_relu")
    return replace(delta, learners=(build(spec),) * len(delta.learners))


def _deep_tree(delta: Delta) -> Delta:
    rng = np.random.default_rng(0)
    tree = from_sklearn(
        DecisionTreeRegressor(max_depth=6).fit(
            rng.normal(size=(200, 64)), rng.normal(size=(200, 10))
        ),
        value_dtype=np.float32,
    )
    return replace(delta, learners=(tree, *delta.learners[1:]))


BAD_REPLIES = {
    "doubled weights": ("ffgb", {}, lambda d: replace(d, weights=tuple(2 * w for w in d.weights))),
    "a learner too many": (
        "ffgb",
        {},
        lambda d: replace(d, learners=d.learners * 2, weights=d.weights * 2),
    ),
    "another architecture": ("ffgb", {}, _other_mlp),
    "another version": ("ffgb", {}, lambda d: replace(d, since=d.since + 1)),
    "a full function": ("ffgb", {}, lambda d: replace(d, base=np.zeros(10))),
    "a rescaled function": ("ffgb", {}, lambda d: replace(d, scale=0.5)),
    "a tree too deep": ("ffgb", {"ffgb.learner": "tree"}, _deep_tree),
    "an unclipped ffgb-c learner": ("ffgb-c", {}, _other_mlp),
}


@pytest.mark.parametrize("case", sorted(BAD_REPLIES))
def test_a_reply_off_the_schedule_or_architecture_is_a_counted_failure(case):
    algorithm, overrides, change = BAD_REPLIES[case]
    strategy, replies = _round_one(algorithm, **overrides)
    bad = [_with_delta(replies[0], change), *(_copy(r) for r in replies[1:])]
    _, metrics = strategy.aggregate_train(1, bad)
    assert metrics["failures"] == 1 and metrics["participants"] == 2
    assert metrics["ensemble_size"] == 2 * len(
        unpack_delta(
            dict(replies[1].content[DELTA]), record_to_arrays(replies[1].content[DELTA_ARRAYS])
        ).learners
    )


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"algorithm": "ffgb-l", "ffgb.learner": "tree"}, "ffgb.learner='tree'"),
        ({"ffgb.local-steps": 0}, "ffgb.local-steps=0"),
        ({"ffgb.learner": "cnn"}, "ffgb.learner='cnn'"),
        ({"ffgb.schedule": "fast"}, "ffgb.schedule='fast'"),
        ({"algorithm": "ffgb-c", "task": "diabetes"}, "ffgb.grad-bound"),
        ({"ffgb.tree-leaves": "newton"}, "ffgb.tree-leaves='newton'"),
    ],
)
def test_bad_settings_stop_before_training(tmp_path, overrides, fragment):
    with pytest.raises(InvalidRunConfig, match=fragment.replace("(", r"\(")):
        run_ffgb(tmp_path, **{"num-server-rounds": 1, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [
        {"ffgb.federated-eval": False},
        {"fraction-train": 0.5},
        {"algorithm": "ffgb-l", "ffgb.one-shot": True},
    ],
)
def test_evaluation_with_training_off_is_refused_where_it_would_change_nothing(tmp_path, overrides):
    with pytest.raises(InvalidRunConfig, match="eval-with-train=False is not valid"):
        run_ffgb(tmp_path, **{"eval-with-train": False, **overrides})


def test_a_train_reply_without_the_evaluation_asked_for_is_a_missing_reply(tmp_path):
    """A node (hostile, or of another version) drops the ``evaluation`` record: its reply counts
    as none at all, training and evaluation, as if the node had failed those messages."""

    def silent_evaluator(message, context):
        reply = client_app(message, context)
        if context.node_config["partition-id"] == 0 and EVALUATION in reply.content:
            del reply.content[EVALUATION]
        return reply

    def failing(message, context):
        asks = CONFIG in message.content and EVALUATE_FIRST in message.content[CONFIG]
        if context.node_config["partition-id"] == 0 and asks:
            raise RuntimeError("no reply")
        return client_app(message, context)

    run = run_ffgb(tmp_path / "silent", client=silent_evaluator, **{"num-server-rounds": 3})
    gone = run_ffgb(tmp_path / "gone", client=failing, **{"num-server-rounds": 3})
    assert [r["failures"] for r in run.rows[1:]] == [1, 2, 1]  # round 1's evaluation; 2, 3
    assert [r["participants"] for r in run.rows[1:]] == [4, 3, 3]
    unchanged = {*CLOCKS, "models_exchanged", "exchanges"} | {
        k for k in run.rows[1] if "bytes" in k
    }
    assert [{k: v for k, v in r.items() if k not in unchanged} for r in run.rows] == [
        {k: v for k, v in r.items() if k not in unchanged} for r in gone.rows
    ]
