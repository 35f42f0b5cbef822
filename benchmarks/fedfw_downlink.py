"""FedFW's downlink: bytes a node receives per round, dense x-bar vs compact points.

FedFW with MCLR on ``synthetic`` (610 parameters: dense x-bar 2,440 B), full participation, 10
and 100 clients, l1 / box / nuclear / l2 balls, 6 rounds, federated evaluation on (it carries
x-bar or the points too). Every run is made three times: ``fedfw.downlink`` = dense, compact and
auto; the table gives the payload down per client and round (train + evaluate messages, rounds
2-6, i.e. after first contact), the upload, and what auto chose. The runs' metrics other than
bytes are checked equal across the three (the compact x-bar is bit-identical). A fourth run
(auto, federated evaluation off) gives the training exchange alone: one message each way.

    python -m benchmarks.fedfw_downlink            # about 2 min on 2 cores
    python -m benchmarks.fedfw_downlink --quick
"""

from __future__ import annotations

import time

from benchmarks.common import Job, md_table, parser, results_dir, run_jobs, runs_dir, write_report
from server_app.results import CLOCKS

CONSTRAINTS = ("l1", "box", "nuclear", "l2")
MODES = ("dense", "compact", "auto")


def _per_client_round(rows: list[dict], clients: int, key: str, steady: bool = False) -> float:
    """Bytes per client and round over rounds 2 to the last (``steady``: to the one before it,
    whose evaluation rides on the next train message instead of an evaluate exchange)."""
    last = max(r["round"] for r in rows)
    later = [r for r in rows if 2 <= r["round"] < last or (r["round"] == last and not steady)]
    return sum(r[key] for r in later) / (len(later) * clients)


def _metrics(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "bytes" not in k and k not in CLOCKS} for r in rows]


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    rounds = 3 if args.quick else 6
    counts = (10,) if args.quick else (10, 100)
    jobs = [
        Job(
            f"{c}-{n}-{mode}",
            n,
            {
                "algorithm": "fedfw",
                "task": "synthetic",
                "fedfw.constraint": c,
                "fedfw.downlink": mode,
                "num-server-rounds": rounds,
            },
        )
        for c in CONSTRAINTS
        for n in counts
        for mode in MODES
    ]
    jobs += [
        Job(
            f"{c}-{n}-train-only",
            n,
            {
                "algorithm": "fedfw",
                "task": "synthetic",
                "fedfw.constraint": c,
                "fedfw.downlink": "auto",
                "fedfw.federated-eval": False,
                "num-server-rounds": rounds,
            },
        )
        for c in CONSTRAINTS
        for n in counts
    ]
    results = run_jobs(jobs, runs_dir(args.quick, "fedfw_downlink"), args.workers, args.reuse)
    table = []
    for c in CONSTRAINTS:
        for n in counts:
            rows = {mode: results[f"{c}-{n}-{mode}"]["rows"] for mode in MODES}
            same = all(_metrics(rows[m]) == _metrics(rows["dense"]) for m in MODES)
            down = {m: _per_client_round(rows[m], n, "bytes_down") for m in MODES}
            up = _per_client_round(rows["dense"], n, "bytes_up")
            steady = sum(
                _per_client_round(rows["auto"], n, k, steady=True)
                for k in ("bytes_up", "bytes_down")
            )
            train_only = results[f"{c}-{n}-train-only"]["rows"]
            train_total = sum(
                _per_client_round(train_only, n, k) for k in ("bytes_up", "bytes_down")
            )
            chose = (
                "compact"
                if abs(down["auto"] - down["compact"]) < abs(down["auto"] - down["dense"])
                else "dense"
            )
            table.append(
                [
                    c,
                    n,
                    f"{down['dense']:,.0f}",
                    f"{down['compact']:,.0f}",
                    f"{down['dense'] / down['compact']:.2f}x",
                    chose,
                    f"{up:,.0f}",
                    f"{up + down['auto']:,.0f}",
                    f"{steady:,.0f}",
                    f"{train_total:,.0f}",
                    "yes" if same else "NO",
                ]
            )
    body = f"""\
FedFW, MCLR on `synthetic` (610 parameters; dense x-bar 2,440 B), full participation,
{rounds} rounds, federated evaluation on. Bytes are payload (array bytes in the records) per
client and round, rounds 2-{rounds}; "down" counts the train and the evaluation message. Each
round's evaluation rides on the next round's train message, so a steady round (2-{rounds - 1})
is one message each way; the last round adds an evaluate exchange of its own.

{
        md_table(
            [
                "ball",
                "clients",
                "down dense B",
                "down compact B",
                "dense / compact",
                "auto chose",
                "up B",
                "total up + down (auto) B",
                "a steady round: up + down (auto) B",
                "training exchange only: up + down (auto, no fed. eval) B",
                "same metrics",
            ],
            table,
        )
    }
"""
    write_report(
        results_dir(args.quick) / "fedfw_downlink.md",
        "FedFW downlink: dense x-bar vs compact points",
        time.perf_counter() - start,
        body,
    )


if __name__ == "__main__":
    main()
