"""Client half of ``fedxgb-hist``: a node's quantile sketch once, then per level of every tree
its histograms of gradient and hessian sums over its own rows (``oracles.hist_xgboost``).

A node keeps nothing between messages: each train message carries the checked global booster,
the agreed bin edges and the trees being grown, from which the node recomputes its margins
(XGBoost's own prediction, so the gradients are XGBoost's), its bins and the leaf of each row.
Only sums over its rows leave it (with ``fedxgb-hist.min-bin-count``, none over fewer rows
than that unless a leaf holds fewer); evaluation is the XGBoost baselines' (``client_app.fedxgb``).
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from client_app.fedxgb import booster_evaluation
from client_app.job import ClientJob
from client_app.node_info import describe_node
from functions.boosters import read_booster
from functions.histograms import histogram_record, read_growing, read_layout, sketch_record
from functions.protocol import (
    ARRAYS,
    EVALUATE,
    GROWING,
    HISTOGRAMS,
    LAYOUT,
    QUERY_NODE,
    QUERY_SKETCH,
    SKETCH,
    TRAIN,
)
from oracles.hist_xgboost import column_sketch, gradients, histograms, merge_small_slots
from oracles.xgboost_local import outputs
from run_config.fedxgb_hist import FedXgbHistSettings

Job = ClientJob[FedXgbHistSettings, None]


def _rows(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).reshape(len(x), -1)


def sketch(job: Job) -> RecordDict:
    """The node's quantiles of each training column, their counts and its rows."""
    x = _rows(job.data.x_train)
    points, counts = column_sketch(x, job.family.sketch_size)
    return RecordDict({SKETCH: sketch_record(points, counts, len(x))})


def train(job: Job) -> RecordDict:
    """The histograms of the open leaves over this node's rows, at the global booster's
    gradients."""
    hist, data = job.family, job.data
    spec = hist.spec(data.task)
    raw = read_booster(job.content[ARRAYS], spec)[1]
    layout = read_layout(job.content[LAYOUT], spec.num_feature, hist.max_bin)
    trees, leaves = read_growing(job.content[GROWING], layout, spec.outputs, hist.max_depth)
    x = _rows(data.x_train)
    g, h = gradients(hist.objective(data.task), outputs(raw, x), data.y_train)
    sums = histograms(layout, layout.bins(x), g, h, trees, leaves)
    merge_small_slots(layout, *sums, hist.min_bin_count)
    return RecordDict({HISTOGRAMS: histogram_record(*sums)})


def evaluate(job: Job) -> RecordDict:
    """The global booster's loss sums on this node's test shard and training data."""
    hist, task = job.family, job.data.task
    spec = hist.spec(task)
    return booster_evaluation(
        read_booster(job.content[ARRAYS], spec)[1], spec, hist.loss(task), job.data
    )


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node, QUERY_SKETCH: sketch}
