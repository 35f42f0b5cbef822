"""The attacks of ``benchmarks.privacy`` on small hand-made replies, each built by the project's
own node code where it has one, and once on a real fedxgb-hist run over the penguins sites."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import privacy_attacks as attacks
from functions.bins import BinLayout, GrowingTree
from functions.histograms import histogram_record, sketch_record
from oracles.hist_xgboost import (
    LOGISTIC,
    SOFTMAX,
    SQUARED,
    column_sketch,
    histograms,
    merge_small_slots,
)
from oracles.kddt import data_boxes, fit_kddt

MASKED = {"masked": np.arange(8, dtype=np.uint64)}  # what a secure sum's reply may hold


def arrays(record) -> dict[str, np.ndarray]:
    return {key: array.numpy() for key, array in record.items()}


def sketch_of(x: np.ndarray, size: int = 1024) -> dict[str, np.ndarray]:
    x = np.asarray(x, np.float32).reshape(len(x), -1)
    return arrays(sketch_record(*column_sketch(x, size), len(x)))


def root_histograms(layout: BinLayout, x: np.ndarray, g: np.ndarray, least: int = 0) -> dict:
    """A node's root histograms (one tree) of rows ``x`` with gradients ``g``, as it sends them."""
    bins = layout.bins(np.asarray(x, np.float32).reshape(len(x), -1))
    sums = histograms(
        layout, bins, g[:, None], np.ones_like(g)[:, None], [GrowingTree.root()], [(0, 0)]
    )
    merge_small_slots(layout, *sums, least)
    return arrays(histogram_record(*sums))


# -- decoding and scoring ---------------------------------------------------------------------
def test_values_standardised_by_the_schema_decode_to_the_files_values():
    raw = np.array([37.8, 3400.0, 2007.0, 18.25, -4.5])
    column = attacks.Standardised(mean=512.3, std=801.4)
    assert np.array_equal(attacks.decoded(column.forward(raw), column), raw)


def test_a_cube_coordinate_decodes_through_the_cube_and_the_standardisation():
    raw = np.array([37.8, 41.1, 52.0])
    cube = attacks.InCube(attacks.Standardised(44.0, 5.4), lower=-2.5, upper=2.9, delta=0.1)
    assert np.array_equal(attacks.decoded(cube.forward(raw), cube), raw)


def test_each_value_is_recovered_at_most_as_often_as_it_occurs_and_claimed():
    truth = np.array([1.0, 2.0, 2.0, np.nan])
    assert attacks.recovered([(1.0,), (1.0,), (2.0,)], truth) == 2
    assert attacks.recovered([(5.0, 2.0), (2.0, 5.0), (2.0,)], truth) == 2  # one of two each


def test_labelled_rows_count_a_row_once_and_only_rows_that_fit():
    x = np.array([[1.0, 7.0], [1.0, 8.0], [2.0, 7.0]])
    y = np.array([0.0, 0.0, 1.0])
    claims = [(((0, 1.0, 0.0),), 2), (((1, 7.0, 0.0),), 1), (((0, 2.0, 0.0),), 1)]
    assert attacks.labelled_rows(claims, x, y) == 2  # (0, 2.0, 0.0) fits no row


# -- the sketch -------------------------------------------------------------------------------
def test_a_sketch_of_a_five_row_column_is_the_column():
    column = np.array([3.5, -1.0, 2.0, 2.0, 7.25])
    (found,) = attacks.sketch_columns(sketch_of(column))
    assert found.complete
    assert np.array_equal(np.sort(found.values), np.sort(column))


def test_a_sketch_of_more_rows_than_quantiles_gives_true_values_but_not_all():
    column = np.random.default_rng(0).permutation(3000).astype(np.float64)
    (found,) = attacks.sketch_columns(sketch_of(column, size=64))
    assert not found.complete
    assert len(found.values) == 64 and set(found.values) <= set(column)


# -- fedxgb-hist's histograms -----------------------------------------------------------------
def test_a_slot_of_count_two_and_gradient_sum_two_p0_minus_two_holds_two_positives():
    p0 = 0.5
    assert attacks.class_rows(2, 2 * p0 - 2, p0) == 2
    assert attacks.class_rows(2, 2 * p0 - 1, p0) == 1
    assert attacks.class_rows(1, 0.7 - 1, None) == 1  # one row: the gradient's sign tells
    assert attacks.class_rows(3, 0.0, None) is None  # 1 or 2 positives: not told


LAYOUT = BinLayout((np.array([1.0, 2.0], np.float32),))  # bins (-inf, 1), [1, 2), [2, inf)


