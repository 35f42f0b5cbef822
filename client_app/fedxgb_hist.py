"""Client half of ``fedxgb-hist``: a node's quantile sketch once, then per level of every tree
its histograms of gradient and hessian sums over its own rows (``oracles.hist_xgboost``).

A node keeps only its margins and gradients, the bin edges and its rows' bins between the levels
of a round: an iteration's first train message carries the checked global booster (or, to a
node that holds its first trees, only the others), whose margins (XGBoost's own prediction, or
the last round's plus the new trees' leaf values, which is the same sum) give the gradients the
node keeps for the deeper levels, and the agreed edges, from which it bins its rows once a run
(the bins are kept with the edges' digest, and binned again only when the edges change); every
train message carries the trees being grown, from
which the node finds the leaf of each row (walking on from the node each row reached at the
level before, which it keeps with that level's trees).
Only sums over its rows leave it (with ``fedxgb-hist.min-bin-count``, none over fewer rows
than that unless a leaf holds fewer); evaluation is the XGBoost baselines' (``client_app.fedxgb``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client_app.fedxgb import booster_evaluation
from client_app.job import ClientJob
from client_app.node_info import describe_node
from client_app.node_state import LostStateError
from client_app.private_noise import with_noise
from functions.bins import BinLayout, GrowingTree
from functions.boosters import BoosterSpec, read_booster
from functions.errors import DecodeError
from functions.histograms import (
    dense_histogram_record,
    grid_record,
    histogram_record,
    read_growing,
    read_layout,
    sketch_record,
)
from functions.params import arrays_to_record
from functions.protocol import (
    ARRAYS,
    CONFIG,
    DENSE_HISTOGRAMS,
    DP_NOISE_STD,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    GRID_CELLS,
    GROWING,
    HISTOGRAMS,
    LAYOUT,
    METRICS,
    QUERY_NODE,
    QUERY_SKETCH,
    SERVER_ROUND,
    SKETCH,
    TRAIN,
    TREES_DIGEST,
    TREES_HELD,
)
from functions.xgboost_trees import Tree, trees_digest
from oracles.hist_kernels import add_leaves, add_trees
from oracles.hist_xgboost import (
    carried_leaves,
    column_sketch,
    gradients,
    grid_counts,
    histograms,
    merge_small_slots,
    row_nodes,
)
from oracles.xgboost_local import outputs
from run_config.fedxgb_hist import FedXgbHistSettings

Job = ClientJob[FedXgbHistSettings, None]
# what a node keeps in its Context.state between the levels of a round
KEPT, EDGES, KEPT_ROUND = "fedxgb-hist.kept", "fedxgb-hist.edges", "fedxgb-hist.round"
DIGEST = "edges-digest"  # in KEPT_ROUND: the edges the kept bins are of
TREES = "trees"  # in KEPT_ROUND: how many trees the margins are of (their digest: TREES_DIGEST)
SPEC_FROM_DATA = ("num_class", "num_feature", "binary")  # in KEPT_ROUND: the spec's part that
# the node's data gives (the deeper levels read no rows)
NODES, NODES_TREES = "fedxgb-hist.nodes", "fedxgb-hist.nodes-trees"  # each row's node, and the
# trees of the level it was found at (a deeper level of the same trees walks on from there)


def _rows(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).reshape(len(x), -1)


def sketch(job: Job) -> RecordDict:
    """The node's quantiles of each training column, their counts and its rows; or, asked for
    the grid (``fedxgb-hist.bins='grid'``), its counts in each cell of the fixed grid, with its
    share of the noise when the server asks (``dp-noise-std``)."""
    x = _rows(job.data.x_train)
    config = job.content.get(CONFIG)
    cells = config.get(GRID_CELLS) if config is not None else None
    if cells is not None:
        if cells != job.family.sketch_size:
            raise DecodeError(f"{GRID_CELLS}={cells!r}, not the run's {job.family.sketch_size}")
        counts, rows = grid_counts(x, cells), np.array([len(x)])
        std = _noise_std(config)
        if std:
            counts, rows = with_noise([counts, rows], std)
            return RecordDict({SKETCH: arrays_to_record({"cells": counts.ravel(), "rows": rows})})
        return RecordDict({SKETCH: grid_record(counts, len(x))})
    points, counts = column_sketch(x, job.family.sketch_size)
    return RecordDict({SKETCH: sketch_record(points, counts, len(x))})


def train(job: Job) -> RecordDict:
    """The histograms of the open leaves over this node's rows, at the global booster's
    gradients: the occupied slots, or every slot when they go into a secure sum
    (``dense-histograms``). When a round's first level asks (``evaluate-first``), the booster
    it brings (the last round's) is evaluated too, as ``evaluate`` would."""
    hist = job.family
    spec, margins, layout, bins, (g, h), raw = _round_start(job)
    trees, leaves = read_growing(job.content[GROWING], layout, spec.outputs, hist.max_depth)
    nodes = row_nodes(layout, bins, trees, _kept_nodes(job, layout, trees, spec.outputs))
    job.state[NODES] = ArrayRecord({"nodes": Array(nodes)})
    job.state[NODES_TREES] = job.content[GROWING]
    sums = histograms(layout, bins, g, h, trees, leaves, nodes)
    merge_small_slots(layout, *sums, hist.min_bin_count)
    config = job.content[CONFIG]
    dense = config.get(DENSE_HISTOGRAMS, False) is True  # a secure sum's
    std = _noise_std(config)
    if dense and std:  # its share of the noise, every slot, counts too
        noisy = with_noise(list(sums), std)
        record = arrays_to_record(dict(zip(("grad", "hess", "count"), (a.ravel() for a in noisy))))
    else:
        record = (dense_histogram_record if dense else histogram_record)(*sums)
    reply = RecordDict({HISTOGRAMS: record})
    if EVALUATE_FIRST in job.content[CONFIG]:
        if margins is None:  # only a round's first level, with the booster, asks
            raise DecodeError(f"{EVALUATE_FIRST} came without the booster to evaluate")
        reply[EVALUATION] = booster_evaluation(
            raw,
            spec,
            hist.loss(job.data.task),
            job.data,
            margins["train"].astype(np.float64),
            margins["test"].astype(np.float64),
        )[METRICS]
    return reply


def _kept_nodes(
    job: Job, layout: BinLayout, trees: Sequence[GrowingTree], outputs: int
) -> np.ndarray | None:
    """Each row's node at this round's last level, when the node kept them and these trees
    extend that level's (``GrowingTree.extends``); None: walk from the roots."""
    if NODES not in job.state or NODES_TREES not in job.state:
        return None
    kept, _ = read_growing(job.state[NODES_TREES], layout, outputs, job.family.max_depth)
    if len(kept) != len(trees) or not all(t.extends(k) for t, k in zip(trees, kept)):
        return None
    return job.state[NODES]["nodes"].numpy()


def _noise_std(config: ConfigRecord) -> float:
    """The noise the server asks this node to add (``dp-noise-std``: 0 for none)."""
    std = config.get(DP_NOISE_STD, 0.0)
    if not isinstance(std, float) or not 0.0 <= std < float("inf"):
        raise DecodeError(f"{DP_NOISE_STD}={std!r} is not a standard deviation")
    return std


Level = tuple[
    BoosterSpec,
    dict[str, np.ndarray] | None,
    BinLayout,
    np.ndarray,
    tuple[np.ndarray, np.ndarray],
    bytes | None,
]


def _round_start(job: Job) -> Level:
    """The run's booster spec, the booster's margins on the node's training rows and test shard
    (None at the deeper levels), the bin edges, the rows' bins, their gradients and hessians
    and the checked booster (None at the deeper levels): read and computed at a round's first
    level, which carries the booster and the edges (``_first_level``), and kept in the node's
    state for the deeper levels, which carry neither and so read none of the node's rows
    (``job.data``: no file read where the app process is new); ``LostStateError`` when the
    node holds none of this round (it restarted mid-iteration: the server drops the iteration
    and starts again)."""
    server_round = int(job.content[CONFIG][SERVER_ROUND])
    if ARRAYS in job.content:
        return _first_level(job, server_round)
    kept = job.state.get(KEPT_ROUND)
    if kept is None or int(kept[SERVER_ROUND]) != server_round:
        raise LostStateError(f"this node holds no gradients of round {server_round}")
    spec = job.family.spec_of(*(kept[f"spec-{name}"] for name in SPEC_FROM_DATA))
    layout = read_layout(job.state[EDGES], spec.num_feature, job.family.max_bin)
    arrays = job.state[KEPT]
    gradients_ = (arrays["grad"].numpy(), arrays["hess"].numpy())
    return spec, None, layout, arrays["bins"].numpy(), gradients_, None


def _first_level(job: Job, server_round: int) -> Level:
    """``_round_start`` at a round's first level: the margins as XGBoost's prediction gives
    them (exact in float32), the rows binned once a run, all kept in the node's state."""
    spec, x = job.family.spec(job.data.task), _rows(job.data.x_train)
    layout = read_layout(job.content[LAYOUT], spec.num_feature, job.family.max_bin)
    digest = _edges_digest(layout)
    kept = job.state.get(KEPT_ROUND)
    if kept is not None and kept.get(DIGEST) == digest:  # the run's edges: binned already
        bins = job.state[KEPT]["bins"].numpy()
    else:
        bins = layout.bins(x).astype(np.uint16)  # at most max-bin (<= 1024) + 1
    margins, count, digest_of_trees, raw = _margins(
        job,
        spec,
        {"train": x, "test": _rows(job.data.x_test)},
        partial(_carried_leaves, job, layout, bins, x, spec.outputs),
    )
    g, h = gradients(job.family.objective(job.data.task), margins["train"], job.data.y_train)
    job.state[KEPT] = ArrayRecord(
        {
            "grad": Array(g),
            "hess": Array(h),
            "bins": Array(bins),
            **{f"margins-{name}": Array(m) for name, m in margins.items()},
        }
    )
    for key in (NODES, NODES_TREES):  # a new iteration's trees start at their roots
        if key in job.state:
            del job.state[key]
    job.state[EDGES] = job.content[LAYOUT]
    job.state[KEPT_ROUND] = ConfigRecord(
        {
            SERVER_ROUND: server_round,
            DIGEST: digest,
            TREES: count,
            TREES_DIGEST: digest_of_trees,
            **{f"spec-{name}": getattr(spec, name) for name in SPEC_FROM_DATA},
        }
    )
    return spec, margins, layout, bins, (g, h), raw


def _carried_leaves(
    job: Job,
    layout: BinLayout,
    bins: np.ndarray,
    x: np.ndarray,
    outputs: int,
    trees: Sequence[Tree],
) -> np.ndarray | None:
    """Each training row's leaf in ``trees`` when they are the last iteration's finished, from
    the node the row reached at its last level (``hist_xgboost.carried_leaves``); None when the
    node kept no such level, the trees are others, or a value is infinite."""
    if NODES not in job.state or NODES_TREES not in job.state or np.isinf(x).any():
        return None
    kept, _ = read_growing(job.state[NODES_TREES], layout, outputs, job.family.max_depth)
    return carried_leaves(layout, bins, trees, kept, job.state[NODES]["nodes"].numpy())


def _margins(
    job: Job,
    spec: BoosterSpec,
    rows: dict[str, np.ndarray],
    train_leaves: Callable[[Sequence[Tree]], np.ndarray | None],
) -> tuple[dict[str, np.ndarray], int, bytes, bytes | None]:
    """The global booster's margins (float32) on each set of the node's ``rows`` (its training
    rows and test shard), its tree count and digest (``trees_digest``), and its checked bytes
    (None when the message brought only its last trees).

    The margins kept from the last round plus the new trees' leaf values
    (``oracles.hist_kernels.add_trees``: XGBoost's own sum, bit for bit) when the node holds
    the booster's first trees: the server says so (``trees-held``, with their digest) and sends
    only the others, or sends the whole booster whose first trees are the ones held (the
    training rows' leaves in the last iteration's trees from ``train_leaves`` when it knows
    them, ``hist_kernels.add_leaves``); else XGBoost's prediction of the whole booster.
    ``LostStateError`` when the server sent only the last trees and the node does not hold the
    first: it is sent the whole booster next time."""
    booster, raw = read_booster(job.content[ARRAYS], spec)
    config, kept = job.content[CONFIG], job.state.get(KEPT_ROUND)
    held = int(kept.get(TREES, -1)) if kept is not None else -1
    if TREES_HELD in config:
        first = config[TREES_HELD]
        if (
            type(first) is not int
            or first != held
            or kept.get(TREES_DIGEST) != config.get(TREES_DIGEST)
        ):
            raise LostStateError(
                f"this node does not hold the booster's first {first} trees; the server will "
                "send the whole booster"
            )
        new, raw = booster.trees, None
    elif 0 <= held <= len(booster.trees) and kept.get(TREES_DIGEST) == trees_digest(
        booster.trees[:held]
    ):
        new = booster.trees[held:]
    else:
        margins = {name: outputs(raw, x).astype(np.float32) for name, x in rows.items()}
        return margins, len(booster.trees), trees_digest(booster.trees), raw
    margins = {}
    leaves = train_leaves(new) if new else None
    for name, x in rows.items():
        margins[name] = job.state[KEPT][f"margins-{name}"].numpy().copy()
        if name == "train" and leaves is not None:
            add_leaves(margins[name], new, leaves, held)
        else:
            add_trees(margins[name], x, new, held)
    return margins, held + len(new), trees_digest(new, kept[TREES_DIGEST]), raw


def _edges_digest(layout: BinLayout) -> bytes:
    """SHA-256 of the bin edges: the same edges (every round of a run) bin the rows alike."""
    sha = hashlib.sha256()
    for edges in layout.edges:
        sha.update(
            len(edges).to_bytes(8, "little") + np.ascontiguousarray(edges, np.float32).tobytes()
        )
    return sha.digest()


def evaluate(job: Job) -> RecordDict:
    """The global booster's loss sums on this node's test shard and training data."""
    hist, task = job.family, job.data.task
    spec = hist.spec(task)
    return booster_evaluation(
        read_booster(job.content[ARRAYS], spec)[1], spec, hist.loss(task), job.data
    )


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node, QUERY_SKETCH: sketch}
