"""Time per boosting iteration at scale: XGBoost ``hist`` on the pooled rows against
``fedxgb-hist`` on the same rows cut into sites, side by side in one run, at several sizes.

Sizes (``--sizes``; ``benchmarks.boosting``'s synthetic tables: 20 features, 3 classes, cut by
Dirichlet over the labels and shifted per site, seed 0): ``250k`` (``synth250k-3``: 250,000
rows over 3 sites), ``1m`` (``synth1m``: 1,000,000 rows over 10 sites) and ``10m``
(``synth10m``: 10,000,000 rows over 10 sites; ``--large`` adds it, without the Ray and
deployment rows). ``--quick``: ``synth50k`` (10 sites), 2 iterations.

For each size:

- **XGBoost** ``hist`` on the pooled rows, one thread, depth 6, eta 0.3, XGBoost's defaults
  otherwise (its own 256 bins);
- **the protocol** (``oracles.hist_xgboost``) without Flower: the same trees, the bins from the
  sites' merged sketches; each site bins its rows once a run, walks each row on from its node at
  the level before and carries its margins from iteration to iteration, as a node does. The
  sites' part (margins, gradients, histograms) is summed over the sites, which would run in
  parallel on their own machines (the slowest site's share shown too); the server's part is
  summing, splits and leaves;
- **the whole family** on the sites' CSV files (written once, ``task='site'``) through Flower's
  in-process engine (the sites one after another), ``flwr run`` on Flower's simulation engine
  (Ray, one SuperNode of one CPU per site, as many side by side as there are cores) and a
  ``deploy.local`` deployment (TLS, SuperNode authentication, warm apps, one SuperNode per site
  on loopback; 3 rounds; not with ``--quick``), the first two with and without the rounds'
  federated evaluation (each site's loss on its training rows and test shard, which XGBoost's
  iteration does not compute). Each such round is split, from its metrics
  (``exchange_time_s``) and the nodes' work log (``client_app.work_log``), into the server's
  own part (the round less its exchanges), the nodes' family work and the rest of their
  ClientApp (decoding, encoding, setup, reading the site's file where the app process is new),
  as CPU seconds summed over the sites (where many nodes share 2 cores their wall seconds
  count the waits for a core), and what remains of the exchanges when the nodes' CPU seconds
  are spread over the sites that run at once (1 in-process, else as many as there are cores):
  Flower's messages, the engine's transport of messages and node state, and waiting. A run
  that left a site out is no row (its figures would be those of fewer rows). The node state
  column is the size of the state a node's ClientApp reads and writes with each message (what
  Ray and a SuperNode move along with it).

    python -m benchmarks.hist_time           # 250k and 1m: about 20 min on 2 cores
    python -m benchmarks.hist_time --large   # and 10m: about 10 min more
    python -m benchmarks.hist_time --quick   # synth50k, 2 iterations: about 2 min

Writes ``results/hist_time.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.boosting import DATASETS, SHIFT, load_table, write_raw
from benchmarks.common import md_table, parser, results_dir, write_report
from client_app import work_log
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

SIZES = {"250k": "synth250k-3", "1m": "synth1m", "10m": "synth10m"}
SITE_FILE_BYTES = 4 * 2**30  # the in-process nodes' dataset-max-bytes
LARGE = ("10m",)  # in-process only: Ray and a deployment would move 100 MB of state a message
PARAMS = TreeParams(max_depth=6)
HEADERS = [
    "",
    "s / iteration (3 trees)",
    "sites' part: work (+ ClientApp)",
    "server's part",
    "Flower's messages, transport, waiting",
    "node state (MB)",
    "bins, once (s)",
    "accuracy (%)",
    "MB up a round",
    "iterations dropped",
]

Site = tuple[np.ndarray, np.ndarray]


def sites(name: str, seed: int = 0) -> tuple[list[Site], int]:
    """The shifted sites of dataset ``name``, as ``benchmarks.boosting`` cuts them, and its
    feature count."""
    data = DATASETS[name]
    frame, label, _, codes = load_table(data.source)
    x = frame.drop(columns=[label]).to_numpy(np.float32)
    parts = partition("dirichlet", data.nodes, codes, seed=seed, alpha=data.alpha)
    shifts = np.random.default_rng([seed, data.nodes]).normal(0.0, SHIFT, (data.nodes, x.shape[1]))
    return [
        (x[rows] + shifts[p].astype(np.float32), codes[rows]) for p, rows in enumerate(parts)
    ], x.shape[1]


def pooled_row(nodes: list[Site], spec: BoosterSpec, iterations: int) -> list[str]:
    """XGBoost ``hist`` on the pooled rows, one thread: its table row."""
    xgb = xgboost_module()
    x = np.concatenate([x for x, _ in nodes])
    y = np.concatenate([y for _, y in nodes])
    model = {**spec.params(), **PARAMS.xgboost(), "tree_method": "hist", "nthread": 1}
    t0 = time.perf_counter()
    matrix = xgb.QuantileDMatrix(x, label=y, nthread=1)
    binning = time.perf_counter() - t0
    seconds, booster = [], None
    for _ in range(iterations):
        t0 = time.perf_counter()
        booster = xgb.train(model, matrix, num_boost_round=1, xgb_model=booster)
        seconds.append(time.perf_counter() - t0)
    accuracy = float(np.mean(booster.predict(xgb.DMatrix(x)).argmax(1) == y))
    return [
        "XGBoost hist, pooled rows (one thread)",
        f"{np.mean(seconds):.2f}",
        *"----",
        f"{binning:.2f} (QuantileDMatrix)",
        f"{100 * accuracy:.1f} (training rows)",
        "-",
        "-",
    ]


def protocol_row(nodes: list[Site], spec: BoosterSpec, iterations: int) -> tuple[list[str], float]:
    """The histogram protocol over the sites without Flower: its table row and the compiled
    loops' first use (once a process, before the timing)."""
    t0 = time.perf_counter()
    sketches = [column_sketch(x, 1024) for x, _ in nodes]
    layout = BinLayout(tuple(merge_sketches(*zip(*sketches), 256)))
    site_bins = [layout.bins(x).astype(np.uint16) for x, _ in nodes]  # once a run, as a node
    agree = time.perf_counter() - t0
    t0 = time.perf_counter()
    small, small_y = site_bins[0][:1000], nodes[0][1][:1000]
    g, h = gradients(SOFTMAX, np.zeros((1000, 3), np.float32), small_y)
    grow_iteration(layout, PARAMS, 3, lambda t, leaves: histograms(layout, small, g, h, t, leaves))
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
        for i, (x, y) in enumerate(nodes):
            t0 = time.perf_counter()
            if len(margins) < len(nodes):  # the first iteration: XGBoost's prediction
                margins.append(outputs(raw, x).astype(np.float32))
            else:  # then the new trees' leaf values from each row's node, as a node adds them
                new, first = federated.trees[-3:], len(federated.trees) - 3
                leaves = carried_leaves(layout, site_bins[i], new, grown, at[i])
                add_leaves(margins[i], new, leaves, first)
            kept.append((site_bins[i], *gradients(SOFTMAX, margins[i], y)))
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
        trees = grow_iteration(layout, PARAMS, 3, exchange)
        server_s.append(time.perf_counter() - t0 - in_exchanges)
        federated = Booster(spec, federated.trees + tuple(trees))
        site_s.append(float(per_site.sum()))
        slowest_s.append(float(per_site.max()))
    x = np.concatenate([x for x, _ in nodes])
    y = np.concatenate([y for _, y in nodes])
    accuracy = float(np.mean(outputs(encode_booster(federated), x).argmax(1) == y))
    row = [
        f"fedxgb-hist protocol, {len(nodes)} sites",
        f"{np.mean(site_s) + np.mean(server_s):.2f}",
        f"{np.mean(site_s):.2f} (slowest site {np.mean(slowest_s):.2f})",
        f"{np.mean(server_s):.2f}",
        "-",
        "-",
        f"{agree:.2f} (sketches, merged; rows binned)",
        f"{100 * accuracy:.1f} (training rows)",
        "-",
        "-",
    ]
    return row, compile_s


