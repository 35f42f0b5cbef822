"""Time per boosting iteration at scale: XGBoost ``hist`` on the pooled rows against the
histogram protocol of ``fedxgb-hist`` (``oracles.hist_xgboost``) over 10 sites, side by side in
one process, without Flower's messages (``benchmarks.boosting --datasets synth1m`` times the
whole family through the in-process engine).

The table is ``benchmarks.boosting``'s ``synth1m`` (1,000,000 rows, 20 features, 3 classes),
cut over 10 sites by Dirichlet over the labels and shifted per site (seed 0). Both sides use one
thread, depth 6, eta 0.3, the same base score, XGBoost's defaults otherwise; the federated side
bins with the edges merged from the sites' sketches, XGBoost with its own (256 bins); each site
bins its rows once a run, walks each row on from its node at the level before and carries its
margins from iteration to iteration (adding the new trees' leaf values at each row's leaf,
found from its node at the last level grown), as a node does. Per
iteration (3 trees, one per class): the sites'
part (margins, gradients, histograms;
summed over the 10 sites, which would run in parallel on their own machines, so the slowest
site's share is shown too) and the server's (summing, splits, leaves).

The whole family on the same 10 sites (their CSV files, written once, ``task='site'``) through
Flower's in-process engine (the sites one after another) and through ``flwr run`` on Flower's
simulation engine (Ray, 10 SuperNodes of one CPU, two at a time on 2 cores), each with and
without the rounds' federated evaluation (each site's loss on its training rows and test
shard, which XGBoost's iteration does not compute), with the bytes sent up a round, and on a
``deploy.local`` deployment (TLS, SuperNode authentication, warm apps, 10 SuperNodes on
loopback; 3 rounds, with the evaluation only; not with ``--quick``) (``--no-engine`` leaves
these rows out, ``--no-simulation`` and ``--no-deployment`` those two).

    python -m benchmarks.hist_time          # about 12 min on 2 cores
    python -m benchmarks.hist_time --quick  # synth50k's 10 sites, 2 iterations: about 2 min

Writes ``results/hist_time.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.boosting import DATASETS, SHIFT, load_table
from benchmarks.common import md_table, parser, results_dir, write_report
from functions.bins import BinLayout
from functions.boosters import Booster, BoosterSpec, encode_booster
from oracles.hist_kernels import add_leaves
from oracles.hist_xgboost import (
    SOFTMAX,
    TreeParams,
    carried_leaves,
    column_sketch,
    gradients,
    grow_iteration,
    histograms,
    merge_sketches,
    row_nodes,
)
from oracles.xgboost_local import outputs, xgboost_module
from tasks.partitioning import partition


def sites(name: str, seed: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """The 10 shifted sites of ``name`` (synth1m; synth50k for ``--quick``), as
    ``benchmarks.boosting`` cuts them, and its feature count."""
    data = DATASETS[name]
    frame, label, _, codes = load_table(data.source)
    x = frame.drop(columns=[label]).to_numpy(np.float32)
    parts = partition("dirichlet", data.nodes, codes, seed=seed, alpha=data.alpha)
    shifts = np.random.default_rng([seed, data.nodes]).normal(0.0, SHIFT, (data.nodes, x.shape[1]))
    return [
        (x[rows] + shifts[p].astype(np.float32), codes[rows]) for p, rows in enumerate(parts)
    ], x.shape[1]


def _site_config(sites: Path, rounds: int, evaluate: bool) -> dict[str, object]:
    return {
        "algorithm": "fedxgb-hist",
        "task": "site",
        "data.label": "y",
        "dataset-path": str(sites / "{partition-id}.csv"),
        "fedxgb-hist.max-depth": 6,
        "num-server-rounds": rounds,
        "tensorboard": False,
        "fedxgb-hist.federated-eval": evaluate,
    }


Figures = tuple[float, float, float, float | None, int]


def _round_figures(metrics: Path) -> Figures:
    """The median seconds of a round after the first, the first's, the mean MB sent up a
    round after the first, the final test accuracy (None without federated evaluation) and
    how many rounds' iterations were dropped."""
    recorded = json.loads(metrics.read_text())["rounds"]
    times = [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(recorded, recorded[1:])]
    up = statistics.mean(r["bytes_up"] for r in recorded[2:]) / 1e6
    dropped = sum(int(r.get("iteration_dropped", 0)) for r in recorded)
    return (
        statistics.median(times[1:]),
        times[0],
        up,
        recorded[-1].get("test_accuracy"),
        dropped,
    )


