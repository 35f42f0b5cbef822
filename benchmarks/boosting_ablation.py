"""Why FFGB with trees trails federated XGBoost: one setting changed at a time (issue 24 item 4).

FFGB (trees) as the paper runs it (the run's "defaults" row: the project's defaults when this was
measured; ``auto`` now picks Newton leaves and a constant 0.3) against variants that each change
one thing towards what
XGBoost does or what the paper leaves open: the step-size schedule (the paper's
eta0 / (K t + k + 1) against a constant shrinkage, XGBoost's ``eta``), Newton leaf values
(``ffgb.tree-leaves='newton'``), tree depth and K, on the sites of ``benchmarks.boosting`` (same
files, split and scoring; its ``split_for`` and ``benchmarks.sites.federated`` are reused).
Reported per variant and dataset: the final score on test/all.csv and the mean of the sites'
own shares, mean ± std over seeds, and how many rounds the run took.

    python -m benchmarks.boosting_ablation --out benchmarks/results/boosting_ablation.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.boosting import DATASETS, METHODS, REGRESSION, split_for
from benchmarks.common import RESULTS, md_table, write_report
from benchmarks.sites import Family, cell, federated

BASE = METHODS[0]  # ffgb-trees
# The paper's FFGB with trees: its experiment schedule, eta0 10 (1 on regression, what
# benchmarks.sites found on cars) and least-squares leaves; every variant changes it.
PAPER = {"ffgb.tree-leaves": "mean", "ffgb.schedule": "experiment", "ffgb.eta0": 10.0}
PAPER_REGRESSION = {"ffgb.eta0": 1.0}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults (experiment, eta0 10, K 3, depth 3, mean leaves)": {},
    "constant eta 0.1": {"ffgb.schedule": "constant", "ffgb.eta0": 0.1},
    "constant eta 0.3": {"ffgb.schedule": "constant", "ffgb.eta0": 0.3},
    "constant eta 1": {"ffgb.schedule": "constant", "ffgb.eta0": 1.0},
    "newton leaves": {"ffgb.tree-leaves": "newton"},
    "newton leaves, constant eta 0.3": {
        "ffgb.tree-leaves": "newton",
        "ffgb.schedule": "constant",
        "ffgb.eta0": 0.3,
    },
    "newton leaves, constant eta 1": {
        "ffgb.tree-leaves": "newton",
        "ffgb.schedule": "constant",
        "ffgb.eta0": 1.0,
    },
    "depth 6": {"ffgb.tree-depth": 6},
    "newton leaves, depth 6": {"ffgb.tree-leaves": "newton", "ffgb.tree-depth": 6},
    "K 1": {"ffgb.local-steps": 1},
    "K 10": {"ffgb.local-steps": 10},
}
DEFAULT_DATASETS = ("penguins", "cars", "breast-cancer-dirichlet-5", "diabetes-label-5", "synth50k")


def variant(name: str, dataset: str) -> Family:
    """The paper's FFGB with trees (``PAPER``), changed by variant ``name``'s settings."""
    paper = {**PAPER, **(PAPER_REGRESSION if dataset in REGRESSION else {})}
    return Family(name, {**BASE.overrides, **paper, **VARIANTS[name]}, tables=(dataset,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datasets", nargs="+", default=list(DEFAULT_DATASETS), choices=list(DATASETS)
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "boosting_ablation.json",
        help="JSON; the .md beside it (default: results/boosting_ablation.json)",
    )
    args = parser.parse_args(argv)
    start, records = time.time(), []
    with tempfile.TemporaryDirectory(prefix="boosting-ablation-") as work:
        for dataset in args.datasets:
            for seed in args.seeds:
                split = split_for(dataset, Path(work), seed)
                for name in args.variants:
                    record = federated(
                        split,
                        variant(name, dataset),
                        dataset,
                        seed,
                        args.rounds,
                        Path(work) / dataset / f"seed{seed}" / "runs",
                    )
                    record.update(dataset=dataset, variant=name, kind=split.kind)
                    records.append(record)
                    print(
                        f"  {dataset:<26} seed {seed} {name:<58} "
                        f"{record.get('all', float('nan')):.4f} {record['wall_s']:6.1f} s"
                        + (f" ERROR {record['error']}" if "error" in record else ""),
                        flush=True,
                    )
            _write(args, time.time() - start, records)
    return 0


def table(records: list[dict[str, Any]], datasets: list[str], seeds: list[int]) -> str:
    """Variants as rows, each dataset's test/all.csv and own-share mean as columns."""
    headers = ["variant"]
    for dataset in datasets:
        kind = next(r["kind"] for r in records if r["dataset"] == dataset)
        unit = "acc %" if kind == "classification" else "RMSE"
        headers += [f"{dataset} all ({unit})", f"{dataset} own"]
    rows = []
    for name in dict.fromkeys(r["variant"] for r in records):
        row = [name]
        for dataset in datasets:
            mine = [
                r
                for r in records
                if r["dataset"] == dataset and r["variant"] == name and "error" not in r
            ]
            kind = next(r["kind"] for r in records if r["dataset"] == dataset)
            row += [
                cell([r["all"] for r in mine], kind, len(seeds)),
                cell([statistics.fmean(r["own"].values()) for r in mine], kind, len(seeds)),
            ]
        rows.append(row)
    return md_table(headers, rows)


def _write(args: argparse.Namespace, wall: float, records: list[dict[str, Any]]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"records": records}, indent=1, default=str) + "\n")
    datasets = [d for d in args.datasets if any(r["dataset"] == d for r in records)]
    body = (
        f"### FFGB (trees): one setting at a time, {args.rounds} rounds, final round, "
        f"mean ± std over seeds {', '.join(map(str, args.seeds))}\n\n"
        + table(records, datasets, args.seeds)
        + "\n"
    )
    write_report(args.out.with_suffix(".md"), "FFGB trees ablation (issue 24 item 4)", wall, body)


if __name__ == "__main__":
    raise SystemExit(main())
