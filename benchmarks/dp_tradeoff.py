"""Accuracy against epsilon: differential privacy (``dp.*``), the noise multiplier z varied, with
the server adding the noise and with the nodes adding their shares under secure aggregation.

- FedAvg and FedProx, client level, on ``digits`` (iid) at 10 and 100 nodes: 20 rounds, the
  clipping norm C = 1, 10 local SGD steps a round.
- FedFW, row level (each node's gradient the mean of its rows' gradients clipped to C = 10,
  with its noise, before the l1 ball's linear minimisation), on ``synthetic`` (MCLR) at 10
  nodes: 50 rounds; the noise is the nodes' own. (C = 1 clips synthetic's rows' gradients so
  much that the clipped gradient's bias, not the noise, sets the accuracy.)
- ``fedxgb-hist``, row level, on ``benchmarks.boosting``'s ``synth300k-3`` sites (300,000 rows,
  3 classes, 3 sites; ``fedxgb-hist.bins='grid'``): 5 rounds, depth 6.

Each run's final test accuracy and the epsilon at delta 1e-5 that Flower's Renyi-DP accountant
gives for all its releases (no amplification by sampling claimed). z = 0 is the run without
differential privacy.

    python -m benchmarks.dp_tradeoff            # about 12 min on 2 cores
    python -m benchmarks.dp_tradeoff --quick    # FedAvg, 10 nodes, z in {0, 1}, 3 rounds

Writes ``results/dp_tradeoff.md`` and ``results/dp_tradeoff.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchmarks.boosting import write_raw
from benchmarks.common import Job, md_table, parser, results_dir, run_jobs, runs_dir, write_report

MULTIPLIERS = (0.0, 0.3, 1.0, 3.0, 10.0)
TORCH = {"task": "digits", "local-steps": 10, "dp.clipping-norm": 1.0}
FW = {"task": "synthetic", "fedfw.constraint": "l1", "dp.clipping-norm": 10.0}
HIST = {
    "algorithm": "fedxgb-hist",
    "task": "site",
    "data.label": "y",
    "fedxgb-hist.bins": "grid",
}
SETTINGS = (  # (algorithm, nodes, secure aggregation)
    ("fedavg", 10, False),
    ("fedavg", 10, True),
    ("fedavg", 100, False),
    ("fedavg", 100, True),
    ("fedprox", 100, False),
    ("fedfw", 10, False),
    ("fedxgb-hist", 3, False),
    ("fedxgb-hist", 3, True),
)
ROUNDS = {"fedavg": 20, "fedprox": 20, "fedfw": 50, "fedxgb-hist": 5}


def job(algorithm: str, nodes: int, secure: bool, z: float, rounds: int, sites: Path) -> Job:
    if algorithm == "fedxgb-hist":
        base = {**HIST, "dataset-path": str(sites / "{partition-id}.csv")}
    elif algorithm == "fedfw":
        base = {**FW, "algorithm": algorithm}
    else:
        base = {**TORCH, "algorithm": algorithm}
    overrides = {
        **base,
        "num-server-rounds": rounds,
        "secure-aggregation": secure,
        "tensorboard": False,
    }
    if z > 0:
        overrides["dp.noise-multiplier"] = z
    else:
        overrides.pop("dp.clipping-norm", None)
    where = "nodes" if secure or algorithm == "fedfw" else "server"
    return Job(f"{algorithm}-n{nodes}-{where}-z{z:g}", nodes, overrides)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    args = p.parse_args(argv)
    start = time.monotonic()
    settings = SETTINGS[:2] if args.quick else SETTINGS
    multipliers = (0.0, 1.0) if args.quick else MULTIPLIERS
    runs = runs_dir(args.quick, "dp_tradeoff")
    sites = runs / "synth300k-3"
    if any(a == "fedxgb-hist" for a, _, _ in settings) and not (sites / "0.csv").exists():
        write_raw("synth300k-3", sites, seed=0)

    def rounds_of(algorithm: str) -> int:
        return 3 if args.quick else ROUNDS[algorithm]

    cases = [(s, z) for s in settings for z in multipliers]
    jobs = [job(a, n, s, z, rounds_of(a), sites) for (a, n, s), z in cases]
    results = run_jobs(jobs, runs, args.workers, reuse=args.reuse)
    records = []
    for (algorithm, nodes, secure), z in cases:
        name = job(algorithm, nodes, secure, z, rounds_of(algorithm), sites).name
        rows = results[name]["rows"]
        records.append(
            {
                "algorithm": algorithm,
                "nodes": nodes,
                "rounds": rounds_of(algorithm),
                "noise added by": (
                    "nodes (secure aggregation)"
                    if secure
                    else "nodes"
                    if algorithm == "fedfw"
                    else "server"
                ),
                "z": z,
                "epsilon": rows[-1].get("dp_epsilon"),
                "test_accuracy": rows[-1]["test_accuracy"],
                "test_loss": rows[-1]["test_loss"],
                "halfway_accuracy": rows[len(rows) // 2]["test_accuracy"],
            }
        )
    out = results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp_tradeoff.json").write_text(json.dumps(records, indent=1) + "\n")
    headers = ["algorithm", "nodes", "rounds", "noise added by", "z", "epsilon (delta 1e-5)"]
    table = md_table(
        [*headers, "test accuracy", "test loss", "accuracy halfway"],
        [
            [
                r["algorithm"],
                r["nodes"],
                r["rounds"],
                r["noise added by"],
                f"{r['z']:g}",
                "no DP" if r["epsilon"] is None else f"{r['epsilon']:.3g}",
                f"{r['test_accuracy']:.3f}",
                f"{r['test_loss']:.3f}",
                f"{r['halfway_accuracy']:.3f}",
            ]
            for r in records
        ],
    )
    write_report(
        out / "dp_tradeoff.md",
        "Differential privacy: accuracy against epsilon (FedAvg, FedProx, fedxgb-hist)",
        time.monotonic() - start,
        table
        + "\n\nFedAvg and FedProx: client level, digits, clipping norm 1, 10 local SGD steps a "
        "round. FedFW: row level, synthetic (MCLR, l1 ball), clipping norm 10, a node's own "
        "noise. fedxgb-hist: row level, the synth300k-3 sites, grid bins, depth 6. Seed 0; "
        "epsilon of all the run's releases at delta 1e-5 (Renyi DP, no amplification by "
        "sampling).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
