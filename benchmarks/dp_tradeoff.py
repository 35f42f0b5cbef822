"""Accuracy against epsilon: client-level differential privacy (``dp.*``) of FedAvg and FedProx
on ``digits`` (iid), the noise multiplier z varied, with the server adding the noise and with
the nodes adding their shares under secure aggregation, at 10 and 100 nodes.

Each run: 20 rounds, the clipping norm C = 1, 10 local SGD steps a round; its final test
accuracy and the epsilon at delta 1e-5 that Flower's Renyi-DP accountant gives for its 20
releases (no amplification by sampling claimed). z = 0 is the run without differential privacy.

    python -m benchmarks.dp_tradeoff            # about 8 min on 2 cores
    python -m benchmarks.dp_tradeoff --quick    # 10 nodes, z in {0, 1}, 3 rounds

Writes ``results/dp_tradeoff.md`` and ``results/dp_tradeoff.json``.
"""

from __future__ import annotations

import json
import time

from benchmarks.common import Job, md_table, parser, results_dir, run_jobs, runs_dir, write_report

MULTIPLIERS = (0.0, 0.3, 1.0, 3.0, 10.0)
BASE = {"task": "digits", "local-steps": 10, "dp.clipping-norm": 1.0, "tensorboard": False}
SETTINGS = (  # (algorithm, nodes, secure aggregation)
    ("fedavg", 10, False),
    ("fedavg", 10, True),
    ("fedavg", 100, False),
    ("fedavg", 100, True),
    ("fedprox", 100, False),
)


def job(algorithm: str, nodes: int, secure: bool, z: float, rounds: int) -> Job:
    overrides = {
        **BASE,
        "algorithm": algorithm,
        "num-server-rounds": rounds,
        "secure-aggregation": secure,
    }
    if z > 0:
        overrides["dp.noise-multiplier"] = z
    else:
        del overrides["dp.clipping-norm"]
    where = "nodes" if secure else "server"
    return Job(f"{algorithm}-n{nodes}-{where}-z{z:g}", nodes, overrides)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    args = p.parse_args(argv)
    start = time.monotonic()
    rounds = 3 if args.quick else 20
    settings = SETTINGS[:2] if args.quick else SETTINGS
    multipliers = (0.0, 1.0) if args.quick else MULTIPLIERS
    jobs = [job(a, n, s, z, rounds) for a, n, s in settings for z in multipliers]
    results = run_jobs(jobs, runs_dir(args.quick, "dp_tradeoff"), args.workers)
    records = []
    for (algorithm, nodes, secure), z in ((s, z) for s in settings for z in multipliers):
        rows = results[job(algorithm, nodes, secure, z, rounds).name]["rows"]
        records.append(
            {
                "algorithm": algorithm,
                "nodes": nodes,
                "noise added by": "nodes (secure aggregation)" if secure else "server",
                "z": z,
                "epsilon": rows[-1].get("dp_epsilon"),
                "test_accuracy": rows[-1]["test_accuracy"],
            }
        )
    out = results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dp_tradeoff.json").write_text(json.dumps(records, indent=1) + "\n")
    table = md_table(
        ["algorithm", "nodes", "noise added by", "z", "epsilon (delta 1e-5)", "test accuracy"],
        [
            [
                r["algorithm"],
                r["nodes"],
                r["noise added by"],
                f"{r['z']:g}",
                "no DP" if r["epsilon"] is None else f"{r['epsilon']:.3g}",
                f"{r['test_accuracy']:.3f}",
            ]
            for r in records
        ],
    )
    write_report(
        out / "dp_tradeoff.md",
        "Differential privacy: accuracy against epsilon (FedAvg, FedProx on digits)",
        time.monotonic() - start,
        table
        + f"\n\n{rounds} rounds, clipping norm 1, 10 local SGD steps a round, seed 0; epsilon "
        "of all the run's releases at delta 1e-5 (Renyi DP, no amplification by sampling).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
