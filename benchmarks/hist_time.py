"""Time per boosting iteration at scale: XGBoost ``hist`` on the pooled rows against the
histogram protocol of ``fedxgb-hist`` (``oracles.hist_xgboost``) over 10 sites, side by side in
one process, without Flower's messages (``benchmarks.boosting --datasets synth1m`` times the
whole family through the in-process engine).

The table is ``benchmarks.boosting``'s ``synth1m`` (1,000,000 rows, 20 features, 3 classes),
cut over 10 sites by Dirichlet over the labels and shifted per site (seed 0). Both sides use one
thread, depth 6, eta 0.3, the same base score, XGBoost's defaults otherwise; the federated side
bins with the edges merged from the sites' sketches, XGBoost with its own (256 bins). Per
iteration (3 trees, one per class): the sites' part (margins, gradients, binning, histograms;
summed over the 10 sites, which would run in parallel on their own machines, so the slowest
site's share is shown too) and the server's (summing, splits, leaves).

    python -m benchmarks.hist_time      # about 3 min on 2 cores

Writes ``results/hist_time.md``.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.boosting import DATASETS, SHIFT, load_table
from benchmarks.common import RESULTS, md_table, parser, write_report
from functions.bins import BinLayout
from functions.boosters import Booster, BoosterSpec, encode_booster
from oracles.hist_xgboost import (
    SOFTMAX,
    TreeParams,
    column_sketch,
    gradients,
    grow_iteration,
    histograms,
    merge_sketches,
)
from oracles.xgboost_local import outputs, xgboost_module
from tasks.partitioning import partition


def sites(seed: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """synth1m's 10 shifted sites, as ``benchmarks.boosting`` cuts them, and its feature count."""
    data = DATASETS["synth1m"]
    frame, label, _, codes = load_table(data.source)
    x = frame.drop(columns=[label]).to_numpy(np.float32)
    parts = partition("dirichlet", data.nodes, codes, seed=seed, alpha=data.alpha)
    shifts = np.random.default_rng([seed, data.nodes]).normal(0.0, SHIFT, (data.nodes, x.shape[1]))
    return [
        (x[rows] + shifts[p].astype(np.float32), codes[rows]) for p, rows in enumerate(parts)
    ], x.shape[1]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=3)
    args = p.parse_args(argv)
    start = time.monotonic()
    nodes, d = sites()
    params = TreeParams(max_depth=6)
    spec = BoosterSpec(3, d, 6, 1 << 30)
    xgb = xgboost_module()
    x = np.concatenate([x for x, _ in nodes])
    y = np.concatenate([y for _, y in nodes])
    model = {**spec.params(), **params.xgboost(), "tree_method": "hist", "nthread": 1}
    t0 = time.perf_counter()
    matrix = xgb.QuantileDMatrix(x, label=y, nthread=1)
    binning = time.perf_counter() - t0
    pooled = []
    booster = None
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        booster = xgb.train(model, matrix, num_boost_round=1, xgb_model=booster)
        pooled.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    sketches = [column_sketch(x_, 1024) for x_, _ in nodes]
    layout = BinLayout(tuple(merge_sketches(*zip(*sketches), 256)))
    agree = time.perf_counter() - t0
    federated = Booster(spec)
    site_s, slowest_s, server_s = [], [], []
    for _ in range(args.iterations):
        raw = encode_booster(federated)
        per_site = np.zeros(len(nodes))
        kept = []
        for i, (x_, y_) in enumerate(nodes):
            t0 = time.perf_counter()
            kept.append((layout.bins(x_), *gradients(SOFTMAX, outputs(raw, x_), y_)))
            per_site[i] += time.perf_counter() - t0
        in_exchanges = 0.0

        def exchange(trees, leaves):
            nonlocal in_exchanges
            parts = []
            for i, (bins, g, h) in enumerate(kept):
                t0 = time.perf_counter()
                parts.append(histograms(layout, bins, g, h, trees, leaves))
                spent = time.perf_counter() - t0
                per_site[i] += spent
                in_exchanges += spent
            return tuple(sum(part) for part in zip(*parts))

        t0 = time.perf_counter()
        trees = grow_iteration(layout, params, 3, exchange)
        server_s.append(time.perf_counter() - t0 - in_exchanges)
        federated = Booster(spec, federated.trees + tuple(trees))
        site_s.append(float(per_site.sum()))
        slowest_s.append(float(per_site.max()))
    accuracy_pooled = float(np.mean(booster.predict(xgb.DMatrix(x)).argmax(1) == y))
    accuracy_federated = float(np.mean(outputs(encode_booster(federated), x).argmax(1) == y))
    rows = [
        [
            "XGBoost hist, pooled rows (one thread)",
            f"{np.mean(pooled):.2f}",
            "-",
            "-",
            f"{binning:.2f} (QuantileDMatrix)",
            f"{100 * accuracy_pooled:.1f}",
        ],
        [
            "fedxgb-hist protocol, 10 sites",
            f"{np.mean(site_s) + np.mean(server_s):.2f}",
            f"{np.mean(site_s):.2f} (slowest site {np.mean(slowest_s):.2f})",
            f"{np.mean(server_s):.2f}",
            f"{agree:.2f} (sketches, merged)",
            f"{100 * accuracy_federated:.1f}",
        ],
    ]
    headers = [
        "",
        "s / iteration (3 trees)",
        "sites' part",
        "server's part",
        "bins, once (s)",
        f"training accuracy after {args.iterations} (%)",
    ]
    write_report(
        RESULTS / "hist_time.md",
        "Time per boosting iteration on 1,000,000 rows: pooled XGBoost and fedxgb-hist",
        time.monotonic() - start,
        md_table(headers, rows)
        + f"\n\nMean over {args.iterations} iterations; {len(x):,} rows, {d} features, 3 classes.",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
