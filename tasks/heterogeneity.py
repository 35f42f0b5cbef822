"""How far each client's data is from the pooled data: the omega of the FFGB theorems.

FFGB.C's radius grows with mean_i TV(alpha, alpha_i) and FFGB.L's with mean_i W1(alpha, alpha_i),
where alpha_i is client i's feature distribution and alpha the pooled (training-set) one.
Both are estimated from samples, at most ``max_points`` per side, drawn with the seed:

- w1: exact optimal transport (POT ``ot.emd2``) between the two uniform empirical measures,
  Euclidean cost on the task's (preprocessed, flattened) features. Finite samples bias it
  upwards: even an iid client is at a small positive distance.
- tv: classifier two-sample estimate. With equal numbers of client and pooled points, the best
  possible accuracy at telling them apart is (1 + TV) / 2, so TV ~= 2 * accuracy - 1 (clipped
  to [0, 1]), the accuracy being that of a standardised logistic regression under 5-fold
  cross-validation. A linear classifier under-estimates what a perfect one would find, so
  this is a lower estimate; it is NaN for a client with a single sample.
- tv_labels: plug-in TV between the client's and the pooled label frequencies (regression:
  target deciles), the label shift that FFGB's semi-heterogeneous setting allows.

CLI: ``python -m tasks.heterogeneity --task digits --partitioning label-sort --num-partitions 10``.
"""

import argparse

import numpy as np
import ot
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from tasks.datasets import TASK_NAMES, as_class_labels, load_task
from tasks.partitioning import PARTITIONING_NAMES, partition

MAX_POINTS = 500
CV_FOLDS = 5


def _subsample(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` rows drawn without replacement, flattened to float64 vectors."""
    rows = rng.choice(len(x), size=size, replace=False)
    return np.asarray(x[np.sort(rows)], dtype=np.float64).reshape(size, -1)


def wasserstein1(
    client: np.ndarray, pooled: np.ndarray, max_points: int = MAX_POINTS, seed: int = 0
) -> float:
    """Empirical W1 between two samples (Euclidean cost), each subsampled to ``max_points``."""
    rng = np.random.default_rng(seed)
    a = _subsample(client, min(len(client), max_points), rng)
    b = _subsample(pooled, min(len(pooled), max_points), rng)
    cost = ot.dist(a, b, metric="euclidean")
    return float(ot.emd2(ot.unif(len(a)), ot.unif(len(b)), cost))


def tv_classifier(
    client: np.ndarray, pooled: np.ndarray, max_points: int = MAX_POINTS, seed: int = 0
) -> float:
    """Classifier estimate of TV: 2 * cross-validated balanced accuracy - 1, in [0, 1]."""
    size = min(len(client), len(pooled), max_points)
    if size < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    x = np.concatenate([_subsample(client, size, rng), _subsample(pooled, size, rng)])
    y = np.repeat([1, 0], size)
    folds = StratifiedKFold(n_splits=min(CV_FOLDS, size), shuffle=True, random_state=seed)
    model = make_pipeline(StandardScaler(), LogisticRegression(solver="liblinear"))
    predicted = cross_val_predict(model, x, y, cv=folds)
    return float(np.clip(2.0 * balanced_accuracy_score(y, predicted) - 1.0, 0.0, 1.0))


def tv_labels(client_labels: np.ndarray, pooled_labels: np.ndarray) -> float:
    """Plug-in TV between two label frequency vectors: half the L1 distance."""
    length = int(max(client_labels.max(), pooled_labels.max())) + 1
    p = np.bincount(client_labels, minlength=length) / len(client_labels)
    q = np.bincount(pooled_labels, minlength=length) / len(pooled_labels)
    return float(0.5 * np.abs(p - q).sum())


def heterogeneity_report(
    task: str,
    partitioning: str,
    num_partitions: int,
    seed: int = 0,
    max_points: int = MAX_POINTS,
    **params: float,
) -> dict:
    """Per-client sizes, w1, tv, tv_labels (lists) and their means, for one partitioning.

    The task is loaded and partitioned with ``seed``; ``params`` go to the partitioner
    (s, alpha, labels_per_client).
    """
    data = load_task(task, seed=seed)
    parts = partition(
        partitioning,
        num_partitions,
        data.y_train,
        data.x_train,
        seed,
        num_classes=data.num_classes or None,
        **params,
    )
    pooled = data.x_train
    labels = as_class_labels(data.y_train)
    w1 = [wasserstein1(pooled[idx], pooled, max_points, seed + i) for i, idx in enumerate(parts)]
    tv = [tv_classifier(pooled[idx], pooled, max_points, seed + i) for i, idx in enumerate(parts)]
    tv_y = [tv_labels(labels[idx], labels) for idx in parts]
    return {
        "task": task,
        "partitioning": partitioning,
        "num_partitions": num_partitions,
        "seed": seed,
        "params": dict(params),
        "sizes": [len(idx) for idx in parts],
        "w1": w1,
        "tv": tv,
        "tv_labels": tv_y,
        "mean_w1": float(np.mean(w1)),
        "mean_tv": float(np.mean(tv)),
        "mean_tv_labels": float(np.mean(tv_y)),
    }


def _format(report: dict) -> str:
    """A table with one row per client and a row of means."""
    lines = [
        f"task={report['task']} partitioning={report['partitioning']} "
        f"num-partitions={report['num_partitions']} seed={report['seed']} {report['params']}",
        f"{'client':>6} {'size':>6} {'W1':>9} {'TV':>6} {'TV(y)':>6}",
    ]
    rows = zip(report["sizes"], report["w1"], report["tv"], report["tv_labels"])
    for client, (size, w1, tv, tv_y) in enumerate(rows):
        lines.append(f"{client:>6} {size:>6} {w1:>9.4f} {tv:>6.3f} {tv_y:>6.3f}")
    lines.append(
        f"{'mean':>6} {'':>6} {report['mean_w1']:>9.4f} {report['mean_tv']:>6.3f} "
        f"{report['mean_tv_labels']:>6.3f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the heterogeneity table for the partitioning given on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="digits", choices=TASK_NAMES)
    parser.add_argument("--partitioning", default="iid", choices=PARTITIONING_NAMES)
    parser.add_argument("--num-partitions", type=int, default=10)
    parser.add_argument("--s", type=float, default=0.1)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--labels-per-client", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-points", type=int, default=MAX_POINTS)
    args = parser.parse_args(argv)
    report = heterogeneity_report(
        args.task,
        args.partitioning,
        args.num_partitions,
        args.seed,
        args.max_points,
        s=args.s,
        alpha=args.alpha,
        labels_per_client=args.labels_per_client,
    )
    print(_format(report))


if __name__ == "__main__":
    main()
