"""FFGB vs FedAvg at equal communication cost over heterogeneity s and numbers of clients: the
FFGB paper's Figure 1 (CIFAR10, 56 clients, s = 0.1 and 0.3) and Figure 4 (MNIST) analogue.

Cells: task in {mnist-5k, digits} x label-sort s in {0.1, 0.3} x N in {10, 56} clients, seed 0.
FFGB as benchmarks/ffgb_mnist.py (K = 3, MLP 784-32-32-10 or 64-32-32-10 leaky-ReLU weak
learners, 500 Adam steps per fit, eta0 = 10) for R_N rounds; FedAvg with the same network as the
whole model (``model='mlp32'``, our defaults: SGD lr 0.3, batch 16, one epoch) for R_N N K / 2
rounds, the same number of models exchanged per client (the paper's count, section 4.1: FFGB N K
a round, FedAvg 2). Each cell reports FFGB's test accuracy at its last round against FedAvg's at
the same models exchanged and at the same bytes (payload of all messages, both directions).

    python -m benchmarks.ffgb_figure1            # full (about 20 min on 2 cores)
    python -m benchmarks.ffgb_figure1 --quick    # smoke: 4 and 10 clients, s = 0.1, 5 steps a fit
"""

from __future__ import annotations

import math
import time

from benchmarks.common import (
    Job,
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
from benchmarks.ffgb_mnist import (
    FEDAVG,
    FFGB,
    cumulative_bytes,
    models_exchanged,
    seconds_per_round,
    value_at_models,
)

TASKS = ["mnist-5k", "digits"]
S_VALUES = [0.1, 0.3]
NODE_COUNTS = [10, 56]
ROUNDS = {10: 10, 56: 3}  # FFGB rounds per cell (full run), by number of clients
# --quick: a smoke run of every code path; 56 clients would cost 84 FedAvg rounds of 56 clients
# (1-2 minutes each) per FFGB round, so it runs 4 clients (2 rounds) and 10 (1 round) instead
QUICK_ROUNDS = {4: 2, 10: 1}
QUICK_ORACLE_STEPS = 5


def cell_name(task: str, s: float, nodes: int) -> str:
    return f"{task}-s{s:g}-n{nodes}"


def accuracy_at_bytes(rows: list[dict], budget: float) -> tuple[float, int, bool]:
    """Test accuracy of the last round whose cumulative bytes (up + down) do not exceed
    ``budget``, that round, and whether the run reached the budget at all."""
    rows = train_rows(rows)
    totals = cumulative_bytes(rows)
    within = [r for r, b in zip(rows, totals) if b <= budget * (1 + 1e-12)]
    if not within:
        return float("nan"), 0, True
    return within[-1]["test_accuracy"], within[-1]["round"], totals[-1] >= budget


def plot(results: dict, cells: list[tuple[str, float, int]], node_counts: list[int], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    cols = len(S_VALUES) * len(node_counts)
    fig, axes = plt.subplots(
        len(TASKS), cols, figsize=(4.6 * cols, 4.0 * len(TASKS)), squeeze=False
    )
    for task, s, nodes in cells:
        ax = axes[TASKS.index(task)][
            S_VALUES.index(s) * len(node_counts) + node_counts.index(nodes)
        ]
        cell = cell_name(task, s, nodes)
        ffgb = train_rows(results[f"{cell}-ffgb"]["rows"])
        fedavg = train_rows(results[f"{cell}-fedavg"]["rows"])
        budget = models_exchanged(ffgb[-1])
        ax.plot(
            [models_exchanged(r) for r in ffgb],
            [r["test_accuracy"] for r in ffgb],
            "o-",
            ms=4,
            label="FFGB (K = 3)",
        )
        ax.plot(
            [models_exchanged(r) for r in fedavg],
            [r["test_accuracy"] for r in fedavg],
            "-",
            lw=1.2,
            label="FedAvg (mlp32)",
        )
        acc, round_, _ = accuracy_at_bytes(fedavg, cumulative_bytes(ffgb)[-1])
        if not math.isnan(acc):
            ax.plot([2.0 * round_], [acc], "s", color="C3", ms=7, label="FedAvg at FFGB's bytes")
        ax.axvline(budget, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0.2, 1.0)
        ax.set_title(f"{task}, s = {s:g}, N = {nodes}", fontsize=10)
        ax.set_xlabel("models exchanged per client (paper's count)")
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--rounds-10",
        type=int,
        default=None,
        help="FFGB rounds with 10 clients (default 10; --quick 1)",
    )
    p.add_argument(
        "--rounds-56",
        type=int,
        default=None,
        help="FFGB rounds with 56 clients (default 3; not used by --quick)",
    )
    args = p.parse_args()
    start = time.perf_counter()
    rounds = dict(QUICK_ROUNDS if args.quick else ROUNDS)
    for nodes, value in ((10, args.rounds_10), (56, args.rounds_56)):
        if value is not None and nodes in rounds:
            rounds[nodes] = value
    node_counts = list(rounds)
    ffgb = {**FFGB, "ffgb.oracle-steps": QUICK_ORACLE_STEPS} if args.quick else FFGB
    k = ffgb["ffgb.local-steps"]
    s_values = S_VALUES[:1] if args.quick else S_VALUES
    cells = [(task, s, nodes) for task in TASKS for s in s_values for nodes in node_counts]
    jobs = []
    for task, s, nodes in cells:
        setup = {"task": task, "partitioning": "label-sort", "partitioning.s": s}
        per_round, odd = divmod(nodes * k, 2)  # FedAvg rounds per FFGB round
        assert not odd, "N K must be even for whole FedAvg rounds"
        cell = cell_name(task, s, nodes)
        jobs.append(
            Job(f"{cell}-ffgb", nodes, {**setup, **ffgb, "num-server-rounds": rounds[nodes]})
        )
        jobs.append(
            Job(
                f"{cell}-fedavg",
                nodes,
                {**setup, **FEDAVG, "num-server-rounds": per_round * rounds[nodes]},
            )
        )
    # longest first so the pool ends balanced: most clients, then FedAvg (N K / 2 rounds of N
    # clients per FFGB round), then mnist-5k (784 features)
    order = sorted(
        jobs,
        key=lambda j: (
            -j.num_nodes,
            j.overrides["algorithm"] != "fedavg",
            TASKS.index(j.overrides["task"]),
        ),
    )
    results = run_jobs(order, runs_dir(args.quick, "ffgb_figure1"), args.workers, args.reuse)

    table, cost = [], []
    wins_models = wins_bytes = 0
    for task, s, nodes in cells:
        cell = cell_name(task, s, nodes)
        f_rows = results[f"{cell}-ffgb"]["rows"]
        a_rows = results[f"{cell}-fedavg"]["rows"]
        f_last = train_rows(f_rows)[-1]
        budget = models_exchanged(f_last)
        f_acc = f_last["test_accuracy"]
        a_models = value_at_models(a_rows, budget)
        f_bytes = cumulative_bytes(train_rows(f_rows))[-1]
        a_bytes_acc, a_bytes_round, reached = accuracy_at_bytes(a_rows, f_bytes)
        a_bytes_total = cumulative_bytes(train_rows(a_rows))[-1]
        wins_models += f_acc >= a_models
        wins_bytes += f_acc >= a_bytes_acc
        table.append(
            [
                f"{task}, s = {s:g}, N = {nodes}",
                f_last["round"],
                f"{budget:g}",
                pct(f_acc),
                pct(a_models),
                f"{100 * (f_acc - a_models):+.2f}",
                num(f_acc / a_models, ".3f"),
                f"{pct(a_bytes_acc)}{'' if reached else ' (run ends first)'}",
                f"{a_bytes_round} ({2 * a_bytes_round:g})",
                f"{100 * (f_acc - a_bytes_acc):+.2f}",
                num(f_acc / a_bytes_acc, ".3f"),
            ]
        )
        f_train = train_rows(f_rows)
        a_train = train_rows(a_rows)
        cost.append(
            [
                f"{task}, s = {s:g}, N = {nodes}",
                f"{f_bytes / 1e6:.1f}",
                f"{a_bytes_total / 1e6:.1f}",
                num(a_bytes_total / f_bytes, ".2f"),
                f"{(f_train[-1]['bytes_up'] + f_train[-1]['bytes_down']) / nodes / 1e6:.2f}",
                f"{(a_train[-1]['bytes_up'] + a_train[-1]['bytes_down']) / nodes / 1e3:.0f}",
                num(f_train[-1]["train_loss"]),
                num(a_train[-1]["train_loss"]),
                num(seconds_per_round(f_rows), ".2f"),
                num(seconds_per_round(a_rows), ".3f"),
                f"{results[f'{cell}-ffgb']['wall_s']:.0f}",
                f"{results[f'{cell}-fedavg']['wall_s']:.0f}",
            ]
        )
    headers = [
        "cell",
        "FFGB rounds",
        "models / client",
        "FFGB acc %",
        "FedAvg acc % @models",
        "FFGB - FedAvg (pts)",
        "FFGB / FedAvg",
        "FedAvg acc % @FFGB's bytes",
        "FedAvg round (models)",
        "FFGB - FedAvg @bytes (pts)",
        "FFGB / FedAvg @bytes",
    ]
    cost_headers = [
        "cell",
        "FFGB MB (run)",
        "FedAvg MB (run)",
        "FedAvg / FFGB bytes",
        "FFGB MB / client / round",
        "FedAvg kB / client / round",
        "FFGB train loss (last)",
        "FedAvg train loss (last)",
        "FFGB s/round",
        "FedAvg s/round",
        "FFGB run s",
        "FedAvg run s",
    ]
    png = results_dir(args.quick) / "ffgb_figure1.png"
    plot(results, cells, node_counts, png)
    wall = time.perf_counter() - start
    rounds_text = ", ".join(
        f"{r} with {n} clients ({r * n * k} models exchanged per client; "
        f"FedAvg {r * n * k // 2} rounds)"
        for n, r in rounds.items()
    )
    body = f"""\
Label-sort partitioning (s of the training data spread evenly, the rest sorted by label and
dealt out in order, as in the paper's section 4.1), seed 0, one run per cell. `mnist-5k`: 4,000
train / 1,000 test images (pixels / 255); `digits`: scikit-learn's 8x8 digits (64 features).
FFGB: K = {k}, {ffgb["ffgb.oracle-steps"]} Adam steps per weak-learner fit, eta0 = 10, MLP
learners d-32-32-10. FedAvg: the same network as the whole model (`mlp32`), SGD lr 0.3, batch 16,
one epoch a round. FFGB rounds: {rounds_text}. Every run goes through the real ServerApp and
ClientApp on the in-process engine (one process per run, one torch thread, {args.workers} runs
at a time). Test accuracy is the global model's on the whole test set.

## FFGB vs FedAvg at equal cost

"@models": FedAvg's accuracy at its last round within FFGB's models exchanged per client (the
paper's count: FFGB N K a round, FedAvg 2). "@FFGB's bytes": at its last round whose cumulative
payload (bytes up + down, all messages, all clients; FedAvg's evaluation rides on its train
messages, `eval-with-train`) does not exceed FFGB's whole run; "FedAvg round (models)" is that
round and its models count. FFGB at least as accurate: {wins_models} of {len(cells)} cells at equal
models exchanged, {wins_bytes} of {len(cells)} at equal bytes.

{md_table(headers, table)}

## Bytes, loss and time

{md_table(cost_headers, cost)}

![accuracy vs models exchanged, one panel per cell]({png.name})

The dotted line is FFGB's budget; the red square is FedAvg at FFGB's bytes (plotted at its
models count).
"""
    write_report(
        results_dir(args.quick) / "ffgb_figure1.md",
        "FFGB vs FedAvg at equal cost: Figure 1 / Figure 4 analogue",
        wall,
        body,
    )


if __name__ == "__main__":
    main()