@dataclass(frozen=True)
class RoundSplit:
    """A run's rounds after the first: the median seconds of one, the first's, and the means of
    the split (see the module docstring), the MB sent up, the node state, the final test
    accuracy (None without federated evaluation) and the iterations dropped."""

    seconds: float
    first: float
    server: float
    work: float
    client_app: float
    rest: float
    state_mb: float
    up_mb: float
    accuracy: float | None
    dropped: int

    def row(self, label: str) -> list[str]:
        return [
            label,
            f"{self.seconds:.2f}",
            f"{self.work:.2f} (+{self.client_app:.2f})",
            f"{self.server:.2f}",
            f"{self.rest:.2f}",
            f"{self.state_mb:.1f}",
            f"{self.first:.2f} (round 1: sketches, bins, keys)",
            "-" if self.accuracy is None else f"{100 * self.accuracy:.1f} (test set)",
            f"{self.up_mb:.1f}",
            str(self.dropped),
        ]


def round_split(metrics: Path, log: Path, parallel: int) -> RoundSplit:
    """The ``RoundSplit`` of a run from its ``metrics.json`` and its nodes' work log;
    ``parallel``: how many sites ran at once."""
    recorded = json.loads(metrics.read_text())["rounds"]
    times = [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(recorded, recorded[1:])]
    later = [r for r in recorded if r["round"] >= 2]
    lines = [line for line in work_log.read(log) if str(line["round"]).isdigit()]
    by_round = {r["round"]: [x for x in lines if int(x["round"]) == r["round"]] for r in later}
    work = [sum(x["work_cpu_seconds"] for x in by_round[r["round"]]) for r in later]
    app = [
        sum(x["cpu_seconds"] - x["work_cpu_seconds"] for x in by_round[r["round"]]) for r in later
    ]
    state = [x["state_bytes"] for x in lines if x["type"] == "train"]
    return RoundSplit(
        seconds=statistics.median(times[1:]),
        first=times[0],
        server=statistics.mean(t - r["exchange_time_s"] for t, r in zip(times[1:], later)),
        work=statistics.mean(work),
        client_app=statistics.mean(app),
        rest=statistics.mean(
            r["exchange_time_s"] - (w + a) / parallel for r, w, a in zip(later, work, app)
        ),
        state_mb=(statistics.mean(state) if state else 0.0) / 1e6,
        up_mb=statistics.mean(r["bytes_up"] for r in later) / 1e6,
        accuracy=recorded[-1].get("test_accuracy"),
        dropped=sum(int(r.get("iteration_dropped", 0)) for r in recorded),
    )