def test_root_slots_give_labels_with_the_sketchs_exact_values():
    x = np.array([0.5, 1.5, 1.5, 2.5])
    y = np.array([1.0, 0.0, 0.0, 1.0])
    reply = root_histograms(LAYOUT, x, (0.5 - y).astype(np.float32))
    sketch = attacks.sketch_columns(sketch_of(x))
    claims = attacks.histogram_labels(reply, LAYOUT, [(0, 0)], LOGISTIC, 0.5, sketch, False)
    assert sorted((c.value, c.label, c.rows) for c in claims) == [
        (0.5, 1.0, 1),
        (1.5, 0.0, 2),
        (2.5, 1.0, 1),
    ]
    assert attacks.single_row_slots(reply, LAYOUT, 1) == 2


def test_merged_slots_give_a_value_only_where_their_bins_hold_one():
    x = np.array([0.5, 1.5, 1.5, 1.5, 2.5, 2.5])  # every row negative: gradient p0 - 0
    reply = root_histograms(LAYOUT, x, np.full(len(x), 0.5, np.float32), least=2)
    sketch = attacks.sketch_columns(sketch_of(x))
    claims = attacks.histogram_labels(reply, LAYOUT, [(0, 0)], LOGISTIC, 0.5, sketch, True)
    # the lone 0.5 moved into the 1.5 slot: that slot holds two values; 2.5's slot one
    assert [(c.value, c.label, c.rows) for c in claims] == [(2.5, 0.0, 2)]
    assert attacks.single_row_slots(reply, LAYOUT, 1) == 0


def test_softmax_root_slots_give_each_class_from_its_own_tree():
    x = np.array([0.5, 1.5, 2.5])
    y = np.array([0, 1, 2])
    g = (np.float32(1 / 3) - np.eye(3, dtype=np.float32)[y]).astype(np.float32)
    bins = LAYOUT.bins(x.astype(np.float32)[:, None])
    trees, leaves = [GrowingTree.root()] * 3, [(0, 0), (1, 0), (2, 0)]
    reply = arrays(histogram_record(*histograms(LAYOUT, bins, g, np.ones_like(g), trees, leaves)))
    sketch = attacks.sketch_columns(sketch_of(x))
    claims = attacks.histogram_labels(reply, LAYOUT, leaves, SOFTMAX, 1 / 3, sketch, False)
    assert sorted((c.value, c.label) for c in claims) == [(0.5, 0.0), (1.5, 1.0), (2.5, 2.0)]


def test_a_single_row_slot_of_squared_error_gives_the_target():
    x = np.array([0.5, 1.5, 1.5])
    y = np.array([-0.75, 0.25, 1.0], np.float32)
    reply = root_histograms(LAYOUT, x, (np.float32(0) - y).astype(np.float32))
    sketch = attacks.sketch_columns(sketch_of(x))
    claims = attacks.histogram_labels(reply, LAYOUT, [(0, 0)], SQUARED, 0.0, sketch, False)
    assert [(c.value, c.label, c.rows) for c in claims] == [(0.5, -0.75, 1)]


# -- trees ------------------------------------------------------------------------------------
XGBOOST_MODEL = {
    "learner": {
        "gradient_booster": {
            "model": {
                "trees": [
                    {
                        "left_children": [1, -1, -1],
                        "split_indices": [0, 0, 0],
                        "split_conditions": [2.5, 0.1, -0.1],
                        "sum_hessian": [3.0, 1.0, 2.0],
                    }
                ]
            }
        }
    }
}


def test_xgboost_conditions_and_leaves_counted_by_their_hessian_sums():
    assert attacks.xgboost_conditions(XGBOOST_MODEL) == {0: {2.5}}
    assert attacks.xgboost_single_row_leaves(XGBOOST_MODEL, 1.0) == 1
    assert attacks.xgboost_single_row_leaves(XGBOOST_MODEL, 0.5) == 0


def test_xgboost_hist_splits_at_values_of_the_nodes_rows():
    xgboost = pytest.importorskip("xgboost")
    import json

    x = np.array([[1.5], [2.25], [3.0], [4.75], [5.5], [6.0]], np.float32)
    y = np.array([0, 0, 0, 1, 1, 1])
    params = {"tree_method": "hist", "objective": "binary:logistic", "min_child_weight": 0}
    booster = xgboost.train(params, xgboost.DMatrix(x, y), 1)
    conditions = attacks.xgboost_conditions(json.loads(booster.save_raw("json")))
    assert conditions and conditions[0] <= set(x[:, 0].tolist())


def newton_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A root and two leaves with rows of each class ``counts`` (2, K): FFGB's first learner of
    round 1, Newton values sum(p0 - y) / (sum(p0 (1 - p0)) + 1), only the leaves' travelling."""
    k = counts.shape[1]
    p0, n = 1 / k, counts.sum(axis=1, keepdims=True)
    leaves = (n * p0 - counts) / (n * p0 * (1 - p0) + 1)
    value = np.vstack([np.zeros((1, k)), leaves]).astype(np.float32)
    return np.array([1, -1, -1]), np.array([2, -1, -1]), value


