"""``fedxgb-hist``: histogram-based federated XGBoost equals XGBoost ``hist`` on the pooled rows.

The exactness tests train ``xgboost.train`` with ``tree_method='hist'`` on every node's rows
pooled, each value replaced by its agreed bin (NaN kept), with the same parameters and base
score, and compare its margins with the federated booster's, which XGBoost itself computes on
the raw values from the exported JSON: equal to float32 rounding (XGBoost sums gradients in a
different order). Then the family through the ServerApp and ClientApp on the in-process engine:
the same equality for a run's booster and edges (from its checkpoint), hostile histogram
replies dropped with their reason, a resumed run equal to an uninterrupted one.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import client_app.fedxgb_hist as fedxgb_hist_client
import client_app.setup as client_setup
from client_app.app import app as client_app
from client_app.setup import clear_setups
from functions.bins import BinLayout, GrowingTree
from functions.boosters import Booster, BoosterSpec, encode_booster, record_raw
from functions.errors import DecodeError
from functions.histograms import histogram_record, read_histograms, read_sketch, sketch_record
from functions.params import arrays_to_record
from functions.protocol import HISTOGRAMS
from oracles.hist_kernels import leaf_nodes
from oracles.hist_xgboost import (
    LOGISTIC,
    SOFTMAX,
    SQUARED,
    TreeParams,
    column_sketch,
    gradients,
    grow_iteration,
    histograms,
    merge_sketches,
    merge_small_slots,
)
from oracles.xgboost_local import outputs, xgboost_module
from run_config.common import RunSettings
from server_app.app import InvalidRunConfig, run
from server_app.checkpoint import read_checkpoint
from server_app.packed_grid import unpacked
from server_app.recording import BelowQuorum
from strategies.registry import strategy_for
from tasks.datasets import load_task
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.helpers import RUN_NAME, run_app
from tests.lifecycle.test_checkpoints import assert_resumed_equals, crashed_before, rows_of

pytest.importorskip("xgboost")


def pooled_margins(
    layout: BinLayout, params: TreeParams, spec: BoosterSpec, x, y, rounds: int, at
) -> np.ndarray:
    """XGBoost ``hist`` trained on (x, y) given as bins, its margins on the rows ``at``."""
    xgb = xgboost_module()

    def binned(rows: np.ndarray) -> np.ndarray:
        bins = layout.bins(rows).astype(np.float32)
        missing = np.array([len(e) + 1 for e in layout.edges])
        bins[bins == missing[None, :]] = np.nan
        return bins

    model = {
        **spec.params(),
        **params.xgboost(),
        "tree_method": "hist",
        "max_bin": 1024,
        "nthread": 1,
        "verbosity": 0,
    }
    booster = xgb.train(model, xgb.DMatrix(binned(x), label=y), num_boost_round=rounds)
    margins = booster.predict(xgb.DMatrix(binned(at)), output_margin=True)
    return np.asarray(margins).reshape(len(at), -1)


def node_tables(objective: str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Three nodes' rows, shifted per node: continuous and discrete columns, 5 % missing."""
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(3):
        n = 150 + 60 * i
        x = rng.normal(size=(n, 5)).astype(np.float32) + 0.3 * i
        x[:, 3] = rng.integers(0, 4, size=n)
        x[rng.random((n, 5)) < 0.05] = np.nan
        clean = np.nan_to_num(x)
        signal = clean[:, 0] + 0.5 * clean[:, 1] ** 2 - 0.3 * clean[:, 3]
        noise = rng.normal(size=n)
        if objective == SQUARED:
            y = signal + 0.1 * noise
        elif objective == LOGISTIC:
            y = (signal + noise > 0.5).astype(np.float64)
        else:
            y = np.digitize(signal + 0.3 * noise, [0.0, 1.0]).astype(np.float64)
        nodes.append((x, y))
    return nodes


def federated(nodes, spec: BoosterSpec, objective: str, params: TreeParams, rounds: int):
    """The protocol without Flower: each node's histograms summed, the server's trees."""
    sketches = [column_sketch(x, 64) for x, _ in nodes]
    layout = BinLayout(
        tuple(merge_sketches([s for s, _ in sketches], [c for _, c in sketches], 16))
    )
    booster = Booster(spec)
    for _ in range(rounds):
        raw = encode_booster(booster)
        local = [(layout.bins(x), *gradients(objective, outputs(raw, x), y)) for x, y in nodes]

        def exchange(trees, leaves):
            parts = [histograms(layout, bins, g, h, trees, leaves) for bins, g, h in local]
            return tuple(sum(p) for p in zip(*parts))

        booster = Booster(
            spec, booster.trees + tuple(grow_iteration(layout, params, spec.outputs, exchange))
        )
    return booster, layout


