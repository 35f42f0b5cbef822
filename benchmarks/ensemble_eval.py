"""Ensemble evaluation time: batched (functions/batched.py weighted_sum) vs a loop over learners.

f(x) = sum_k w_k h_k(x) on 1,000 digits images (scikit-learn's bundled 8x8 digits, pixels / 16:
64 features, 10 outputs), for ensembles of 100, 1,000 and 5,000 learners of one kind:

- depth-3 scikit-learn regression trees with float32 leaf values (as they travel), fitted to
  noisy one-hot targets on random halves of the features; 200 distinct trees, cycled (every tree
  has the same cost, and fitting 5,000 would take longer than evaluating them);
- MLPs 64-32-32-10 with leaky ReLU (FFGB's learner), freshly initialised.

The loop is what a node would write without ``functions.batched``:
``out += w * h.predict(x).astype(float64)`` learner by learner. One torch thread, as the apps
set; best of 7 repetitions (3 at 5,000 learners), loop and batched interleaved. Batched and loop
results are compared (trees: bit-identical). A loop over more than ``--loop-max`` learners is
timed on the first ``--loop-max`` and extrapolated linearly (marked in the table; by default
nothing is).

Two side measurements explain the speed-ups: the MLP rows in GFLOP/s against this core's rate on
one large matrix product (what stacking could at best reach), and for trees the time of the
in-order float64 accumulation of leaf values alone (``out += w_k * value_k[leaf]`` per tree,
which bit-identity with the loop requires) at 1,000 trees. Also the batched MLP time at 1,000
learners for a few ``functions.batched.CHUNK_BYTES`` values.

    python -m benchmarks.ensemble_eval            # about 1 min on 2 cores
    python -m benchmarks.ensemble_eval --quick    # 100 and 1,000 learners, no side measurements

Writes ``results/ensemble_eval.json`` and ``results/ensemble_eval.md`` (``results/quick/`` with
``--quick``) and prints the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.tree import DecisionTreeRegressor

from benchmarks import common
from benchmarks.common import md_table, parser, results_dir, write_report
from functions import batched
from functions.batched import weighted_sum
from functions.networks import NetworkSpec, build
from functions.trees import TreeArrays, from_sklearn

N_INPUTS, N_FEATURES, N_OUTPUTS = 1000, 64, 10
SIZES, QUICK_SIZES = (100, 1000, 5000), (100, 1000)
DISTINCT_TREES = 200
MLP = NetworkSpec((N_FEATURES, 32, 32, N_OUTPUTS), "leaky_relu")
MLP_FLOPS = 2 * sum(a * b for a, b in zip(MLP.sizes[:-1], MLP.sizes[1:]))  # per input
CHUNK_STUDY = (1 << 20, 8 << 20, 64 << 20)
TARGET = 10.0  # batched / loop at 1,000 learners


def digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits images (pixels / 16, float32) and their labels."""
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y


def fit_trees(x: np.ndarray, labels: np.ndarray, count: int) -> list[TreeArrays]:
    rng = np.random.default_rng(1)
    one_hot = np.eye(N_OUTPUTS)[labels]
    return [
        from_sklearn(
            DecisionTreeRegressor(max_depth=3, max_features=0.5, random_state=i).fit(
                x, one_hot + 0.3 * rng.normal(size=one_hot.shape)
            ),
            value_dtype=np.float32,
        )
        for i in range(count)
    ]


