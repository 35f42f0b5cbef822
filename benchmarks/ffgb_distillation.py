"""FFGB with its ensemble bounded by distillation (section 5 of the FFGB paper), against plain FFGB
and FedAvg at equal models exchanged, in the authors' MNIST setup.

mnist-5k, label-sort s = 0.1, 10 clients, K = 3, 500 Adam steps per fit, eta0 = 10 (as
benchmarks/ffgb_mnist.py); every run gets the same budget of models exchanged per client (the
paper's count, section 4.1: plain FFGB N K = 30 a round, FedAvg 2):

- ``ffgb``: plain FFGB (20 rounds);
- ``increment``: each node distils its K new learners into one before upload (N a round);
- ``function``: each node distils its whole g^{K+1} (the paper's proposal; ensemble of N);
- ``increment+global``: ``increment``, and after every 10 boosting rounds 2 FedAvg rounds that
  distil the global ensemble into one network;
- ``ffgb-c``: FFGB.C (sup-norm oracle WO-infinity, p = 8, clipped learners and residuals), and
  ``ffgb-c-sup-p1`` the same with p = 1 (a mean-squared fit: clipping without the sup norm);
- ``fedavg``: FedAvg with the learner's network as the whole model (``mlp32``), our defaults.

    python -m benchmarks.ffgb_distillation            # full (about 20 min on 2 cores)
    python -m benchmarks.ffgb_distillation --quick    # a smoke run (about 1 min)
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
from benchmarks.ffgb_mnist import (
    FEDAVG,
    FFGB,
    NODES,
    SETUP,
    cumulative_bytes,
    models_exchanged,
    seconds_per_round,
    value_at_models,
)

DISTILLED = {
    "increment": {"ffgb.distill": "increment"},
    "function": {"ffgb.distill": "function"},
    "increment+global": {
        "ffgb.distill": "increment",
        "ffgb.distill-every": 10,
        "ffgb.distill-rounds": 2,
    },
}


def plot(results: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for name, result in results.items():
        rows = train_rows(result["rows"])
        accuracy = [r["test_accuracy"] for r in rows]
        axes[0].plot([models_exchanged(r) for r in rows], accuracy, label=name)
        axes[1].plot([b / 1e6 for b in cumulative_bytes(rows)], accuracy, label=name)
        if name.startswith("ffgb"):
            axes[2].plot([r["round"] for r in rows], [r["ensemble_size"] for r in rows], label=name)
    axes[0].set_xlabel("models exchanged per client (paper's count)")
    axes[1].set_xlabel("bytes up + down, all clients (MB, payload)")
    axes[1].set_xscale("log")
    axes[2].set_xlabel("server round")
    axes[2].set_ylabel("learners in the global ensemble")
    axes[2].set_yscale("log")
    for ax in axes[:2]:
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.5, 1.0)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("mnist-5k, label-sort s = 0.1, 10 clients, K = 3")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    rounds = 1 if args.quick else 20  # of plain FFGB; the others get its models budget
    ffgb = {**FFGB, "ffgb.oracle-steps": 5} if args.quick else FFGB
    k = ffgb["ffgb.local-steps"]
    jobs = {"ffgb": {**ffgb, "num-server-rounds": rounds}}
    for name, extra in DISTILLED.items():
        jobs[f"ffgb-{name}"] = {**ffgb, **extra, "num-server-rounds": rounds * k}
    # which part of FFGB.C helps here: the sup-norm oracle (p = 8) or the clipping (p = 1)
    jobs["ffgb-c"] = {**ffgb, "algorithm": "ffgb-c", "num-server-rounds": rounds}
    jobs["ffgb-c-sup-p1"] = {**jobs["ffgb-c"], "ffgb.sup-p": 1.0}
    jobs["fedavg-mlp32"] = {**FEDAVG, "num-server-rounds": rounds * NODES * k // 2}
    results = run_jobs(
        [Job(name, NODES, {**SETUP, **config}) for name, config in jobs.items()],
        runs_dir(args.quick, "ffgb_distillation"),
        args.workers,
        args.reuse,
    )

    budget = max(models_exchanged(r) for r in train_rows(results["ffgb"]["rows"]))
    checkpoints = sorted({budget * f for f in (0.25, 0.5, 1.0)})
    table = []
    for name in jobs:
        rows = results[name]["rows"]
        last = train_rows(rows)[-1]
        within = [r for r in train_rows(rows) if models_exchanged(r) <= budget + 1e-9]
        table.append(
            [name, within[-1]["round"]]
            + [pct(value_at_models(rows, c)) for c in checkpoints]
            + [
                f"{cumulative_bytes(rows)[-1] / 1e6:.1f}",
                last.get("ensemble_size", 1),
                num(last.get("distill_error", float("nan")), ".3f"),
                num(seconds_per_round(rows), ".2f"),
            ]
        )
    headers = (
        ["run", "rounds"]
        + [f"acc % @{c:g} models" for c in checkpoints]
        + ["MB up+down", "final ensemble", "distill error", "s/round (1 core)"]
    )
    png = results_dir(args.quick) / "ffgb_distillation.png"
    plot(results, png)
    wall = time.perf_counter() - start
    body = f"""\
`mnist-5k` (4,000 train / 1,000 test), label-sort s = 0.1 over {NODES} clients, seed 0, one run
per cell, FFGB with K = {k} and {ffgb["ffgb.oracle-steps"]} Adam steps per fit. Every run goes
through the real ServerApp and ClientApp on the in-process engine (one process per run, one torch
thread, {args.workers} runs at a time). Each run has the same budget of models exchanged per
client ({budget:g}, the paper's count: plain FFGB N K a round, FedAvg 2, client-side
distillation N, a FedAvg distillation round 2 plus the new student once). "MB up+down" is the
payload of all messages, all clients, over the whole run. "distill error": RMS of target minus
distilled function on the nodes' points at the last round that distilled.

{md_table(headers, table)}

![accuracy vs models exchanged and bytes; ensemble size]({png.name})
"""
    write_report(
        results_dir(args.quick) / "ffgb_distillation.md",
        "FFGB with distillation vs plain FFGB and FedAvg (mnist-5k, label-sort)",
        wall,
        body,
    )


if __name__ == "__main__":
    main()
