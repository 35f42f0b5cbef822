"""The XGBoost baselines (``fedxgb-bagging``, ``fedxgb-cyclic``): the booster codec, learning on
the in-process engine, hostile booster replies dropped and counted, resume."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord

from client_app.app import app as client_app
from functions.boosters import (
    Booster,
    BoosterSpec,
    decode_booster,
    encode_booster,
    raw_record,
    read_booster,
    record_raw,
)
from functions.errors import DecodeError
from functions.protocol import ARRAYS
from oracles.xgboost_local import boost, last_iterations, outputs, whole
from run_config.common import RunSettings
from server_app.app import run
from server_app.checkpoint import read_checkpoint
from strategies.registry import strategy_for
from tasks.datasets import load_task
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.helpers import RUN_NAME, run_app
from tests.lifecycle.test_checkpoints import assert_resumed_equals, crashed_before, rows_of

ALGORITHM_NAMES = ("fedxgb-bagging", "fedxgb-cyclic")
SMALL = {"task": "iris", "num-server-rounds": 4, "fedxgb.max-depth": 3}
IRIS = load_task("iris")
SPEC = BoosterSpec(3, 4, 3, 1 << 20)


def fitted(spec: BoosterSpec = SPEC, rounds: int = 2, on: bytes | None = None) -> bytes:
    """A real XGBoost model of ``spec`` on iris (or on random labels for another class count)."""
    x = IRIS.x_train[:, : spec.num_feature]
    y = IRIS.y_train if spec.num_class == 3 else np.arange(len(x)) % max(spec.num_class, 2)
    base = encode_booster(Booster(spec)) if on is None else on
    return whole(boost(base, spec.params(), x, y, rounds, 0.3))


def edited(raw: bytes, change) -> bytes:
    model = json.loads(raw)
    change(model)
    return json.dumps(model).encode()


def tree0(model: dict) -> dict:
    return model["learner"]["gradient_booster"]["model"]["trees"][0]


# -- the codec ------------------------------------------------------------------------------------
def test_a_booster_reads_back_and_its_canonical_json_predicts_as_xgboost():
    raw = fitted()
    booster = decode_booster(raw, SPEC)
    assert (booster.iterations, len(booster.trees)) == (2, 6)
    canonical = encode_booster(booster)
    assert encode_booster(decode_booster(canonical, SPEC)) == canonical
    np.testing.assert_array_equal(outputs(canonical, IRIS.x_test), outputs(raw, IRIS.x_test))
    assert read_booster(raw_record(raw), SPEC)[1] == raw


def test_boosting_on_the_canonical_json_keeps_its_trees_and_a_slice_holds_only_the_new_ones():
    held = decode_booster(fitted(), SPEC)
    grown = boost(encode_booster(held), SPEC.params(), IRIS.x_train, IRIS.y_train, 1, 0.3)
    held.check_prefix_of(decode_booster(whole(grown), SPEC), 1)
    new = decode_booster(last_iterations(grown, 1), SPEC)
    assert new.iterations == 1
    merged = encode_booster(held.plus([new]))
    np.testing.assert_allclose(
        outputs(merged, IRIS.x_test), outputs(whole(grown), IRIS.x_test), rtol=1e-6
    )


def _deeper(model: dict) -> None:  # a depth-4 chain on the root's left: 9 nodes, depth 4
    tree = tree0(model)
    n = 9
    tree.update(
        {
            "left_children": [1, 3, -1, 5, -1, 7, -1, -1, -1],
            "right_children": [2, 4, -1, 6, -1, 8, -1, -1, -1],
            "parents": [2147483647, 0, 0, 1, 1, 3, 3, 5, 5],
            "split_indices": [0] * n,
            "split_conditions": [0.5] * n,
            "default_left": [0] * n,
            "base_weights": [0.1] * n,
            "loss_changes": [0.0] * n,
            "sum_hessian": [1.0] * n,
            "split_type": [0] * n,
        }
    )
    tree["tree_param"]["num_nodes"] = str(n)


def _cycle(model: dict) -> None:
    tree = tree0(model)
    tree["right_children"][0] = tree["left_children"][0]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda raw: b"\x00\xffnot json" + raw, "not XGBoost JSON"),
        (lambda raw: raw[: len(raw) // 2], "not XGBoost JSON"),
        (lambda raw: raw + b" " * (1 << 20), "more than fedxgb.max-booster-bytes=1048576"),
        (
            lambda raw: edited(raw, lambda m: tree0(m)["split_conditions"].__setitem__(0, np.nan)),
            "not a finite number: NaN",
        ),
        (lambda raw: fitted(BoosterSpec(4, 4, 3, 1 << 20)), "objective: .*'3'.*, got .*'4'"),
        (lambda raw: fitted(BoosterSpec(3, 3, 3, 1 << 20)), "num_feature 4"),
        (lambda raw: fitted(BoosterSpec(0, 4, 3, 1 << 20)), "objective: .*got .*reg:squarederror"),
        (
            lambda raw: edited(
                raw,
                lambda m: m["learner"]["learner_model_param"].update(base_score="[1E0,1E0,1E0]"),
            ),
            "base_score",
        ),
        (
            lambda raw: edited(raw, lambda m: m["learner"].update(attributes={"x": "1"})),
            "attributes",
        ),
        (
            lambda raw: edited(
                raw, lambda m: tree0(m).update(split_indices=[7] * len(tree0(m)["split_indices"]))
            ),
            "a split on a feature outside 0..3",
        ),
        (
            lambda raw: edited(raw, lambda m: tree0(m)["split_conditions"].__setitem__(0, 1e300)),
            "not a finite float32",
        ),
        (
            lambda raw: edited(raw, lambda m: tree0(m)["split_conditions"].__setitem__(0, "1")),
            "expected .* numbers",
        ),
        (lambda raw: edited(raw, _cycle), "children are not two later nodes|not a tree"),
        (lambda raw: edited(raw, _deeper), "deeper than fedxgb.max-depth=3"),
        (
            lambda raw: edited(
                raw, lambda m: m["learner"]["gradient_booster"]["model"]["trees"].pop()
            ),
            "not whole iterations of 3",
        ),
        (lambda raw: edited(raw, lambda m: tree0(m).update(pickle="x")), "unexpected keys"),
    ],
)
def test_the_codec_refuses_each_bad_booster_naming_the_fault(change, fragment):
    with pytest.raises(DecodeError, match=fragment):
        decode_booster(change(fitted()), SPEC)


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        (ArrayRecord({"0": Array(np.zeros((2, 8), np.uint8))}), "1-D uint8"),
        (ArrayRecord({"0": Array(np.zeros(8, np.float32))}), "1-D uint8"),
        (
            ArrayRecord({"0": Array(np.zeros(8, np.uint8)), "1": Array(np.zeros(8, np.uint8))}),
            "expected an ArrayRecord of one array '0'",
        ),
        (
            ArrayRecord({"0": Array(np.zeros(2 << 20, np.uint8))}),
            "takes 2097152 bytes, more than fedxgb.max-booster-bytes=1048576",
        ),
        (ConfigRecord({"0": b"{}"}), "expected an ArrayRecord"),
    ],
)
def test_a_booster_record_is_one_bounded_byte_array(record, fragment):
    with pytest.raises(DecodeError, match=fragment):
        record_raw(record, SPEC.max_bytes)


def test_a_changed_tree_is_not_a_prefix():
    held = decode_booster(fitted(rounds=1), SPEC)
    grown = decode_booster(fitted(rounds=1, on=encode_booster(held)), SPEC)
    rewritten = replace(grown.trees[0], split_condition=grown.trees[0].split_condition + 1)
    with pytest.raises(DecodeError, match="tree 0 differs"):
        held.check_prefix_of(Booster(SPEC, (rewritten, *grown.trees[1:])), 1)
    with pytest.raises(DecodeError, match="holds 2 iterations, expected 3"):
        held.check_prefix_of(grown, 2)


# -- learning on the in-process engine ------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ALGORITHM_NAMES)
def test_each_baseline_learns(tmp_path, algorithm):
    run = run_app(tmp_path, 3, algorithm=algorithm, **SMALL)
    rows = run.rows
    xgb = pytest.importorskip("xgboost")
    model = xgb.Booster(model_file=str(run.out_dir / "model.json"))  # the exported booster
    x_test = IRIS.x_test.reshape(len(IRIS.x_test), -1)
    predicted = model.predict(xgb.DMatrix(x_test)).argmax(axis=1)
    assert np.mean(predicted == IRIS.y_test) == pytest.approx(rows[-1]["test_accuracy"])
    assert rows[0]["test_accuracy"] < 0.5 and rows[-1]["test_accuracy"] > 0.9  # chance: 1/3
    assert all(r["failures"] == 0 for r in rows[1:])
    trees = [r["ensemble_size"] for r in rows[1:]]
    per_round = 3 * 3 if algorithm == "fedxgb-bagging" else 3  # 3 classes, 3 nodes or 1
    assert trees == [per_round * t for t in range(1, 5)]
    assert rows[-1]["federated_test_accuracy"] == pytest.approx(rows[-1]["test_accuracy"])
    assert rows[-1]["bytes_down"] > rows[1]["bytes_down"]  # the whole booster, every round


@pytest.mark.parametrize("algorithm", ALGORITHM_NAMES)
def test_each_baseline_regresses_diabetes(tmp_path, algorithm):
    rows = run_app(
        tmp_path,
        3,
        algorithm=algorithm,
        task="diabetes",
        **{"num-server-rounds": 3, "fedxgb.max-depth": 2},
    ).rows
    assert rows[-1]["test_mse"] < 0.8 * rows[0]["test_mse"]


def test_cyclic_takes_the_nodes_in_turn(tmp_path):
    run = run_app(tmp_path, 3, algorithm="fedxgb-cyclic", **SMALL)
    trained = [m.metadata.dst_node_id for m in run.grid.down if m.metadata.message_type == "train"]
    assert trained == [run.grid.node_ids[p] for p in (0, 1, 2, 0)]


# -- hostile replies ------------------------------------------------------------------------------
HOSTILE_ROUND = 2


def _rewritten(message, reply, bagging: bool) -> bytes:
    """The node's model with the global booster's first tree changed (for bagging, the whole
    model: a slice of new trees holds no tree of the global booster)."""
    held = decode_booster(record_raw(message.content[ARRAYS], SPEC.max_bytes), SPEC)
    sent = decode_booster(record_raw(reply.content[ARRAYS], SPEC.max_bytes), SPEC)
    model = held.plus([sent]) if bagging else sent
    tree = replace(model.trees[0], split_condition=model.trees[0].split_condition * 2)
    return encode_booster(Booster(SPEC, (tree, *model.trees[1:])))


def hostile(how: str, bagging: bool):
    """The real ClientApp, but partition 1's train reply of round 2 is corrupted by ``how``."""

    def app(message, context):
        reply = client_app(message, context)
        if (
            context.node_config["partition-id"] == 1
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == HOSTILE_ROUND
        ):
            raw = record_raw(reply.content[ARRAYS], SPEC.max_bytes)
            bad = {
                "garbage": lambda: bytes(range(256)) * 4,
                "oversized": lambda: raw + b" " * SPEC.max_bytes,
                "rewritten": lambda: _rewritten(message, reply, bagging),
                "classes": lambda: fitted(BoosterSpec(4, 4, 3, 1 << 20), rounds=1),
            }[how]()
            reply.content[ARRAYS] = raw_record(bad)
        return reply

    return app


