"""Figures 3 and 4 of the FedFW paper: participation p with a DNN, and the initial penalty lambda0.

- Figure 3: FedFW and FedFW+ training the DNN (two hidden layers of 100) on ``synthetic``, IID
  over 10 clients, per-tensor l2 ball of radius 10, each client taking part in a round with
  probability p in {0.2, 0.5, 1} (the values of ``fedfw_participation``; the paper's text does
  not list its own), three seeds. The paper fixes lambda_t = 1e-3: the ``constant`` schedule
  with ``fedfw.lambda-constant=1e-3``, FedFW+'s dual step lambda0 = 1e-3 too, and a constant
  step eta = T^(-2/3) (Theorem 2's at p = 1; the paper does not give its step), the same for
  every p so that p alone varies.
- Figure 4: FedFW with lambda0 in {1e-4, 1e-3, 1e-2, 1e-1, 1} on the paper's four panels:
  convex MCLR on MNIST (``mnist-5k``) at p = 0.5 with the l1 and the l2 ball (Theorem 1's
  schedule in section 4.2's form), and the non-convex DNN on ``synthetic`` at p = 1 with the l1
  and the l2 ball (Theorem 2's schedule). Train loss, FW gap and test accuracy per round, seed 0.

Both write a table and a PNG plot, with the paper's qualitative finding checked on our rows.

    python -m benchmarks.fedfw_figures34           # full (about 8 min on 2 cores)
    python -m benchmarks.fedfw_figures34 --quick
"""

from __future__ import annotations

import time
from pathlib import Path
from statistics import mean, pstdev

from benchmarks.common import (
    Job,
    at_round,
    best,
    final,
    machine_info,
    md_table,
    num,
    parser,
    pct,
    results_dir,
    run_jobs,
    runs_dir,
    train_rows,
    write_report,
)

NUM_CLIENTS = 10
PARTICIPATION = [0.2, 0.5, 1.0]
FIXED_LAMBDA = 1e-3  # Figure 3's lambda_t
LAMBDA0S = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
NAMES = {"fedfw": "FedFW", "fedfw-plus": "FedFW+"}
BALL = {"fedfw.radius": 10.0, "fedfw.scope": "per-tensor"}
# Figure 4's panels: (label, task, model, participation, constraint)
PANELS = [
    ("(a) MCLR mnist-5k p=0.5 l1", "mnist-5k", "mclr", 0.5, "l1"),
    ("(b) MCLR mnist-5k p=0.5 l2", "mnist-5k", "mclr", 0.5, "l2"),
    ("(c) DNN synthetic p=1 l1", "synthetic", "dnn", 1.0, "l1"),
    ("(d) DNN synthetic p=1 l2", "synthetic", "dnn", 1.0, "l2"),
]
FIGURE3_FINDING = (
    "higher participation p converges faster, for FedFW and FedFW+ alike (the paper, section "
    "5.4: 'Both convex and non-convex experiments show faster convergence for higher "
    "participation probability')"
)
FIGURE4_FINDING = (
    "a higher lambda0 gives a larger FW gap in the first rounds (the paper, section 5.4: "
    "'A higher lambda0 leads to a larger gap in the initial iterations of the algorithm due "
    "to its regularization effect')"
)


# -- Figure 3 -------------------------------------------------------------------------------
def fig3_name(algorithm: str, p: float, seed: int) -> str:
    return f"fig3-{algorithm}-p{p:g}-s{seed}"


def fig3_jobs(rounds: int, ps: list[float], seeds: list[int]) -> list[Job]:
    base = {
        **BALL,
        "task": "synthetic",
        "model": "dnn",
        "partitioning": "iid",
        "fedfw.constraint": "l2",
        "fedfw.schedule": "constant",
        "fedfw.lambda-constant": FIXED_LAMBDA,
        "fedfw.lambda0": FIXED_LAMBDA,
        "fedfw.eta-constant": rounds ** (-2 / 3),
        "fedfw.gap": False,
        "num-server-rounds": rounds,
    }
    return [
        Job(
            fig3_name(a, p, s),
            NUM_CLIENTS,
            {**base, "algorithm": a, "fedfw.participation": p, "seed": s},
        )
        for a in NAMES
        for p in ps
        for s in seeds
    ]


def seed_mean(results: dict, names: list[str], round_: int, key: str) -> tuple[float, float]:
    """Mean and population std over seeds of ``key`` at ``round_``."""
    values = [at_round(results[n]["rows"], round_, key) for n in names]
    return mean(values), (pstdev(values) if len(values) > 1 else 0.0)