SPECS = {
    SQUARED: BoosterSpec(0, 5, 4, 1 << 24),
    LOGISTIC: BoosterSpec(0, 5, 4, 1 << 24, binary=True),
    SOFTMAX: BoosterSpec(3, 5, 4, 1 << 24),
}
PARAMS = {
    "defaults": TreeParams(max_depth=4),
    "regularised": TreeParams(
        eta=0.5, reg_lambda=5.0, gamma=0.5, min_child_weight=3.0, max_depth=4
    ),
    "unregularised": TreeParams(eta=1.0, reg_lambda=0.0, min_child_weight=0.0, max_depth=3),
}


@pytest.mark.parametrize("objective", [SQUARED, LOGISTIC, SOFTMAX])
@pytest.mark.parametrize("name", PARAMS)
def test_the_federated_booster_equals_xgboost_on_the_pooled_rows(objective, name):
    params, spec = PARAMS[name], SPECS[objective]
    nodes = node_tables(objective, seed=len(name))
    booster, layout = federated(nodes, spec, objective, params, rounds=6)
    x = np.concatenate([x for x, _ in nodes])
    y = np.concatenate([y for _, y in nodes])
    ours = outputs(encode_booster(booster), x)
    theirs = pooled_margins(layout, params, spec, x, y, 6, x)
    assert len(booster.trees) == 6 * spec.outputs
    assert np.abs(ours - theirs).max() <= 1e-5 * max(1.0, np.abs(theirs).max())
    assert np.abs(theirs - theirs.mean()).max() > 0.1  # the trees split: a real comparison


def test_below_the_root_only_the_smaller_child_of_each_split_is_asked_for():
    nodes = node_tables(SOFTMAX, seed=3)
    layout = BinLayout(tuple(merge_sketches(*zip(*(column_sketch(x, 64) for x, _ in nodes)), 16)))
    local = [(x, layout.bins(x), *gradients(SOFTMAX, np.zeros((len(x), 3)), y)) for x, y in nodes]
    asked = []

    def exchange(trees, leaves):
        asked.append((trees, list(leaves)))
        parts = [histograms(layout, bins, g, h, trees, leaves) for _, bins, g, h in local]
        return tuple(sum(p) for p in zip(*parts))

    grow_iteration(layout, TreeParams(max_depth=3), 3, exchange)
    assert [len(leaves) for _, leaves in asked][:2] == [3, 3]  # 3 roots; one child of each
    for trees, leaves in asked[1:]:
        for k, node in leaves:
            parent = int(np.flatnonzero((trees[k].left == node) | (trees[k].right == node))[0])
            sibling = (
                trees[k].right[parent] if trees[k].left[parent] == node else trees[k].left[parent]
            )
            rows = [
                np.sum(
                    leaf_nodes(trees[k], bins, np.array([len(e) + 1 for e in layout.edges])) == n
                )
                for n in (node, sibling)
                for _, bins, _, _ in local
            ]
            assert sum(rows[: len(local)]) <= sum(rows[len(local) :])


def test_discrete_columns_keep_every_value_in_its_own_bin():
    x = np.array([[0.0, 1.5], [1.0, 2.5], [3.0, np.nan], [1.0, 7.0]], np.float32)
    points, counts = column_sketch(x, 8)
    edges = merge_sketches([points], [counts], 256)
    assert [e.tolist() for e in edges] == [[1.0, 3.0], [2.5, 7.0]]
    assert counts.tolist() == [4, 3]
    bins = BinLayout(tuple(edges)).bins(x)
    assert bins.tolist() == [[0, 0], [1, 1], [2, 3], [1, 2]]  # 3: column 1's missing slot