def missing(message, context):
    if (
        context.node_config["partition-id"] == 1
        and message.metadata.message_type == "train"
        and message.content["config"]["server-round"] == HOSTILE_ROUND
    ):
        raise RuntimeError("no reply")
    return client_app(message, context)


HOSTILE_RUN = {
    **SMALL,
    "num-server-rounds": 3,
    "fedxgb.max-booster-bytes": 1 << 20,
    "central-evaluation": True,
}


@pytest.mark.parametrize("algorithm", ALGORITHM_NAMES)
def test_hostile_booster_replies_are_dropped_counted_and_equal_a_missing_reply(
    tmp_path, caplog, algorithm
):
    """Cyclic's round 2 is partition 1's turn; bagging asks every node. A bagging reply holds
    only new trees, so one that carries the global booster's (rewritten) is refused whole."""
    bagging = algorithm == "fedxgb-bagging"
    config = {**HOSTILE_RUN, "algorithm": algorithm}
    without = run_app(tmp_path / "missing", 3, client=missing, **config).rows
    reasons = {
        "garbage": "not XGBoost JSON",
        "oversized": "more than fedxgb.max-booster-bytes=1048576",
        "rewritten": "holds 4 iterations, expected the fedxgb.local-rounds=1 new ones"
        if bagging
        else "tree 0 differs from the global booster's tree 0",
        "classes": "objective: expected .*'3'.*got .*'4'",
    }
    for how, reason in reasons.items():
        caplog.clear()
        rows = run_app(tmp_path / how, 3, client=hostile(how, bagging), **config).rows
        dropped = [r.getMessage() for r in caplog.records if "dropped the reply" in r.getMessage()]
        assert len(dropped) == 1 and re.search(reason, dropped[0]), (how, dropped)
        # bagging: round 1's evaluation rode on the dropped reply and is lost with it
        assert [r["failures"] for r in rows[1:]] == ([1, 1, 0] if bagging else [0, 1, 0]), how
        assert rows[HOSTILE_ROUND]["participants"] == (2 if bagging else 0), how
        keep = ("test_accuracy", "test_loss", "train_loss", "ensemble_size", "booster_bytes")
        assert [{k: r.get(k) for k in keep} for r in rows] == [
            {k: r.get(k) for k in keep} for r in without
        ], how