def faster_with_p(results: dict, ps: list[float], seeds: list[int], checkpoints: list[int]) -> str:
    """Where the mean train loss falls as p grows, per algorithm and checkpoint."""
    lines = []
    for a, label in NAMES.items():
        held = []
        for c in checkpoints:
            losses = [
                seed_mean(results, [fig3_name(a, p, s) for s in seeds], c, "train_loss")[0]
                for p in ps
            ]
            held.append(all(x > y for x, y in zip(losses, losses[1:])))
        where = ", ".join(f"@{c}: {'yes' if h else 'no'}" for c, h in zip(checkpoints, held))
        lines.append(f"- {label}: train loss strictly lower for each larger p? {where}")
    return "\n".join(lines)


def fig3_table(results: dict, ps: list[float], seeds: list[int], checkpoints: list[int]) -> str:
    rows = []
    for a, label in NAMES.items():
        for p in ps:
            names = [fig3_name(a, p, s) for s in seeds]
            cells = []
            for key, scale, fmt in (("test_accuracy", 100, ".2f"), ("train_loss", 1, ".4f")):
                for c in checkpoints:
                    m, sd = seed_mean(results, names, c, key)
                    spread = f" ± {scale * sd:{fmt}}" if len(seeds) > 1 else ""
                    cells.append(f"{scale * m:{fmt}}{spread}")
            rows.append([label, f"{p:g}"] + cells)
    head = (
        ["algorithm", "p"]
        + [f"acc % @{c}" for c in checkpoints]
        + [f"train loss @{c}" for c in checkpoints]
    )
    return md_table(head, rows)


def fig3_plot(results: dict, ps: list[float], seeds: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(NAMES), figsize=(5 * len(NAMES), 7), squeeze=False)
    for col, (a, label) in enumerate(NAMES.items()):
        for p in ps:
            runs = [train_rows(results[fig3_name(a, p, s)]["rows"]) for s in seeds]
            x = [r["round"] for r in runs[0]]
            for row, key in enumerate(("test_accuracy", "train_loss")):
                y = [mean(run[i][key] for run in runs) for i in range(len(x))]
                axes[row][col].plot(x, y, label=f"p = {p:g}")
        axes[0][col].set_title(f"{label}, DNN synthetic, l2, lambda_t = {FIXED_LAMBDA:g}")
        axes[0][col].set_ylabel("test accuracy (mean of seeds)")
        axes[1][col].set_ylabel("train loss at x-bar (mean of seeds)")
        axes[1][col].set_xlabel("round")
        for row in range(2):
            axes[row][col].grid(alpha=0.3)
            axes[row][col].legend()
    save(fig, path)


# -- Figure 4 -------------------------------------------------------------------------------
def fig4_name(panel: int, lam: float) -> str:
    return f"fig4-{'abcd'[panel]}-l{lam:g}"


def fig4_jobs(rounds: int, panels: list[int], lams: list[float]) -> list[Job]:
    jobs = []
    for i in panels:
        _, task, model, p, constraint = PANELS[i]
        for lam in lams:
            spec = {
                **BALL,
                "algorithm": "fedfw",
                "task": task,
                "model": model,
                "partitioning": "iid",
                "fedfw.constraint": constraint,
                "fedfw.participation": p,
                "fedfw.lambda0": lam,
                "fedfw.gap": True,
                "num-server-rounds": rounds,
                "seed": 0,
            }
            jobs.append(Job(fig4_name(i, lam), NUM_CLIENTS, spec))
    return jobs


def early_gap_order(results: dict, panels: list[int], lams: list[float], early: list[int]) -> str:
    """Per panel and early round: does the FW gap grow with lambda0?"""
    lines = []
    for i in panels:
        marks = []
        for c in early:
            gaps = [at_round(results[fig4_name(i, lam)]["rows"], c, "fw_gap") for lam in lams]
            rising = sum(y > x for x, y in zip(gaps, gaps[1:]))
            marks.append(f"@{c}: {rising} of {len(gaps) - 1} steps up")
        lines.append(f"- {PANELS[i][0]}: gap larger for each larger lambda0? {', '.join(marks)}")
    return "\n".join(lines)


def fig4_table(results: dict, panels: list[int], lams: list[float], checkpoints: list[int]) -> str:
    rows = []
    for i in panels:
        for lam in lams:
            r = results[fig4_name(i, lam)]["rows"]
            rows.append(
                [PANELS[i][0], f"{lam:g}"]
                + [num(at_round(r, c, "fw_gap")) for c in checkpoints]
                + [num(at_round(r, c, "train_loss")) for c in checkpoints[1:]]
                + [pct(final(r, "test_accuracy")), pct(best(r, "test_accuracy"))]
                + [num(final(r, "consensus_distance"))]
            )
    head = (
        ["panel", "lambda0"]
        + [f"FW gap @{c}" for c in checkpoints]
        + [f"train loss @{c}" for c in checkpoints[1:]]
        + ["final acc %", "best acc %", "final consensus dist."]
    )
    return md_table(head, rows)


