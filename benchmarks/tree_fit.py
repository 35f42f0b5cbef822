"""FFGB's tree fit: scikit-learn's exact CART against XGBoost's histogram method (issue 24 item 2).

One node's boosting round, as ``client_app.ffgb`` runs it with tree learners: K = 3 local steps
of functional gradient descent on the cross-entropy loss from f = 0, each fitting one tree of
depth D to the negative gradient (one-hot label minus softmax(f)) and stepping f += eta_k h with
the paper's eta_k = 10 / (k + 1). The histogram fitter bins the node's points once a round
(``oracles.hist_trees.HistTreeFitter``); that time is counted in its round. Both fitters run in
this process, one after the other, on one thread, each case repeated and the fastest repeat
kept (noise only ever adds time).

Reported per case: seconds per round (CART, histogram) and their ratio (the speed-up); each
fitter's training error: the mean over the K fits of the mean squared error of the fitted tree
to its target; and the cross-entropy of f on the node's points after the K steps, both ways.

    python -m benchmarks.tree_fit            # about 4 min on one core
    python -m benchmarks.tree_fit --quick    # the small cases only
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.datasets import make_classification

from benchmarks.common import md_table, parser, results_dir, write_report
from oracles.boosting import Fitted
from oracles.hist_trees import HistTreeFitter
from oracles.weak_learning import fit_tree
from tasks.datasets import load_task

STEPS = 3  # ffgb.local-steps' default
ETA0 = 10.0  # ffgb.eta0's default for ffgb
REPEATS = 3


@dataclass(frozen=True)
class Case:
    """One node's training points: ``name``, features (n, d) and integer labels."""

    name: str
    x: np.ndarray
    y: np.ndarray


def bundled(task: str) -> Case:
    data = load_task(task, 0)
    return Case(
        task,
        data.x_train.reshape(len(data.x_train), -1).astype(np.float32),
        data.y_train.astype(np.int64),
    )


def generated(rows: int, classes: int) -> Case:
    x, y = make_classification(
        n_samples=rows, n_features=20, n_informative=10, n_classes=classes, random_state=0
    )
    return Case(f"make_classification {rows:,}x20, {classes} classes", x.astype(np.float32), y)


def softmax(f: np.ndarray) -> np.ndarray:
    e = np.exp(f - f.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def boosting_round(case: Case, fit: Callable[[np.ndarray], Fitted]) -> tuple[float, float]:
    """K steps from f = 0: the mean squared error of each fit to its target (mean over the
    steps) and the cross-entropy of f after them."""
    onehot = np.eye(int(case.y.max()) + 1)[case.y]
    f = np.zeros_like(onehot)
    errors = []
    for k in range(STEPS):
        target = onehot - softmax(f)
        fitted = fit(target)
        errors.append(float(((fitted.values - target) ** 2).mean()))
        f = f + ETA0 / (k + 1) * fitted.values
    p = softmax(f)[np.arange(len(case.y)), case.y]
    return float(np.mean(errors)), float(-np.log(np.maximum(p, 1e-300)).mean())


def cart_round(case: Case, depth: int) -> tuple[float, float, float]:
    began = time.perf_counter()
    error, loss = boosting_round(case, lambda target: fit_tree(case.x, target, depth, 0))
    return time.perf_counter() - began, error, loss


def hist_round(case: Case, depth: int) -> tuple[float, float, float]:
    began = time.perf_counter()
    fitter = HistTreeFitter(case.x, depth)
    error, loss = boosting_round(case, fitter.fit)
    return time.perf_counter() - began, error, loss


def fastest(
    run: Callable[[Case, int], tuple[float, float, float]], case: Case, depth: int
) -> tuple[float, float, float]:
    """The fastest of ``REPEATS`` rounds (the fits are deterministic: same error and loss)."""
    return min((run(case, depth) for _ in range(REPEATS)), key=lambda r: r[0])


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    cases = [
        bundled("iris"),
        bundled("wine"),
        bundled("breast-cancer"),
        bundled("digits"),
        generated(2_000, 2),
        generated(2_000, 10),
        generated(5_000, 2),
    ]
    if not args.quick:
        cases += [
            generated(20_000, 2),
            generated(20_000, 10),
            generated(50_000, 2),
            generated(50_000, 5),
            generated(200_000, 2),
        ]
    rows, began = [], time.perf_counter()
    for case in cases:
        for depth in (3, 6):
            cart = fastest(cart_round, case, depth)
            hist = fastest(hist_round, case, depth)
            rows.append(
                [
                    case.name,
                    f"{len(case.x):,}",
                    depth,
                    f"{cart[0]:.4f}",
                    f"{hist[0]:.4f}",
                    f"{cart[0] / hist[0]:.2f}",
                    f"{cart[1]:.2e}",
                    f"{hist[1]:.2e}",
                    f"{cart[2]:.4f}",
                    f"{hist[2]:.4f}",
                ]
            )
            print(*rows[-1], sep=" | ", flush=True)
    table = md_table(
        [
            "node's points",
            "rows",
            "depth",
            "CART s/round",
            "hist s/round",
            "speed-up",
            "fit MSE, CART",
            "fit MSE, hist",
            "CE after K, CART",
            "CE after K, hist",
        ],
        rows,
    )
    write_report(
        results_dir(args.quick) / "tree_fit.md",
        "FFGB tree fit: CART against histogram",
        time.perf_counter() - began,
        table,
    )


if __name__ == "__main__":
    main()