@pytest.mark.parametrize("least", [2, 5, 40])
def test_small_slots_are_merged_and_every_feature_keeps_the_leaf_totals(least):
    rng = np.random.default_rng(least)
    layout = BinLayout((np.arange(6, dtype=np.float32), np.arange(3, dtype=np.float32)))
    x = rng.normal(2.0, 2.0, size=(60, 2)).astype(np.float32)
    x[rng.random((60, 2)) < 0.1] = np.nan
    g, h = rng.normal(size=(60, 1)).astype(np.float32), rng.random((60, 1)).astype(np.float32)
    tree = GrowingTree(
        *(np.array(v) for v in ([0, 0, 0], [3, 0, 0], [0, 0, 0], [1, -1, -1], [2, -1, -1]))
    )
    grad, hess, count = histograms(layout, layout.bins(x), g, h, [tree], [(0, 1), (0, 2)])
    merged = [a.copy() for a in (grad, hess, count)]
    merge_small_slots(layout, *merged, least)
    for before, after in zip((grad, hess, count), merged):
        sums = np.add.reduceat(after, layout.offsets[:-1], axis=1)
        assert np.allclose(sums, np.add.reduceat(before, layout.offsets[:-1], axis=1))
    totals = np.add.reduceat(count, layout.offsets[:-1], axis=1)
    small = (merged[2] > 0) & (merged[2] < least)
    assert not small[totals[:, [0] * 8 + [1] * 5] >= least].any()
    read_histograms(histogram_record(*merged), layout, 2, rows=60)  # still a valid reply


# -- the wire: what a node may send -----------------------------------------------------------
LAYOUT = BinLayout((np.array([0.0, 1.0], np.float32), np.array([5.0], np.float32)))


def honest() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    count = np.array([[2, 1, 1, 0, 3, 1, 0]], np.int64)  # feature 0: 3 bins + missing; 1: 2 + 1
    grad = np.where(count > 0, 0.5 * count, 0.0)
    return grad, count * 0.25, count


def sent(how: str) -> dict[str, np.ndarray]:
    """The sparse arrays of the honest histogram, broken ``how``."""
    arrays = {k: v.numpy() for k, v in histogram_record(*honest()).items()}
    if how == "out of range":
        arrays["index"][-1] = 7
    elif how == "out of order":
        arrays["index"][[0, 1]] = arrays["index"][[1, 0]]
    elif how == "lengths":
        arrays["grad"] = arrays["grad"][:-1]
    elif how == "nan":
        arrays["grad"][0] = np.nan
    elif how == "negative hessian":
        arrays["hess"][0] = -1.0
    elif how == "slot without rows":
        arrays["count"][0] = 0
    elif how == "features disagree":
        arrays["count"][3] += 1
    elif how == "float counts":
        arrays["count"] = arrays["count"].astype(np.float64)
    return arrays


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("out of range", r"slots must increase strictly within \[0, 7\)"),
        ("out of order", "slots must increase strictly"),
        ("lengths", r"grad: expected float64 \(5,\)"),
        ("nan", "hold NaN or inf"),
        ("negative hessian", "a negative hessian sum"),
        ("slot without rows", "a listed slot counts no row"),
        ("features disagree", "the features of a leaf count different rows"),
        ("float counts", "count: expected int32"),
    ],
)
def test_a_bad_histogram_is_refused_naming_the_fault(how, reason):
    with pytest.raises(DecodeError, match=reason):
        read_histograms(arrays_to_record(sent(how)), LAYOUT, 1, rows=10)


def test_only_occupied_slots_travel_and_read_back_dense():
    record = histogram_record(*honest())
    assert record["index"].numpy().tolist() == [0, 1, 2, 4, 5]
    for got, want in zip(read_histograms(record, LAYOUT, 1, rows=4).dense(), honest()):
        np.testing.assert_array_equal(got, want)


def test_a_histogram_counting_more_rows_than_the_node_has_is_refused():
    read_histograms(histogram_record(*honest()), LAYOUT, 1, rows=4)
    with pytest.raises(DecodeError, match="more than the node's 3 rows"):
        read_histograms(histogram_record(*honest()), LAYOUT, 1, rows=3)


def test_a_sketch_is_checked():
    points, counts = column_sketch(np.array([[1.0], [2.0]]), 4)
    assert read_sketch(sketch_record(points, counts, 2), 1, 4).rows == 2
    with pytest.raises(DecodeError, match="decrease"):
        read_sketch(sketch_record(points[:, ::-1].copy(), counts, 2), 1, 4)
    with pytest.raises(DecodeError, match="counts must lie"):
        read_sketch(sketch_record(points, counts + 5, 2), 1, 4)


# -- the family through the apps ----------------------------------------------------------------
RUN = {"algorithm": "fedxgb-hist", "num-server-rounds": 3, "fedxgb-hist.max-depth": 3}


def trained(path, num_nodes: int, **overrides):
    """The run's strategy as its checkpoint left it (booster and edges)."""
    settings = RunSettings.from_run_config(run_config(**{**RUN, **overrides}))
    strategy = strategy_for(settings)
    checkpoint = read_checkpoint(path)
    strategy.load_state_record(checkpoint.strategy, checkpoint.segment_records)
    return strategy