def fig4_plot(results: dict, panels: list[int], lams: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (
        ("train_loss", "train loss at x-bar"),
        ("fw_gap", "FW gap"),
        ("test_accuracy", "test accuracy"),
    )
    fig, axes = plt.subplots(len(keys), len(panels), figsize=(4.5 * len(panels), 10), squeeze=False)
    for col, i in enumerate(panels):
        for lam in lams:
            rows = train_rows(results[fig4_name(i, lam)]["rows"])
            x = [r["round"] for r in rows]
            for row, (key, _) in enumerate(keys):
                axes[row][col].plot(
                    x, [r.get(key, float("nan")) for r in rows], label=f"lambda0 = {lam:g}"
                )
        axes[0][col].set_title(PANELS[i][0])
        axes[1][col].set_yscale("log")
        axes[-1][col].set_xlabel("round")
        for row, (_, label) in enumerate(keys):
            axes[row][col].set_ylabel(label)
            axes[row][col].grid(alpha=0.3)
            axes[row][col].legend(fontsize=7)
    save(fig, path)


def save(fig, path: Path) -> None:
    """Write the matplotlib figure ``fig`` to ``path`` and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    rounds = 5 if args.quick else 100
    seeds = [0] if args.quick else [0, 1, 2]
    ps = PARTICIPATION[1:] if args.quick else PARTICIPATION
    panels = [1, 3] if args.quick else list(range(len(PANELS)))
    lams = LAMBDA0S[1:3] if args.quick else LAMBDA0S
    checkpoints = [2, 5] if args.quick else [25, 50, 100]
    gap_rounds = [2, 3, 5] if args.quick else [2, 5, 10, 100]
    out = results_dir(args.quick)
    runs = runs_dir(args.quick, "figures34")

    start = time.perf_counter()
    fig3 = run_jobs(fig3_jobs(rounds, ps, seeds), runs, args.workers, args.reuse)
    wall3 = time.perf_counter() - start
    fig4 = run_jobs(fig4_jobs(rounds, panels, lams), runs, args.workers, args.reuse)
    wall4 = time.perf_counter() - start - wall3
    info = machine_info()  # before either report is written: both see the same tree
    png3, png4 = out / "fedfw_figure3.png", out / "fedfw_figure4.png"
    fig3_plot(fig3, ps, seeds, png3)
    fig4_plot(fig4, panels, lams, png4)
    body = f"""\
FedFW and FedFW+, DNN (100-100 ReLU), `synthetic` (Synthetic(1,1)), IID over {NUM_CLIENTS}
clients, per-tensor l2 ball of radius 10, {rounds} rounds, each client taking part with
probability p. Fixed lambda_t = {FIXED_LAMBDA:g} (`fedfw.schedule=constant`,
`fedfw.lambda-constant`; FedFW+'s dual step `fedfw.lambda0` = {FIXED_LAMBDA:g} too) and a fixed
step eta = T^(-2/3) = {rounds ** (-2 / 3):.4f} for every p. Mean ± population std over seeds
{seeds} (a seed redraws the data, the split, the initial model and the participants).

## Against the paper

The paper's Figure 3 (a plot, no numbers): {FIGURE3_FINDING}. On our rows:

{faster_with_p(fig3, ps, seeds, checkpoints)}

{fig3_table(fig3, ps, seeds, checkpoints)}

![accuracy and train loss vs round]({png3.name})
"""
    write_report(
        out / "fedfw_figure3.md",
        "FedFW Figure 3 analogue (participation p, DNN, FedFW vs FedFW+)",
        wall3,
        body,
        info=info,
    )
    body = f"""\
FedFW, {NUM_CLIENTS} clients, IID, per-tensor balls of radius 10, {rounds} rounds, seed 0, one
run per cell. Convex panels: MCLR on `mnist-5k` (the bundled 5,000-image MNIST subset) at
p = 0.5, schedule eta_t = 2/(p(t-1)+2), lambda_t = lambda0 sqrt(p(t-1)+2). Non-convex panels:
the DNN (100-100) on `synthetic` at p = 1, schedule eta = T^(-2/3), lambda = lambda0 T^(1/3).
FW gap = max over D of <grad F(x-bar), x-bar - u>, at the x-bar a round ends with. Round 1's
is the same for every lambda0: the clients start at consensus (x_i = x-bar), so the penalty's
gradient lambda_1 (x_i - x-bar) is zero in round 1; lambda0 first acts in round 2.

## Against the paper

The paper's Figure 4 (a plot, no numbers): {FIGURE4_FINDING}. On our rows:

{early_gap_order(fig4, panels, lams, gap_rounds[:-1])}

{fig4_table(fig4, panels, lams, gap_rounds)}

![train loss, FW gap and test accuracy vs round]({png4.name})
"""
    write_report(
        out / "fedfw_figure4.md",
        "FedFW Figure 4 analogue (the initial penalty lambda0)",
        wall4,
        body,
        info=info,
    )


if __name__ == "__main__":
    main()