def in_process_rounds(sites: Path, rounds: int, evaluate: bool, out: Path) -> Figures:
    """``fedxgb-hist`` through Flower's in-process engine on the sites' CSV files in ``sites``
    (``task='site'``, the sites one after another): ``_round_figures``."""
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    name = f"engine-{evaluate}"
    config = run_config(
        **{**_site_config(sites, rounds, evaluate), "output-dir": str(out), "run-name": name}
    )
    server_main(LocalGrid(client_app, config, 10, keep_messages=False), server_context(config))
    return _round_figures(out / name / "metrics.json")


def simulated_rounds(sites: Path, rounds: int, evaluate: bool, out: Path) -> Figures | str:
    """The same through ``flwr run`` on Flower's simulation engine (Ray, 10 SuperNodes of one
    CPU, as many side by side as there are cores): ``_round_figures``, or why there are none."""
    from benchmarks.latency import flwr_run_simulated

    name = f"simulation-{evaluate}"
    config = {**_site_config(sites, rounds, evaluate), "output-dir": str(out), "run-name": name}
    failed = flwr_run_simulated(config, 10, out / f"{name}-work")
    return failed or _round_figures(out / name / "metrics.json")


def deployed_rounds(sites: Path, rounds: int, evaluate: bool, out: Path) -> Figures | str:
    """The same on a ``deploy.local`` deployment (TLS, SuperNode authentication, warm apps, 10
    SuperNodes on loopback, as many training side by side as there are cores):
    ``_round_figures``, or why there are none."""
    from benchmarks.latency import deploy_local_run

    name = f"deployed-{evaluate}"
    config = {**_site_config(sites, rounds, evaluate), "output-dir": str(out), "run-name": name}
    failed = deploy_local_run(config, 10, out / f"{name}-work")
    return failed or _round_figures(out / name / "metrics.json")


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument(
        "--engine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the whole family through the in-process engine on the same sites",
    )
    p.add_argument(
        "--simulation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="and through `flwr run` on Flower's simulation engine (Ray)",
    )
    p.add_argument(
        "--deployment",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="and on a deploy.local deployment (not with --quick)",
    )
    args = p.parse_args(argv)
    start = time.monotonic()
    name = "synth50k" if args.quick else "synth1m"
    iterations = 2 if args.quick else args.iterations
    nodes, d = sites(name)
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
    for _ in range(iterations):
        t0 = time.perf_counter()
        booster = xgb.train(model, matrix, num_boost_round=1, xgb_model=booster)
        pooled.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    sketches = [column_sketch(x_, 1024) for x_, _ in nodes]
    layout = BinLayout(tuple(merge_sketches(*zip(*sketches), 256)))
    site_bins = [layout.bins(x_).astype(np.uint16) for x_, _ in nodes]  # once a run, as a node
    agree = time.perf_counter() - t0
    t0 = time.perf_counter()  # the compiled loops, compiled once a process before any timing
    small, small_y = site_bins[0][:1000], nodes[0][1][:1000]
    g, h = gradients(SOFTMAX, np.zeros((1000, 3), np.float32), small_y)
    grow_iteration(layout, params, 3, lambda t, leaves: histograms(layout, small, g, h, t, leaves))
    compile_s = time.perf_counter() - t0
    federated = Booster(spec)
    site_s, slowest_s, server_s = [], [], []
    margins: list[np.ndarray] = []  # each site's, carried from iteration to iteration
    at: list[np.ndarray | None] = [None] * len(nodes)  # each row's node, level to level
    grown: list = []  # the trees of the last level grown
    for _ in range(iterations):
        raw = encode_booster(federated)
        per_site = np.zeros(len(nodes))
        kept = []
        for i, (x_, y_) in enumerate(nodes):
            t0 = time.perf_counter()
            if len(margins) < len(nodes):  # the first iteration: XGBoost's prediction
                margins.append(outputs(raw, x_).astype(np.float32))
            else:  # then the new trees' leaf values from each row's node, as a node adds them
                new, first = federated.trees[-3:], len(federated.trees) - 3
                leaves = carried_leaves(layout, site_bins[i], new, grown, at[i])
                add_leaves(margins[i], new, leaves, first)
            kept.append((site_bins[i], *gradients(SOFTMAX, margins[i], y_)))
            per_site[i] += time.perf_counter() - t0
        in_exchanges = 0.0
        at = [None] * len(nodes)

        def exchange(trees, leaves):
            nonlocal in_exchanges
            grown[:] = trees
            parts = []
            for i, (bins, g, h) in enumerate(kept):
                t0 = time.perf_counter()
                at[i] = row_nodes(layout, bins, trees, at[i])
                parts.append(histograms(layout, bins, g, h, trees, leaves, at[i]))
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
            f"{agree:.2f} (sketches, merged; rows binned)",
            f"{100 * accuracy_federated:.1f}",
        ],
    ]
    if args.engine:
        from benchmarks.boosting import write_raw

        with tempfile.TemporaryDirectory(prefix="hist-time-") as tmp:
            work = Path(tmp)
            write_raw(name, work / "sites", seed=0)  # once: every engine reads the same files
            engines = [
                (
                    "in-process engine (Flower's messages; sites one after another)",
                    in_process_rounds,
                )
            ]
            if args.simulation:
                engines.append(
                    ("`flwr run`, simulation engine (Ray, 10 SuperNodes)", simulated_rounds)
                )
            if args.deployment and not args.quick:
                engines.append(
                    ("`deploy.local` (TLS, authentication, 10 SuperNodes)", deployed_rounds)
                )
            for label, engine in engines:
                deployed = engine is deployed_rounds  # minutes a round: 3 rounds, evaluated
                for evaluate in (True,) if deployed else (True, False):
                    rounds = min(iterations, 3) if deployed else iterations
                    figures = engine(work / "sites", rounds, evaluate, work / "out")
                    label_ = f"fedxgb-hist, {label}" + (
                        "" if evaluate else ", without the rounds' federated evaluation"
                    )
                    if isinstance(figures, str):
                        rows.append([label_, "-", "-", "-", figures, "-", "-", "-"])
                        continue
                    seconds, first, up, accuracy, dropped = figures
                    rows.append(
                        [
                            label_,
                            f"{seconds:.2f}",
                            "-",
                            "-",
                            f"{first:.2f} (round 1: sketches, bins, keys)",
                            "-" if accuracy is None else f"{100 * accuracy:.1f} (test set)",
                            f"{up:.1f}",
                            str(dropped),
                        ]
                    )
    rows = [row if len(row) == 8 else [*row, "-", "-"] for row in rows]
    headers = [
        "",
        "s / iteration (3 trees)",
        "sites' part",
        "server's part",
        "bins, once (s)",
        f"training accuracy after {iterations} (%)",
        "MB up a round",
        "iterations dropped",
    ]
    write_report(
        results_dir(args.quick) / "hist_time.md",
        f"Time per boosting iteration on {len(x):,} rows: pooled XGBoost and fedxgb-hist",
        time.monotonic() - start,
        md_table(headers, rows)
        + f"\n\nMean over {iterations} iterations; {len(x):,} rows, {d} features, 3 classes. "
        f"The compiled loops' first use, once a process before the timing: {compile_s:.2f} s.",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