@pytest.mark.parametrize(
    ("task", "objective"),
    [("wine", SOFTMAX), ("breast-cancer", LOGISTIC), ("diabetes", SQUARED)],
)
def test_a_run_trains_the_pooled_xgboost_model(tmp_path, monkeypatch, task, objective):
    predicted = []  # a node predicts the whole booster once (train rows, test shard): later
    # rounds add the new trees
    whole = fedxgb_hist_client.outputs
    monkeypatch.setattr(
        fedxgb_hist_client, "outputs", lambda raw, x: predicted.append(len(x)) or whole(raw, x)
    )
    rows = run_app(tmp_path, 3, task=task, **RUN).rows
    assert len(predicted) == 3 * 2
    assert all(r["failures"] == 0 for r in rows[1:])
    assert [r["histogram_levels"] for r in rows[1:]] == [3, 3, 3]
    strategy = trained(tmp_path / RUN_NAME, 3, task=task)
    assert strategy.objective == objective
    data = load_task(task)
    params = strategy.params
    x_train = data.x_train.reshape(len(data.x_train), -1)
    x_test = data.x_test.reshape(len(data.x_test), -1)
    both = np.concatenate([x_train, x_test])
    assert (tmp_path / RUN_NAME / "model.json").read_bytes() == strategy.raw
    ours = (
        xgboost_module()
        .Booster(model_file=str(tmp_path / RUN_NAME / "model.json"))
        .predict(xgboost_module().DMatrix(both), output_margin=True)
        .reshape(len(both), -1)
    )
    theirs = pooled_margins(strategy.layout, params, strategy.spec, x_train, data.y_train, 3, both)
    assert np.abs(ours - theirs).max() <= 1e-5 * max(1.0, np.abs(theirs).max())
    metric = "test_mse" if objective == SQUARED else "test_accuracy"
    improved = (
        rows[-1][metric] < rows[0][metric] if objective == SQUARED else rows[-1][metric] > 0.85
    )
    assert improved, rows[-1][metric]


HOSTILE_ROUND = 2


def hostile(how: str, level: int):
    """The real ClientApp, but partition 1's histograms of ``level`` in round 2 are ``how``."""
    seen: dict[int, int] = {}

    def app(message, context):
        reply = unpacked(client_app(message, context))  # its arrays as sent
        if (
            context.node_config["partition-id"] == 1
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == HOSTILE_ROUND
        ):
            at = seen[HOSTILE_ROUND] = seen.get(HOSTILE_ROUND, -1) + 1
            if at == level:
                arrays = {k: v.numpy() for k, v in reply.content[HISTOGRAMS].items()}
                if how == "negative":
                    arrays["hess"][0] = -1.0
                elif how == "inflated":
                    arrays["count"] *= 1000
                    arrays["grad"] *= 1000
                    arrays["hess"] *= 1000
                reply.content[HISTOGRAMS] = arrays_to_record(arrays)
        return reply

    return app


def test_a_hostile_root_histogram_is_dropped_and_the_tree_grows_on_the_others(tmp_path, caplog):
    config = {**RUN, "task": "wine"}
    rows = run_app(tmp_path / "negative", 3, client=hostile("negative", 0), **config).rows
    dropped = [r.getMessage() for r in caplog.records if "dropped the reply" in r.getMessage()]
    assert len(dropped) == 1 and "a negative hessian sum" in dropped[0]
    # the reply dropped whole: round 2's root and round 1's evaluation, which rode on it
    assert [r["failures"] for r in rows[1:]] == [1, 1, 0]
    assert [r["participants"] for r in rows[1:]] == [3, 2, 3]
    caplog.clear()
    rows = run_app(tmp_path / "inflated", 3, client=hostile("inflated", 0), **config).rows
    dropped = [r.getMessage() for r in caplog.records if "dropped the reply" in r.getMessage()]
    assert len(dropped) == 1 and re.search(r"more than the node's \d+ rows", dropped[0])


