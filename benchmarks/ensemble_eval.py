"""Ensemble evaluation throughput: batched (functions/batched.py) vs a loop over learners.

f(x) = sum_k w_k h_k(x) on 1,000 inputs of 64 features with 10 outputs (digits-sized), for
ensembles of 100, 1,000 and 5,000 depth-3 regression trees or MLPs 64-32-32-10 (leaky ReLU,
FFGB's learner), one torch thread as in the apps. Best of 3 repetitions each.

    python -m benchmarks.ensemble_eval            # about 1 min on 2 cores
    python -m benchmarks.ensemble_eval --quick
"""

from __future__ import annotations

import time

import numpy as np
import torch
from sklearn.tree import DecisionTreeRegressor

from benchmarks.common import md_table, parser, results_dir, write_report
from functions.batched import weighted_sum
from functions.networks import NetworkSpec, build
from functions.trees import from_sklearn

N_INPUTS, N_FEATURES, N_OUTPUTS = 1000, 64, 10
DISTINCT_TREES = 50


def learners(kind: str, count: int, rng: np.random.Generator) -> list:
    """``count`` learners (trees cycle through DISTINCT_TREES fitted ones: same cost per tree)."""
    if kind == "tree":
        x = rng.normal(size=(500, N_FEATURES))
        fitted = [from_sklearn(DecisionTreeRegressor(max_depth=3, random_state=i).fit(
            x, rng.normal(size=(500, N_OUTPUTS))), value_dtype=np.float32)
            for i in range(DISTINCT_TREES)]
        return [fitted[i % DISTINCT_TREES] for i in range(count)]
    spec = NetworkSpec((N_FEATURES, 32, 32, N_OUTPUTS), "leaky_relu")
    return [build(spec) for _ in range(count)]


def best_of(repeats: int, run) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_INPUTS, N_FEATURES)).astype(np.float32)
    sizes = [100, 1000] if args.quick else [100, 1000, 5000]
    rows = []
    for kind in ("tree", "mlp"):
        for count in sizes:
            hs = learners(kind, count, rng)
            weights = list(rng.normal(size=count))

            def looped() -> np.ndarray:
                out = np.zeros((N_INPUTS, N_OUTPUTS))
                for w, h in zip(weights, hs):
                    out += w * h.predict(x)
                return out

            batched = best_of(3, lambda: weighted_sum(hs, weights, x, N_OUTPUTS))
            loop = best_of(3, looped)
            rows.append([kind, count, f"{loop:.3f}", f"{batched:.3f}", f"{loop / batched:.1f}x"])
            print(rows[-1], flush=True)
    wall = time.perf_counter() - start
    table = md_table(["learners", "count", "loop s", "batched s", "speed-up"], rows)
    body = f"""\
{N_INPUTS} inputs x {N_FEATURES} features, {N_OUTPUTS} outputs, one torch thread, best of 3.
Trees: depth-3 scikit-learn regression trees, float32 leaves (as they travel), walked level by
level as one forest. MLPs: 64-32-32-10, leaky ReLU, evaluated stacked (one product for all first
layers, batched products after). The loop calls each learner's ``predict`` and adds
``w * h(x)``.

{table}
"""
    write_report(results_dir(args.quick) / "ensemble_eval.md",
                 "Ensemble evaluation: batched vs loop", wall, body)


if __name__ == "__main__":
    main()