def _config(sites: Path, rounds: int, evaluate: bool, out: Path, name: str) -> dict[str, object]:
    return {
        "algorithm": "fedxgb-hist",
        "task": "site",
        "data.label": "y",
        "dataset-path": str(sites / "{partition-id}.csv"),
        "fedxgb-hist.max-depth": 6,
        "num-server-rounds": rounds,
        "tensorboard": False,
        "fedxgb-hist.federated-eval": evaluate,
        "output-dir": str(out),
        "run-name": name,
    }


def in_process(config: dict[str, object], nodes: int) -> str | None:
    """``fedxgb-hist`` through Flower's in-process engine (the sites one after another)."""
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    full = run_config(**config)
    limits = [{"dataset-max-bytes": SITE_FILE_BYTES}] * nodes  # 10m's files pass 256 MiB
    grid = LocalGrid(client_app, full, nodes, limits, keep_messages=False)
    server_main(grid, server_context(full))
    return None


def simulated(config: dict[str, object], nodes: int) -> str | None:
    """The same through ``flwr run`` on Flower's simulation engine (Ray, a SuperNode of one CPU
    per site); None, or why it wrote no metrics."""
    from benchmarks.latency import flwr_run_simulated

    return flwr_run_simulated(config, nodes, Path(str(config["output-dir"])) / "work")


def deployed(config: dict[str, object], nodes: int) -> str | None:
    """The same on a ``deploy.local`` deployment (TLS, SuperNode authentication, warm apps, a
    SuperNode per site on loopback); None, or its status."""
    from benchmarks.latency import deploy_local_run

    return deploy_local_run(config, nodes, Path(str(config["output-dir"])) / "work")


Engine = Callable[[dict[str, object], int], str | None]


def _left_out(config: Path) -> str | None:
    """Why a finished run's figures are not the whole table's: the sites it left out."""
    if not config.exists():
        return None
    left = json.loads(config.read_text()).get("sites", {}).get("left-out", {})
    return f"{len(left)} sites left out: {next(iter(left.values()))}" if left else None