def test_a_node_lost_below_the_root_drops_the_iteration(tmp_path, caplog):
    """The run goes on without the iteration, and its outcome says so: config.json lists the
    warning with its round and reason, the health line counts it."""
    run = run_app(tmp_path, 3, client=hostile("negative", 1), **RUN, task="wine")
    rows = run.rows
    assert [r["iteration_dropped"] for r in rows[1:]] == [0, 1, 0]
    assert [r["ensemble_size"] for r in rows[1:]] == [3, 3, 6]
    assert any("answered the root but not level 1" in r.getMessage() for r in caplog.records)
    ended = json.loads((run.out_dir / "config.json").read_text())["outcome"]
    assert len(ended["warnings"]) == 1
    assert re.fullmatch(
        r"round 2: iteration dropped: node\(s\) \[\d+\] answered the root but not level 1",
        ended["warnings"][0],
    )
    assert ended["status"] == "completed" and ", 1 warning," in ended["line"]


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    def config_of(where):
        return run_config(
            **{
                "output-dir": str(where),
                "run-name": RUN_NAME,
                **RUN,
                "task": "wine",
                "num-server-rounds": 4,
            }
        )

    whole = config_of(tmp_path / "whole")
    run(LocalGrid(client_app, whole, 3), server_context(whole))
    config = config_of(tmp_path / "resumed")
    grid = crashed_before(config, 3, 3)
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    resumed, uninterrupted = rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole")
    assert [r["round"] for r in resumed] == [0, 1, 2, 3, 4]
    assert_resumed_equals(resumed, uninterrupted, after=2)


def test_a_node_that_lost_its_margins_mid_round_drops_the_iteration(tmp_path, caplog):
    """Deeper levels carry no booster: a node restarted between two levels has no margins of
    the round, says so, and the round's iteration is dropped, not grown on other rows."""

    def forgetting(message, context):
        if (
            context.node_config["partition-id"] == 1
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == HOSTILE_ROUND
            and "0" not in message.content.get("arrays", {})
        ):
            for key in list(context.state.keys()):
                del context.state[key]
        return client_app(message, context)

    run = run_app(tmp_path, 3, client=forgetting, **RUN, task="wine")
    assert [r["iteration_dropped"] for r in run.rows[1:]] == [0, 1, 0]
    assert any("holds no gradients of round 2" in r.getMessage() for r in caplog.records)
    train = [m for m in run.grid.down if m.metadata.message_type == "train"]
    with_booster = [m for m in train if "arrays" in m.content]
    assert len(with_booster) == 3 * 3 and len(train) > len(with_booster)  # once a round a node


def _root_trees(message) -> tuple[int | None, int]:
    """(trees the node is told it holds, trees the message brings) of a round's root."""
    model = json.loads(record_raw(message.content["arrays"], 1 << 30))
    trees = model["learner"]["gradient_booster"]["model"]["trees"]
    return message.content["config"].get("trees-held"), len(trees)


def test_a_node_holding_the_booster_is_sent_only_the_last_round_s_trees(tmp_path, caplog):
    """Round t's root brings only round t - 1's trees (one a class) to a node that holds the
    others; a node that lost everything between two rounds says so, sits the round out, and is
    sent the whole booster the round after, from which it trains again."""

    def forgetting(message, context):
        if (
            context.node_config["partition-id"] == 1
            and "arrays" in message.content
            and message.content["config"]["server-round"] == 3
        ):
            for key in list(context.state.keys()):
                del context.state[key]
        return client_app(message, context)

    run = run_app(tmp_path, 3, client=forgetting, **{**RUN, "num-server-rounds": 4}, task="wine")
    roots = [
        m for m in run.grid.down if m.metadata.message_type == "train" and "arrays" in m.content
    ]
    by_round = {}
    for m in roots:
        by_round.setdefault(m.content["config"]["server-round"], []).append(_root_trees(m))
    assert by_round == {
        1: [(None, 0)] * 3,
        2: [(0, 3)] * 3,
        3: [(3, 3)] * 3,
        4: [(6, 3), (None, 9), (6, 3)],
    }
    assert [r["participants"] for r in run.rows[1:]] == [3, 3, 2, 3]
    assert any(
        "does not hold the booster's first 3 trees" in r.getMessage() for r in caplog.records
    )


def test_a_level_below_the_root_reads_none_of_the_node_s_rows(tmp_path, monkeypatch):
    """As in a deployment, where each message may have a ClientApp process of its own: the
    node's setup forgotten before every message, only the messages that need rows (a round's
    root, with the booster; the sketch; the evaluation) read the node's data, and the run's
    booster is the one a node that keeps its data in memory grows."""
    reads = []
    read = client_setup.local_data
    monkeypatch.setattr(
        client_setup,
        "local_data",
        lambda *a: reads.append(a[1]) or read(*a),  # partition
    )
    seen = []

    def new_process_each_message(message, context):
        clear_setups()
        seen.append(message)
        return client_app(message, context)

    config = {**RUN, "task": "wine", "num-server-rounds": 2}
    fresh = run_app(tmp_path / "fresh", 3, client=new_process_each_message, **config)
    needs_rows = [m for m in seen if m.metadata.message_type != "train" or "arrays" in m.content]
    assert len(seen) > len(needs_rows) + 3  # levels below the root, on every node
    assert len(reads) == len(needs_rows)
    kept = run_app(tmp_path / "kept", 3, **config)
    assert (fresh.out_dir / "model.json").read_bytes() == (kept.out_dir / "model.json").read_bytes()


