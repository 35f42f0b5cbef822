"""FFGB's tree learners by the histogram method: XGBoost grows one multi-output tree.

scikit-learn's exact CART (``DecisionTreeRegressor``) sorts every feature at every node, so its
fit grows as n log n per level; XGBoost's ``hist`` method buckets each feature once into at
most ``MAX_BIN`` quantile bins and then grows the tree from bin histograms. scikit-learn's own
histogram trees only exist inside ``HistGradientBoosting*``, one output per tree and with a
baseline added, so they cannot give FFGB's single vector-valued tree; XGBoost can
(``multi_strategy='multi_output_tree'``).

The split search is CART's least squares: with the square loss, unit Hessians and no L2 term
(``lambda=0``), XGBoost's gain is the reduction of the sum of squared errors, summed over the
outputs. Only the tree's *shape* (features and thresholds) is taken from XGBoost; the leaf
values are recomputed here as the float64 mean of the target over each leaf's rows, rounded to
float32, exactly as a CART leaf is. The tree then travels as any other tree
(``functions.trees.TreeArrays``, never XGBoost's format). The thresholds differ from CART's:
XGBoost's are bin edges, so the fitted function is not bit-identical; ``benchmarks.tree_fit``
measures how close the training loss stays.

XGBoost sends a row left when ``x < condition``; the project's trees (scikit-learn's convention)
when ``x <= threshold``. For float32 inputs the two agree when the threshold is the largest
float32 below the condition.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from functions.trees import LEAF, LEAF_FEATURE, TreeArrays
from oracles.boosting import Fitted
from oracles.tree_leaves import mean_values
from oracles.xgboost_local import THREADS, xgboost_module

if TYPE_CHECKING:
    import xgboost as xgb

MAX_BIN = 256  # XGBoost's default number of bins per feature


class HistTreeFitter:
    """Least-squares trees of at most ``depth`` levels on fixed points ``x``: the points are
    binned once (``QuantileDMatrix``), then each ``fit`` only swaps the target."""

    def __init__(self, x: np.ndarray, depth: int) -> None:
        self.x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
        self.matrix = xgboost_module().QuantileDMatrix(self.x, max_bin=MAX_BIN, nthread=THREADS)
        self.params = {
            "tree_method": "hist",
            "multi_strategy": "multi_output_tree",
            "objective": "reg:squarederror",
            "max_depth": depth,
            "max_bin": MAX_BIN,
            "eta": 1.0,
            "lambda": 0.0,
            "alpha": 0.0,
            "gamma": 0.0,
            "min_child_weight": 1.0,  # at least one row a leaf, as CART's min_samples_leaf=1
            "base_score": 0.0,
            "nthread": THREADS,
            "verbosity": 0,
        }

    def fit(self, target: np.ndarray) -> Fitted:
        """The tree fitted to ``target`` (n, n_outputs), with its values on the points."""
        target = np.asarray(target, dtype=np.float64).reshape(len(self.x), -1)
        self.matrix.set_label(target.astype(np.float32))
        booster = xgboost_module().train(self.params, self.matrix, num_boost_round=1)
        shape = tree_shape(booster, self.x.shape[1])
        tree = mean_values(shape, self.x, target)
        return Fitted(tree, tree.predict(self.x).astype(np.float64))


def tree_shape(booster: xgb.Booster, n_features: int) -> TreeArrays:
    """The first tree of ``booster`` as ``TreeArrays`` with zero values, its nodes renumbered in
    preorder from the root (so nodes XGBoost pruned but kept in its arrays are dropped)."""
    tree = json.loads(bytes(booster.save_raw("json")))["learner"]["gradient_booster"]["model"][
        "trees"
    ][0]
    left, right = tree["left_children"], tree["right_children"]
    feature, condition = tree["split_indices"], tree["split_conditions"]
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if left[node] != LEAF:
            stack += [right[node], left[node]]
    index = {node: i for i, node in enumerate(order)}
    out_left = np.full(len(order), LEAF, dtype=np.int32)
    out_right = np.full(len(order), LEAF, dtype=np.int32)
    out_feature = np.full(len(order), LEAF_FEATURE, dtype=np.int32)
    out_threshold = np.full(len(order), float(LEAF_FEATURE), dtype=np.float32)
    for i, node in enumerate(order):
        if left[node] != LEAF:
            out_left[i], out_right[i] = index[left[node]], index[right[node]]
            out_feature[i] = feature[node]
            out_threshold[i] = np.nextafter(np.float32(condition[node]), np.float32(-np.inf))
    return TreeArrays(
        out_left,
        out_right,
        out_feature,
        out_threshold,
        np.zeros((len(order), 1), dtype=np.float32),
        n_features,
    )
