"""Weak-learning oracle fits, hand-written MLP path vs autograd + torch.optim.Adam, side by side.

One fit as in the authors' MNIST setup: 400 points of mnist-5k (one of 10 label-sort clients),
MLP 784-32-32-10 (leaky ReLU), 500 Adam steps on minibatches of 128, lr 0.005; WO2 (least
squares, FFGB) and WO-infinity (smooth sup, p = 8, FFGB.C). One torch thread, as in the apps;
the two paths alternate, best of ``--repeats``.

    python -m benchmarks.oracle_speed            # about 1 min on one core
    python -m benchmarks.oracle_speed --quick
"""

from __future__ import annotations

import time

import numpy as np
import torch

from benchmarks.common import md_table, parser, results_dir, write_report
from functions.networks import NetworkSpec
from oracles.weak_learning import OracleSettings, fit_least_squares, fit_sup_norm
from tasks.datasets import load_task

POINTS = 400


def main() -> None:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--repeats", type=int, default=3)
    args = cli.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    task = load_task("mnist-5k")
    x = task.x_train[:POINTS].reshape(POINTS, -1).astype(np.float32)
    target = np.random.default_rng(0).normal(size=(POINTS, 10)) * 0.3
    spec = NetworkSpec((x.shape[1], 32, 32, 10), "leaky_relu")
    steps = 50 if args.quick else 500
    settings = OracleSettings(steps=steps, lr=0.005, batch_size=128, sup_p=8.0)
    oracles = {"WO2 (FFGB)": fit_least_squares, "WO-infinity, p = 8 (FFGB.C)": fit_sup_norm}
    rows = []
    for name, fit in oracles.items():
        best = {True: float("inf"), False: float("inf")}
        values = {}
        for _ in range(1 if args.quick else args.repeats):
            for fast in (True, False):
                began = time.perf_counter()
                values[fast] = fit(spec, x, target, settings, seed=1, fast=fast).values
                best[fast] = min(best[fast], time.perf_counter() - began)
        gap = float(np.abs(values[True] - values[False]).max())
        rows.append(
            [
                name,
                f"{best[False]:.3f}",
                f"{best[True]:.3f}",
                f"{best[False] / best[True]:.2f}x",
                f"{gap:.1e}",
            ]
        )
    table = md_table(
        [
            "oracle",
            "autograd + Adam s",
            "hand-written s",
            "speed-up",
            "max |difference| of fitted values",
        ],
        rows,
    )
    body = f"""\
One fit: {POINTS} mnist-5k points, MLP 784-32-32-10, {steps} Adam steps, batch 128, one torch
thread; best of {1 if args.quick else args.repeats}, the two paths alternating.

{table}
"""
    write_report(
        results_dir(args.quick) / "oracle_speed.md",
        "Weak-learning oracles: hand-written MLP path vs autograd",
        time.perf_counter() - start,
        body,
    )
    print(table)


if __name__ == "__main__":
    main()