def best_of(repeats: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def loop(learners: list, weights: list[float], x: np.ndarray) -> np.ndarray:
    out = np.zeros((len(x), N_OUTPUTS))
    for weight, learner in zip(weights, learners):
        out += weight * learner.predict(x).astype(np.float64)
    return out


def measure(kind: str, learners: list, weights: list[float], x: np.ndarray, loop_max: int) -> dict:
    count = len(learners)
    repeats = 7 if count <= 1000 else 3
    timed = min(count, loop_max)
    batched_out = weighted_sum(learners, weights, x, N_OUTPUTS)  # warm-up, and the check
    loop_out = loop(learners[:timed], weights[:timed], x)
    batched_times, loop_times = [], []
    for _ in range(repeats):  # interleaved: both see the same machine conditions
        batched_times.append(best_of(1, lambda: weighted_sum(learners, weights, x, N_OUTPUTS)))
        loop_times.append(best_of(1, lambda: loop(learners[:timed], weights[:timed], x)))
    batched_s, loop_s = min(batched_times), min(loop_times) * count / timed
    row = {
        "learner": kind,
        "count": count,
        "loop_s": loop_s,
        "batched_s": batched_s,
        "speedup": loop_s / batched_s,
        "repeats": repeats,
        "loop_timed_on": timed,
        "loop_extrapolated": timed < count,
    }
    if timed == count:
        row["max_abs_diff"] = float(np.abs(batched_out - loop_out).max())
        row["bit_identical"] = bool(np.array_equal(batched_out, loop_out))
    if kind == "mlp":
        row["loop_gflops"] = MLP_FLOPS * len(x) * count / loop_s / 1e9
        row["batched_gflops"] = MLP_FLOPS * len(x) * count / batched_s / 1e9
    return row


def matmul_gflops() -> float:
    """This core's float32 rate on one large matrix product (one torch thread)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    return 2 * 1024**3 / best_of(5, lambda: torch.mm(a, b)) / 1e9


def tree_accumulation_s(trees: list[TreeArrays], weights: list[float], n: int) -> float:
    """The in-order float64 leaf-value sum alone (what bit-identity requires), random leaves."""
    rng = np.random.default_rng(2)
    sizes = np.array([t.n_nodes for t in trees])
    weighted = (
        np.concatenate([t.value for t in trees]).astype(np.float64)
        * np.repeat(weights, sizes)[:, np.newaxis]
    )
    leaves = rng.integers(0, len(weighted), size=(len(trees), n))

    def accumulate() -> None:
        out = np.zeros((n, N_OUTPUTS))
        for rows in leaves:
            out += weighted[rows]

    return best_of(5, accumulate)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--loop-max",
        type=int,
        default=5000,
        help="time the loop on at most this many learners, extrapolate beyond",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    images, labels = digits()
    x = images[:N_INPUTS]
    sizes = QUICK_SIZES if args.quick else SIZES
    rng = np.random.default_rng(0)
    distinct = fit_trees(images, labels, DISTINCT_TREES)
    torch.manual_seed(0)
    networks = [build(MLP) for _ in range(max(sizes))]
    pools = {"tree": [distinct[k % DISTINCT_TREES] for k in range(max(sizes))], "mlp": networks}
    rows, side = [], {}
    for kind in ("tree", "mlp"):
        for count in sizes:
            weights = [float(w) for w in rng.normal(size=count)]
            rows.append(measure(kind, pools[kind][:count], weights, x, args.loop_max))
            r = rows[-1]
            print(
                f"{kind:>4} {count:>5}: loop {r['loop_s']:.3f} s, batched "
                f"{r['batched_s']:.3f} s, {r['speedup']:.1f}x",
                flush=True,
            )
    if not args.quick:
        side["matmul_1024_gflops"] = matmul_gflops()
        weights = [float(w) for w in rng.normal(size=1000)]
        side["tree_accumulation_1000_s"] = tree_accumulation_s(
            pools["tree"][:1000], weights, N_INPUTS
        )
        default = batched.CHUNK_BYTES
        side["mlp_1000_by_chunk_bytes"] = {}
        try:
            for chunk in CHUNK_STUDY:
                batched.CHUNK_BYTES = chunk
                side["mlp_1000_by_chunk_bytes"][chunk] = best_of(
                    5, lambda: weighted_sum(networks[:1000], weights, x, N_OUTPUTS)
                )
        finally:
            batched.CHUNK_BYTES = default
    wall = time.perf_counter() - start

    def label(r: dict) -> str:
        return "depth-3 trees" if r["learner"] == "tree" else "MLP 64-32-32-10"

    def loop_cell(r: dict) -> str:
        return (
            f"{r['loop_s']:.3f} (extrapolated from {r['loop_timed_on']})"
            if r["loop_extrapolated"]
            else f"{r['loop_s']:.3f}"
        )

    def check_cell(r: dict) -> str:
        if "max_abs_diff" not in r:
            return "n/a"
        return "bit-identical" if r["bit_identical"] else f"max diff {r['max_abs_diff']:.1e}"

    table = md_table(
        ["learners", "count", "loop s", "batched s", "speed-up", "batched vs loop"],
        [
            [
                label(r),
                f"{r['count']:,}",
                loop_cell(r),
                f"{r['batched_s']:.3f}",
                f"{r['speedup']:.1f}x",
                check_cell(r),
            ]
            for r in rows
        ],
    )
    at_1000 = {r["learner"]: r["speedup"] for r in rows if r["count"] == 1000}
    verdict = ", ".join(
        f"{k} {v:.1f}x ({'met' if v >= TARGET else 'missed'})" for k, v in at_1000.items()
    )
    notes = [f"Target: batched >= {TARGET:.0f}x the loop at 1,000 learners: {verdict}."]
    if side:
        mlp = {r["count"]: r for r in rows if r["learner"] == "mlp"}
        notes.append(
            f"MLP arithmetic rate at 1,000 learners: loop {mlp[1000]['loop_gflops']:.1f} GFLOP/s, "
            f"batched {mlp[1000]['batched_gflops']:.1f} GFLOP/s; one 1024x1024 float32 matrix "
            f"product on this core: {side['matmul_1024_gflops']:.1f} GFLOP/s "
            f"({side['matmul_1024_gflops'] / mlp[1000]['loop_gflops']:.1f}x the loop's rate)."
        )
        chunks = ", ".join(
            f"{c >> 20} MiB {t:.3f} s" for c, t in side["mlp_1000_by_chunk_bytes"].items()
        )
        notes.append(
            f"Batched MLPs at 1,000 learners by CHUNK_BYTES: {chunks} (default "
            f"{batched.CHUNK_BYTES >> 20} MiB)."
        )
        tree = {r["count"]: r for r in rows if r["learner"] == "tree"}
        acc = side["tree_accumulation_1000_s"]
        notes.append(
            f"Trees at 1,000: the in-order float64 accumulation of leaf values alone "
            f"takes {acc:.3f} s of the batched {tree[1000]['batched_s']:.3f} s; with "
            f"the walk free, the speed-up would be at most "
            f"{tree[1000]['loop_s'] / acc:.1f}x."
        )
    setup = (
        f"{N_INPUTS:,} digits images x {N_FEATURES} features, {N_OUTPUTS} outputs, one torch "
        f"thread, best of 7 (3 at 5,000 learners), loop and batched interleaved. "
        f"{DISTINCT_TREES} distinct depth-3 trees (float32 leaves), cycled; MLPs freshly "
        f"initialised. Loop: `out += w * h.predict(x).astype(float64)` per learner. "
        f"Default CHUNK_BYTES "
        f"{batched.CHUNK_BYTES >> 20} MiB."
    )
    body = setup + "\n\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    print("\n" + table + "\n\n" + "\n".join(f"- {n}" for n in notes), flush=True)
    out_dir = results_dir(args.quick)
    report = {
        "benchmark": "ensemble_eval",
        "command": common.command_line(),
        "wall_s": wall,
        "machine": common.machine_info(),
        "setup": {
            "inputs": N_INPUTS,
            "features": N_FEATURES,
            "outputs": N_OUTPUTS,
            "data": "sklearn load_digits, first 1,000 images, pixels / 16, float32",
            "torch_threads": torch.get_num_threads(),
            "timing": "best of repeats",
            "distinct_trees": DISTINCT_TREES,
            "tree_depth": 3,
            "mlp": list(MLP.sizes),
            "mlp_activation": MLP.activation,
            "chunk_bytes": batched.CHUNK_BYTES,
            "loop_max": args.loop_max,
        },
        "target": {"speedup_at_1000": TARGET, "met": {k: v >= TARGET for k, v in at_1000.items()}},
        "rows": rows,
        "side": side,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ensemble_eval.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out_dir / 'ensemble_eval.json'}")
    write_report(out_dir / "ensemble_eval.md", "Ensemble evaluation: batched vs loop", wall, body)


if __name__ == "__main__":
    main()
