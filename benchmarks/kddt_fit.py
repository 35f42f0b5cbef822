"""KDDT fit time on digits: data only, and FedFun-regularised to a neighbour's tree.

Features rescaled as in FedFun (appendix B) so data plus kernel fill the unit cube:
x' = (x + delta) / (1 + 2 delta), delta = 0.1, box kernel radius r = delta / (1 + 2 delta);
labels one-hot; max_leaves = min(n, 1000). (a) all training points; (b) half of them plus the
leaves of a tree fitted on the other half as items of density 100 (lambda). Fit time is the mean
of 3 fits; accuracies are of the unsmoothed tree (argmax of its leaf value); for (b) also its
exact squared L2 distance to the neighbour's tree (mean time of 3 evaluations).

    python -m benchmarks.kddt_fit    # about 20 s on one core
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import RESULTS, md_table, write_report
from functions.kddt import KDDT, squared_distance
from oracles.kddt import Boxes, data_boxes, fit_kddt, tree_boxes
from tasks.datasets import load_task

DELTA = 0.1
WEIGHT = 100.0
REPEATS = 3


def accuracy(tree: KDDT, x: np.ndarray, y: np.ndarray) -> str:
    return f"{np.mean(tree.predict(x).argmax(axis=1) == y):.3f}"


def timed_fit(
    items: Boxes, lower: np.ndarray, upper: np.ndarray, max_leaves: int
) -> tuple[KDDT, float]:
    """The fitted tree and the mean wall time of ``REPEATS`` fits."""
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        tree = fit_kddt(items, lower, upper, max_leaves)
        times.append(time.perf_counter() - began)
    return tree, float(np.mean(times))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    start = time.perf_counter()
    task = load_task("digits", seed=0, test_fraction=0.5)
    scale = 1 + 2 * DELTA
    x, x_test = (task.x_train + DELTA) / scale, (task.x_test + DELTA) / scale
    y, y_test = task.y_train, task.y_test
    radius = DELTA / scale
    one_hot = np.eye(task.num_classes)[y]
    n, p = x.shape
    lower, upper = np.zeros(p), np.ones(p)
    max_leaves = min(n, 1000)
    half = n // 2
    mine, theirs = slice(0, half), slice(half, n)

    rows = []
    full = data_boxes(x, one_hot, radius)
    tree, seconds = timed_fit(full, lower, upper, max_leaves)
    rows.append(
        [
            "(a) data only, all points",
            len(full.mass),
            tree.n_leaves,
            f"{seconds:.2f}",
            accuracy(tree, x, y),
            "",
            accuracy(tree, x_test, y_test),
            "",
        ]
    )
    neighbour_items = data_boxes(x[theirs], one_hot[theirs], radius)
    neighbour, seconds = timed_fit(neighbour_items, lower, upper, max_leaves)
    rows.append(
        [
            "(b0) neighbour: data only, other half",
            len(neighbour_items.mass),
            neighbour.n_leaves,
            f"{seconds:.2f}",
            accuracy(neighbour, x[theirs], y[theirs]),
            accuracy(neighbour, x, y),
            accuracy(neighbour, x_test, y_test),
            "",
        ]
    )
    items = Boxes.concat(data_boxes(x[mine], one_hot[mine], radius), tree_boxes(neighbour, WEIGHT))
    tree, seconds = timed_fit(items, lower, upper, max_leaves)
    began = time.perf_counter()
    for _ in range(REPEATS):
        distance = squared_distance(tree, neighbour)
    distance_ms = (time.perf_counter() - began) / REPEATS * 1e3
    rows.append(
        [
            f"(b) half + neighbour's {neighbour.n_leaves} leaves, weight {WEIGHT:g}",
            len(items.mass),
            tree.n_leaves,
            f"{seconds:.2f}",
            accuracy(tree, x[mine], y[mine]),
            accuracy(tree, x, y),
            accuracy(tree, x_test, y_test),
            f"{distance:.3f} ({distance_ms:.0f} ms)",
        ]
    )

    body = (
        f"Digits: {n} training points, {p} features; delta {DELTA}, kernel radius {radius:.4f}, "
        f"max_leaves {max_leaves}, fit time = mean of {REPEATS} fits.\n\n"
        + md_table(
            [
                "tree",
                "items",
                "leaves",
                "fit s",
                "train acc (own data)",
                "train acc (all)",
                "test acc",
                "squared distance to neighbour (time)",
            ],
            rows,
        )
    )
    write_report(
        RESULTS / "kddt_fit.md", "KDDT fit time on digits", time.perf_counter() - start, body
    )


if __name__ == "__main__":
    main()