def _warnings(config: Path) -> list[str]:
    """The run's warnings as its outcome records them (a dropped iteration, with its reason)."""
    if not config.exists():
        return []
    return list(json.loads(config.read_text()).get("outcome", {}).get("warnings", []))


def engine_rows(
    name: str, nodes: int, iterations: int, args: argparse.Namespace
) -> tuple[list[list], list[str]]:
    """The family's rows through each engine on the sites of ``name`` (their CSV files), and
    the runs' warnings, each after its row's label."""
    engines: list[tuple[str, Engine, tuple[bool, ...], int, int]] = [
        ("in-process engine", in_process, (True, False), iterations, 1)
    ]
    parallel = min(os.cpu_count() or 1, nodes)
    if args.simulation and name not in LARGE:
        label = f"`flwr run`, simulation engine (Ray, {nodes} SuperNodes)"
        engines.append((label, simulated, (True, False), iterations, parallel))
    if args.deployment and not args.quick and name not in LARGE:
        label = f"`deploy.local` (TLS, authentication, {nodes} SuperNodes)"
        engines.append((label, deployed, (True,), min(iterations, 3), parallel))
    rows, warnings = [], []
    with tempfile.TemporaryDirectory(prefix="hist-time-") as tmp:
        work = Path(tmp)
        write_raw(SIZES.get(name, name), work / "sites", seed=0)  # every engine reads these
        for label, engine, evaluations, rounds, at_once in engines:
            for evaluate in evaluations:
                run = f"{engine.__name__}-{evaluate}"
                out, log = work / run, work / f"{run}.jsonl"
                label_ = f"fedxgb-hist, {label}" + ("" if evaluate else ", no federated evaluation")
                os.environ[work_log.ENV] = str(log)  # the engines' node processes inherit it
                try:
                    failed = engine(_config(work / "sites", rounds, evaluate, out, run), nodes)
                finally:
                    del os.environ[work_log.ENV]
                metrics = out / run / "metrics.json"
                failed = failed or _left_out(out / run / "config.json")
                warnings += [f"{label_}: {w}" for w in _warnings(out / run / "config.json")]
                if failed or not metrics.exists():
                    rows.append([label_, "-", "-", "-", "-", "-", failed or "no metrics", *"---"])
                    continue
                rows.append(round_split(metrics, log, at_once).row(label_))
    return rows, warnings


def size_section(name: str, iterations: int, args: argparse.Namespace) -> str:
    """The table of one size, with its note."""
    data = SIZES.get(name, name)
    nodes, d = sites(data)
    spec = BoosterSpec(3, d, 6, 1 << 30)
    rows = [pooled_row(nodes, spec, iterations)]
    row, compile_s = protocol_row(nodes, spec, iterations)
    rows.append(row)
    rows_count = sum(len(y) for _, y in nodes)
    del nodes  # the engines read the sites' files
    warnings: list[str] = []
    if args.engine:
        engines, warnings = engine_rows(name, DATASETS[data].nodes, iterations, args)
        rows += engines
    return (
        f"### {rows_count:,} rows over {DATASETS[data].nodes} sites ({data})\n\n"
        + md_table(HEADERS, rows)
        + f"\n\nMean over {iterations} iterations ({d} features, 3 classes); the engines' "
        "figures over rounds 2 on (the median round, the split's means). The compiled loops' "
        f"first use, once a process before the protocol's timing: {compile_s:.2f} s.\n"
        + "".join(f"\nWarning of a run: {w}\n" for w in warnings)
    )


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--sizes", nargs="+", default=["250k", "1m"], choices=list(SIZES))
    p.add_argument("--large", action="store_true", help="add the 10m size")
    p.add_argument(
        "--engine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the whole family through Flower's engines on the same sites",
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
    sizes = ["synth50k"] if args.quick else [*args.sizes, *(["10m"] if args.large else [])]
    iterations = 2 if args.quick else args.iterations
    sections = [size_section(name, iterations, args) for name in dict.fromkeys(sizes)]
    write_report(
        results_dir(args.quick) / "hist_time.md",
        "Time per boosting iteration: pooled XGBoost and fedxgb-hist",
        time.monotonic() - start,
        "\n".join(sections),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