# -- checkpoint -----------------------------------------------------------------------------------
def config_of(where, algorithm: str, **overrides) -> dict:
    """Bagging samples 2 of 3 nodes a round, so the restored generator matters."""
    return run_config(
        **{
            "output-dir": str(where),
            "run-name": RUN_NAME,
            "algorithm": algorithm,
            "fraction-train": 0.67 if algorithm == "fedxgb-bagging" else 1.0,
            **SMALL,
            **overrides,
        }
    )


@pytest.mark.parametrize("algorithm", ALGORITHM_NAMES)
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, algorithm):
    whole_run = config_of(tmp_path / "whole", algorithm)
    run(LocalGrid(client_app, whole_run, 3), server_context(whole_run))
    config = config_of(tmp_path / "resumed", algorithm)
    grid = crashed_before(config, 3, 3)
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    resumed, uninterrupted = rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole")
    assert [r["round"] for r in resumed] == [0, 1, 2, 3, 4]
    assert_resumed_equals(resumed, uninterrupted, after=2)


def test_the_checkpointed_booster_is_checked_as_a_reply(tmp_path):
    config = config_of(tmp_path, "fedxgb-cyclic")
    run(LocalGrid(client_app, config, 3), server_context(config))
    state = read_checkpoint(tmp_path / RUN_NAME).strategy
    assert state["booster"]["0"].dtype == "uint8"
    shallower = RunSettings.from_run_config(
        config_of(tmp_path, "fedxgb-cyclic", **{"fedxgb.max-depth": 2})
    )
    with pytest.raises(DecodeError, match="state field booster: tree .*depth <= 2"):
        strategy_for(shallower).load_state_record(state)


def test_bagging_keeps_its_booster_when_the_merge_would_outgrow_the_bound(tmp_path):
    """The rounds whose trees are dropped are warnings of the run, each naming the bound."""
    run = run_app(
        tmp_path, 3, algorithm="fedxgb-bagging", **{**SMALL, "fedxgb.max-booster-bytes": 8000}
    )
    rows = run.rows
    assert [r["ensemble_size"] for r in rows[1:]] == [9, 9, 9, 9]
    assert all(r["failures"] == 0 and r["booster_bytes"] <= 8000 for r in rows[1:])
    outcome = json.loads((run.out_dir / "config.json").read_text())["outcome"]
    assert outcome["warnings"] == [
        f"round {t}: the booster would outgrow fedxgb.max-booster-bytes=8000; the round's "
        "trees are dropped"
        for t in (2, 3, 4)
    ]
