"""What ``fedxgb-hist.min-bin-count`` costs: the booster's score when every node merges the
histogram slots counting fewer than k of its rows, against k = 0 (the pooled model), on the
site splits of ``benchmarks.boosting`` (same sites, 75/25 split per seed, scoring on
test/all.csv), side by side in one run.

    python -m benchmarks.hist_privacy      # about 3 min on 2 cores

Writes ``results/hist_privacy.md`` and ``results/hist_privacy.json``.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

from benchmarks.boosting import REGRESSION, split_for
from benchmarks.common import RESULTS, md_table, parser, write_report
from benchmarks.sites import Family, cell, federated, mean_std

DATASETS = ("penguins", "cars", "breast-cancer-dirichlet-5", "diabetes-dirichlet-5")
LEAST = (0, 2, 5, 10, 20)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    start = time.monotonic()
    scores: dict[str, dict[int, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="hist-privacy-") as tmp:
        work = Path(tmp)
        for name in DATASETS:
            scores[name] = {k: [] for k in LEAST}
            for seed in args.seeds:
                split = split_for(name, work, seed)
                for least in LEAST:
                    family = Family(
                        f"fedxgb-hist-k{least}",
                        {"algorithm": "fedxgb-hist", "fedxgb-hist.min-bin-count": least},
                        tables=(name,),
                    )
                    out = work / name / f"seed{seed}" / "runs"
                    record = federated(split, family, name, seed, args.rounds, out)
                    scores[name][least].append(record.get("all", float("nan")))
                    print(f"{name} seed {seed} k={least}: {record.get('all')}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "hist_privacy.json").write_text(json.dumps(scores, indent=1))
    rows = []
    for name, by_least in scores.items():
        kind = "regression" if name in REGRESSION else "classification"
        base = mean_std(by_least[0])[0]
        row = [name]
        for least in LEAST:
            mean = mean_std(by_least[least])[0]
            change = (
                f"{100 * (mean - base):+.1f} pt"
                if kind == "classification"
                else f"{100 * (mean - base) / base:+.1f} %"
            )
            text = cell(by_least[least], kind, len(args.seeds))
            row.append(text if least == 0 else f"{text} ({change})")
        rows.append(row)
    headers = ["split (accuracy % or RMSE)", *(f"k = {k}" for k in LEAST)]
    write_report(
        RESULTS / "hist_privacy.md",
        "fedxgb-hist: the cost of merging small histogram slots (min-bin-count = k)",
        time.monotonic() - start,
        md_table(headers, rows)
        + f"\n\nTest/all.csv after {args.rounds} rounds, mean ± std over seeds "
        f"{', '.join(map(str, args.seeds))}; k = 0 is the pooled model. The change is against "
        "k = 0 (points of accuracy; % of RMSE, where higher is worse).",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