def test_bins_too_many_for_the_histogram_bound_fail_the_run_in_one_sentence(tmp_path):
    """Only the nodes' sketches say how many bins there are: the run stops at round 1, its
    outcome names the bound and what to lower."""
    with pytest.raises(InvalidRunConfig, match="lower fedxgb-hist.max-depth or max-bin"):
        run_app(tmp_path, 3, **{**RUN, "task": "wine", "fedxgb-hist.max-histogram-bytes": 2048})
    outcome = json.loads((tmp_path / RUN_NAME / "config.json").read_text())["outcome"]
    assert outcome["status"] == "failed" and outcome["rounds"] == 0
    assert outcome["cause"].startswith("refused once the nodes answered: one level's histograms")


def test_merged_slots_keep_every_leaf_s_sums_its_rows_own(tmp_path):
    """With min-bin-count a node's rows are not where the merged histogram puts them: every
    leaf's value must still come from its own rows' totals (regression diverged without)."""
    config = {**RUN, "task": "diabetes", "num-server-rounds": 5, "fedxgb-hist.max-depth": 4}
    exact = run_app(tmp_path / "exact", 3, **config).rows
    merged = run_app(tmp_path / "merged", 3, **{**config, "fedxgb-hist.min-bin-count": 5}).rows
    assert merged[-1]["test_mse"] < merged[0]["test_mse"]
    assert merged[-1]["test_mse"] < 1.2 * exact[-1]["test_mse"]
    assert [r["histogram_levels"] for r in merged[1:]] == [5] * 5  # 4 levels and the leaves'


def test_with_merged_slots_each_leaf_value_is_its_own_rows_newton_step():
    nodes = node_tables(SQUARED, seed=5)
    spec, params = SPECS[SQUARED], TreeParams(max_depth=4)
    sketches = [column_sketch(x, 64) for x, _ in nodes]
    layout = BinLayout(
        tuple(merge_sketches([s for s, _ in sketches], [c for _, c in sketches], 16))
    )
    local = [(layout.bins(x), *gradients(SQUARED, np.zeros((len(x), 1)), y)) for x, y in nodes]

    def exchange(trees, leaves):
        parts = []
        for bins, g, h in local:
            sums = histograms(layout, bins, g, h, trees, leaves)
            merge_small_slots(layout, *sums, 8)
            parts.append(sums)
        return tuple(sum(p) for p in zip(*parts))

    (tree,) = grow_iteration(layout, params, 1, exchange, exact=False)
    raw = encode_booster(Booster(spec, (tree,)))
    x = np.concatenate([x for x, _ in nodes])
    g = np.concatenate([g for _, g, _ in local])[:, 0].astype(np.float64)
    leaf = (
        xgboost_module()
        .Booster(model_file=bytearray(raw))
        .predict(xgboost_module().DMatrix(x), pred_leaf=True)
        .ravel()
    )
    assert len(np.unique(leaf)) > 4
    for node in np.unique(leaf).astype(int):
        rows = leaf == node
        newton = -g[rows].sum() / (rows.sum() + params.reg_lambda) * params.eta
        assert tree.split_condition[node] == pytest.approx(newton, rel=1e-5)


def test_min_replies_counts_the_nodes_that_answered_the_root(tmp_path):
    """The levels are the family's own exchanges: a round whose root histograms came from
    fewer nodes than min-replies stops the run as below quorum, like any family's."""
    config = {**RUN, "task": "wine", "min-replies": 3}
    with pytest.raises(BelowQuorum, match=r"round 2: 2 of 3 nodes asked answered, min-replies=3"):
        run_app(tmp_path / "quorum", 3, client=hostile("negative", 0), **config)
    rows = run_app(tmp_path / "deeper", 3, client=hostile("negative", 1), **config).rows
    assert [r["iteration_dropped"] for r in rows[1:]] == [0, 1, 0]  # all 3 answered the root
