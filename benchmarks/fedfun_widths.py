"""FedFun Figure 3 analogue: one client's hidden width varied from 5 to 50 against a partner of
two hidden layers of 25 (appendix C.1 of the FedFun paper), FSR NN on the k-means split.

Two clients (k-means split, so the ring is one edge), the node of partition 0 an MLP of hidden
widths 25-25, the node of partition 1 one of k-k (node config ``fedfun-hidden``), k in 5, 10,
..., 50; everything else is ``fedfun_tables``' FSR NN setup (20 rounds, its step budgets). Each
(task, k) is tuned over a grid of lambda in {10, 100} and delta in {0.02, 0.1} (gamma = 4 /
lambda), and the paper's rule picks the run and round of highest mean training accuracy. The
federation's score is that row's mean test accuracy over the two nodes; the row's lower and
higher node accuracies show which partner the width costs. Scores are averaged over the tasks,
as the paper averages over data sets.

    python -m benchmarks.fedfun_widths            # 4 tasks x 10 widths x 4 grid points, seed 0
    python -m benchmarks.fedfun_widths --quick    # smoke version: iris, two widths, 3 rounds
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks import fedfun_tables as tables
from benchmarks.common import Job, md_table, parser, results_dir, run_jobs, runs_dir, write_report

WIDTHS = tuple(range(5, 55, 5))
PARTNER = 25
GRID = tuple(
    {"fedfun.learner": "mlp", **tables.fsr_point(lam, delta, gamma_auto=False)}
    for lam in (10.0, 100.0)
    for delta in (0.02, 0.1)
)
SEED = 0


def jobs_for(
    tasks: list[str], widths: tuple[int, ...], quick: bool
) -> dict[tuple[str, int], list[Job]]:
    """Per (task, width), its grid's jobs."""
    base = tables.QUICK_BASE if quick else tables.BASE
    grid = GRID[:1] if quick else GRID
    cells: dict[tuple[str, int], list[Job]] = {}
    for task in tasks:
        for width in widths:
            for over in grid:
                cells.setdefault((task, width), []).append(
                    Job(
                        f"{task}-w{width}-{tables.label('fsr-nn', over)}",
                        2,
                        {
                            **base,
                            "task": task,
                            "partitioning": "kmeans",
                            "seed": SEED,
                            "algorithm": "fedfun",
                            **over,
                        },
                        node_configs=(
                            {"fedfun-hidden": f"{PARTNER},{PARTNER}"},
                            {"fedfun-hidden": f"{width},{width}"},
                        ),
                    )
                )
    return cells


def picks(
    results: dict[str, dict], cells: dict[tuple[str, int], list[Job]]
) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (task, width), the row the paper's rule picks over the grid."""
    chosen = {}
    for key, grid in cells.items():
        pick = tables.select(results, [(job.name, job.overrides) for job in grid])
        row = next(r for r in pick["rows"] if r["round"] == pick["round"])
        chosen[key] = {
            "score": pick["score"],
            "low": row["test_accuracy_min"],
            "high": row["test_accuracy_max"],
            "round": pick["round"],
            "point": tables.pretty("fsr-nn", pick["overrides"]),
        }
    return chosen


def report_body(chosen, tasks: list[str], widths: tuple[int, ...]) -> str:
    head = ["k", *tasks, "mean score", "mean lower node", "mean higher node"]
    rows = []
    for width in widths:
        cells = [chosen[(task, width)] for task in tasks]
        rows.append(
            [width]
            + [f"{c['score']:.3f} (r{c['round']})" for c in cells]
            + [f"{statistics.fmean(c[key] for c in cells):.3f}" for key in ("score", "low", "high")]
        )
    detail = md_table(
        ["task", "k", "picked", "round", "score", "lower node", "higher node"],
        [
            [
                task,
                width,
                c["point"],
                c["round"],
                f"{c['score']:.3f}",
                f"{c['low']:.3f}",
                f"{c['high']:.3f}",
            ]
            for (task, width), c in chosen.items()
        ],
    )
    return (
        f"Partner: hidden {PARTNER}-{PARTNER}; the other node: k-k. Score: mean test accuracy of "
        "the two node models at the (run, round) of highest mean training accuracy over the "
        f"grid, seed {SEED}; the task's round in brackets. Lower / higher node: the two nodes' "
        "test accuracies in that row.\n\n" + md_table(head, rows) + "\n\n## Every pick\n\n" + detail
    )


def plot(chosen, tasks: list[str], widths: tuple[int, ...], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key, label in (
        ("score", "federation (mean)"),
        ("low", "lower node"),
        ("high", "higher node"),
    ):
        ax.plot(
            widths,
            [statistics.fmean(chosen[(t, w)][key] for t in tasks) for w in widths],
            marker="o",
            label=label,
        )
    ax.set_xlabel("hidden width k of the varying client (partner: 25)")
    ax.set_ylabel(f"test accuracy, mean of {len(tasks)} tasks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    tasks = ["iris"] if args.quick else tables.TASKS
    widths = (5, 25) if args.quick else WIDTHS
    cells = jobs_for(tasks, widths, args.quick)
    jobs = [job for grid in cells.values() for job in grid]
    print(f"{len(jobs)} runs (cached ones are reused with --reuse)", flush=True)
    results = run_jobs(jobs, runs_dir(args.quick, "fedfun_widths"), args.workers, args.reuse)
    chosen = picks(results, cells)
    out = results_dir(args.quick)
    plot(chosen, tasks, widths, out / "fedfun_widths.png")
    write_report(
        out / "fedfun_widths.md",
        "FedFun Figure 3 analogue: one client's hidden width against a 25-25 partner",
        time.perf_counter() - start,
        report_body(chosen, tasks, widths),
    )


if __name__ == "__main__":
    main()