def test_newton_values_give_every_nodes_rows():
    left, right, value = newton_tree(np.array([[0, 1, 0], [37, 0, 0]]))
    assert list(attacks.newton_rows(left, right, value, 1 / 3, 38)) == [38, 1, 37]
    assert attacks.single_row_tree_leaves(left, right, value, 1 / 3, 38) == 1
    # alone, a pure 37-row leaf's values fit 120 rows too: the root's 38 tell them apart
    assert list(attacks.newton_rows(left, right, value, 1 / 3, 200)) == [0, 0, 0]


def test_a_kddt_split_is_a_smoothed_rows_edge_with_its_sides_class():
    x = np.array([[0.3], [0.7]], np.float32)
    radius = 0.05
    items = data_boxes(x.astype(np.float64), np.eye(2), radius)
    tree = fit_kddt(items, np.zeros(1), np.ones(1), max_leaves=2).tree
    reply = {f"self/{name}": getattr(tree, name) for name in attacks.KDDT_FIELDS}
    (split,) = attacks.kddt_splits(reply, "self/", radius, classification=True)
    found = {(split.right, split.right_label), (split.left, split.left_label)}
    assert found & {(float(x[0, 0]), 0.0), (float(x[1, 0]), 1.0)}


# -- facts ------------------------------------------------------------------------------------
def test_facts_give_the_range_and_an_odd_columns_median():
    facts = {
        "rows": 5,
        "missing": {"a": 0, "b": 1},
        "ranges": {"a": [1.5, 9.0], "b": [-3.0, 4.0]},
        "scales": {"a": 4.0, "b": 2.5},
    }
    assert attacks.facts_values(facts) == {"a": [1.5, 9.0, 4.0], "b": [-3.0, 4.0]}


def test_bounds_give_each_features_min_and_max():
    bounds = {"lower": np.array([-1.5, 0.0]), "upper": np.array([2.0, 1.0])}
    assert attacks.bounds_values(bounds) == [(-1.5, 2.0), (0.0, 1.0)]


# -- replies the attacks do not recognise ------------------------------------------------------
def test_a_masked_reply_recovers_nothing():
    assert attacks.sketch_columns(MASKED) == []
    assert attacks.histogram_labels(MASKED, LAYOUT, [(0, 0)], LOGISTIC, 0.5, [], False) == []
    assert attacks.single_row_slots(MASKED, LAYOUT, 1) == 0
    assert attacks.kddt_splits(MASKED, "self/", 0.05, True) == []
    assert attacks.bounds_values(MASKED) == []
    assert attacks.facts_values(MASKED) == {}
    assert attacks.xgboost_conditions(MASKED) == {}
    assert attacks.first_trees({}, MASKED) == []
    assert attacks.kddt_arrays(MASKED, "self/") is None
    assert not attacks.plain_vector({})  # the family's record absent: the vector went masked


# -- a real run -------------------------------------------------------------------------------
def test_a_fedxgb_hist_round_on_the_penguins_sites_reveals_every_value(penguins, tmp_path):
    pytest.importorskip("xgboost")
    from benchmarks.privacy import Case, run_case

    case = Case("fedxgb-hist", "fedxgb-hist")
    sites = run_case(case, "penguins", penguins, 1, tmp_path)
    assert set(sites) == {"Biscoe", "Dream", "Torgersen"}
    for figures in sites.values():
        # fewer rows than the 1,024 quantiles: the sketch is the column
        assert figures["values"] == figures["numeric_values"] > 0
        assert figures["labels"] >= 0.99 * figures["rows"]


@pytest.mark.parametrize(
    ("plain", "protected"),
    [
        ("FedFW", "FedFW, secure aggregation"),
        ("FedFun, KDDT", "FedFun, KDDT, relay encryption"),
        ("FFGB, trees", "FFGB, trees, relay encryption"),
    ],
)
def test_a_secure_fedfw_run_and_sealed_fedfun_and_ffgb_runs_give_the_attacks_nothing(
    plain, protected, penguins, tmp_path
):
    from benchmarks.privacy import CASES, run_case

    cases = {case.name: case for case in CASES}
    before = run_case(cases[plain], "penguins", penguins, 2, tmp_path)
    after = run_case(cases[protected], "penguins", penguins, 2, tmp_path)
    for site, figures in after.items():
        # in plain the server reads every training reply (FedFun's KDDTs give values too)
        assert before[site]["replies_read"] == before[site]["replies"] > 0
        assert before[site]["values"] is None or before[site]["values"] > 0 or "FFGB" in plain
        # protected, as many replies come and the attacks read none of them
        assert figures["replies_read"] == 0 < figures["replies"] == before[site]["replies"]
        assert not figures["values"] and not figures["labels"]
        assert figures["facts"] == before[site]["facts"] == 0
