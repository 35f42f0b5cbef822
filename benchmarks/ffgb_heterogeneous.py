"""FFGB.C and FFGB.L under heterogeneity: accuracy and loss against the omega of the theorems.

Part 1 (Theorem 3.2): FFGB.C and FFGB on `digits` over 10 clients, split iid, label-sort
(s = 0.1, the paper's split) and kmeans (the fully heterogeneous split: clients hold different
regions of feature space), each next to the heterogeneity report of its split
(``tasks.heterogeneity``: mean over clients of W1, of the classifier estimate of TV and of the
TV of the labels). FFGB.C's radius grows with omega = mean TV. One node holding all the data
(omega = 0) is the central reference; eta0 = 10 (the default) is shown on kmeans next to the
eta0 = 30 of the table.

Part 2 (Theorem 3.3): FFGB.L on `diabetes` and on the bundled 1-Lipschitz `lipschitz` task,
split iid and kmeans over 10 clients, with the same report (FFGB.L's radius grows with
omega = mean W1): test MSE per round; FedAvg with FFGB's learner network as the model
(`mlp32`) on the same split at equal models exchanged (the paper's count: N K a round for
FFGB, 2 for FedAvg); central references (FFGB.L on one node; scikit-learn MLPRegressor and
ridge regression on the pooled training set; the training mean; for `lipschitz` the noise
floor). FFGB.L's learners do not depend on f^t (Remark 3.1), so its step-size variants are run
in the one-round form (``ffgb.one-shot=true``, the same per-round metrics at a tenth of the
cost); one one-shot run repeats a multi-round one as a check.

    python -m benchmarks.ffgb_heterogeneous            # full (about 10-15 min on 2 cores)
    python -m benchmarks.ffgb_heterogeneous --quick    # a smoke run (about 1 min)
"""

from __future__ import annotations

import json
import math
import time

import numpy as np

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
from benchmarks.ffgb_mnist import models_exchanged, value_at_models

NODES = 10
SEED = 0
DIGITS_SPLITS = {
    "iid": {"partitioning": "iid"},
    "label-sort": {"partitioning": "label-sort", "partitioning.s": 0.1},
    "kmeans": {"partitioning": "kmeans"},
}
REGRESSION_TASKS = ("diabetes", "lipschitz")
REGRESSION_SPLITS = {"iid": {"partitioning": "iid"}, "kmeans": {"partitioning": "kmeans"}}
CENTRAL = {"partitioning": "iid", "min-nodes": 1}  # one node with all the training data
# FFGB and FFGB.C on digits: K = 3, 200 Adam steps per fit, MLP 64-32-32-10; eta0 = 30 chosen
# over the default 10 on kmeans (both are in the report)
DIGITS_FFGB = {"task": "digits", "ffgb.local-steps": 3, "ffgb.oracle-steps": 200, "ffgb.eta0": 30.0}
DIGITS_ETA_DEFAULT = 10.0
# FFGB.L: K = 3, 200 steps per Sobolev fit, MLP d-32-32-1, L from each node's data (default);
# eta0 = 1 (eta_{k,t} = 1/(Kt + k + 1) <= 1/2: g stays an average of f^t and the learners)
# the paper's eq. 17 extension named: ``auto`` takes the midpoint when L comes from the data
FFGB_L = {
    "algorithm": "ffgb-l",
    "ffgb.local-steps": 3,
    "ffgb.oracle-steps": 200,
    "ffgb.eta0": 1.0,
    "ffgb.extension": "upper",
}
ONE_SHOT_ETAS = (4.0, 10.0)  # 4 = the constant of Theorem 3.3 with the square loss's mu = 1
FEDAVG = {"algorithm": "fedavg", "model": "mlp32", "learning-rate": 0.05}


# -- heterogeneity and central baselines (in this process) -----------------------------------
def heterogeneity(task: str, split: dict) -> dict:
    from tasks.heterogeneity import heterogeneity_report

    params = {"s": split["partitioning.s"]} if "partitioning.s" in split else {}
    report = heterogeneity_report(task, split["partitioning"], NODES, SEED, **params)
    return {
        k: report[k]
        for k in ("sizes", "w1", "tv", "tv_labels", "mean_w1", "mean_tv", "mean_tv_labels")
    }


def central_regression(task_name: str, quick: bool) -> dict[str, float]:
    """Test MSE of central fits on the pooled training set (and the lipschitz noise floor)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import RidgeCV
    from sklearn.neural_network import MLPRegressor

    from tasks.datasets import lipschitz_target, load_task

    task = load_task(task_name, seed=SEED)
    x, y = task.x_train.astype(np.float64), task.y_train.astype(np.float64)
    xt, yt = task.x_test.astype(np.float64), task.y_test.astype(np.float64)

    def mse(pred: np.ndarray) -> float:
        return float(np.mean((pred - yt) ** 2))

    out = {
        "training mean": mse(np.full_like(yt, y.mean())),
        "ridge (RidgeCV)": mse(RidgeCV(alphas=np.logspace(-3, 3, 13)).fit(x, y).predict(xt)),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for alpha in (1e-4, 1e-1):
            mlp = MLPRegressor(
                hidden_layer_sizes=(32, 32),
                alpha=alpha,
                max_iter=200 if quick else 2000,
                random_state=SEED,
            ).fit(x, y)
            out[f"MLPRegressor 32-32, alpha={alpha:g}"] = mse(mlp.predict(xt))
    if task_name == "lipschitz":
        out["f* itself (noise floor)"] = mse(lipschitz_target(xt))
    return out


# -- plot -------------------------------------------------------------------------------------
def plot(
    results: dict, het: dict, digits_names: dict, reg_names: dict, central: dict, path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(23, 4.8))
    styles = {"ffgb": "-", "ffgb-c": "--"}
    split_colours = {
        "iid": "tab:green",
        "label-sort": "tab:purple",
        "kmeans": "tab:red",
        "central": "tab:grey",
    }
    for (split, alg), name in digits_names.items():
        rows = train_rows(results[name]["rows"])
        axes[0].plot(
            [r["round"] for r in rows],
            [r["test_accuracy"] for r in rows],
            styles[alg],
            color=split_colours[split],
            label=f"{alg}, {split}",
        )
    axes[0].set_title("digits, 10 clients: test accuracy")
    axes[0].set_xlabel("round")
    axes[0].set_ylabel("test accuracy")
    for alg, marker in (("ffgb", "o"), ("ffgb-c", "s")):
        points = [
            (het[("digits", s)]["mean_tv"], results[n]["rows"][-1]["test_accuracy"])
            for (s, a), n in digits_names.items()
            if a == alg and s != "central"
        ]
        points.append((0.0, results[digits_names[("central", alg)]]["rows"][-1]["test_accuracy"]))
        points.sort()
        axes[1].plot(*zip(*points), marker=marker, label=alg)
    axes[1].set_title("digits: final test accuracy vs omega = mean TV")
    axes[1].set_xlabel("mean TV(alpha, alpha_i) (classifier estimate; central = 0)")
    axes[1].set_ylabel("test accuracy")
    colours = {"diabetes": "tab:blue", "lipschitz": "tab:orange"}
    for (task, split, alg), name in reg_names.items():
        if split == "central":
            continue
        rows = train_rows(results[name]["rows"])
        axes[2].plot(
            [models_exchanged(r) for r in rows],
            [r["test_mse"] for r in rows],
            "-" if split == "kmeans" else ":",
            color=colours[task],
            marker="o" if alg == "ffgb-l" else None,
            markersize=3,
            label=f"{alg}, {task}, {split}",
        )
    axes[2].set_title("regression, 10 clients: test MSE")
    axes[2].set_xlabel("models exchanged per client (paper's count)")
    axes[2].set_ylabel("test MSE")
    axes[2].set_yscale("log")
    for task in central:  # the regression tasks run
        ref = results[reg_names[(task, "central", "ffgb-l")]]["rows"][-1]["test_mse"]
        points = [(0.0, ref)] + [
            (
                het[(task, s)]["mean_w1"],
                results[reg_names[(task, s, "ffgb-l")]]["rows"][-1]["test_mse"],
            )
            for s in REGRESSION_SPLITS
        ]
        points.sort()
        axes[3].plot(*zip(*points), marker="o", color=colours[task], label=f"ffgb-l, {task}")
        axes[3].axhline(central[task]["training mean"], color=colours[task], lw=0.8, ls=":")
    axes[3].set_title("FFGB.L: final test MSE vs omega = mean W1 (dotted: training mean)")
    axes[3].set_xlabel("mean W1(alpha, alpha_i) (central = 0)")
    axes[3].set_ylabel("test MSE")
    axes[3].set_yscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- main -------------------------------------------------------------------------------------
def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    quick = args.quick
    digits_rounds, reg_rounds = (2, 1) if quick else (15, 10)
    tasks = ("lipschitz",) if quick else REGRESSION_TASKS  # --quick: the check's task only
    steps = {"ffgb.oracle-steps": 5} if quick else {}
    k = FFGB_L["ffgb.local-steps"]
    fedavg_rounds = reg_rounds * NODES * k // 2  # equal models exchanged: N K vs 2 a round

    jobs: list[Job] = []
    digits_names: dict[tuple[str, str], str] = {}
    reg_names: dict[tuple[str, str, str], str] = {}
    extra_names: dict[str, str] = {}  # name -> what it is

    def add(name: str, nodes: int, config: dict) -> str:
        jobs.append(Job(name, nodes, {"seed": SEED, **config}))
        return name

    # the long runs first, so that two workers finish together
    for task in tasks:
        for split, part in REGRESSION_SPLITS.items():
            reg_names[(task, split, "ffgb-l")] = add(
                f"{task}-{split}-ffgb-l",
                NODES,
                {**FFGB_L, **steps, **part, "task": task, "num-server-rounds": reg_rounds},
            )
    for split, part in DIGITS_SPLITS.items():
        for alg in ("ffgb-c", "ffgb"):
            digits_names[(split, alg)] = add(
                f"digits-{split}-{alg}",
                NODES,
                {
                    **DIGITS_FFGB,
                    **steps,
                    **part,
                    "algorithm": alg,
                    "num-server-rounds": digits_rounds,
                },
            )
    for alg in ("ffgb-c", "ffgb"):
        extra_names[
            add(
                f"digits-kmeans-{alg}-eta10",
                NODES,
                {
                    **DIGITS_FFGB,
                    **steps,
                    **DIGITS_SPLITS["kmeans"],
                    "algorithm": alg,
                    "ffgb.eta0": DIGITS_ETA_DEFAULT,
                    "num-server-rounds": digits_rounds,
                },
            )
        ] = f"{alg}, kmeans, eta0 = {DIGITS_ETA_DEFAULT:g} (default)"
        digits_names[("central", alg)] = add(
            f"digits-central-{alg}",
            1,
            {
                **DIGITS_FFGB,
                **steps,
                **CENTRAL,
                "algorithm": alg,
                "num-server-rounds": digits_rounds,
            },
        )
    for task in tasks:
        for split, part in REGRESSION_SPLITS.items():
            reg_names[(task, split, "fedavg")] = add(
                f"{task}-{split}-fedavg",
                NODES,
                {**FEDAVG, **part, "task": task, "num-server-rounds": fedavg_rounds},
            )
            for eta in ONE_SHOT_ETAS:
                extra_names[
                    add(
                        f"{task}-{split}-ffgb-l-oneshot-eta{eta:g}",
                        NODES,
                        {
                            **FFGB_L,
                            **steps,
                            **part,
                            "task": task,
                            "ffgb.eta0": eta,
                            "ffgb.one-shot": True,
                            "num-server-rounds": reg_rounds,
                        },
                    )
                ] = f"ffgb-l, {task}, {split}, eta0 = {eta:g} (one-shot)"
            extra_names[
                add(
                    f"{task}-{split}-ffgb-l-oneshot-midpoint",
                    NODES,
                    {
                        **FFGB_L,
                        **steps,
                        **part,
                        "task": task,
                        "ffgb.one-shot": True,
                        "ffgb.extension": "midpoint",
                        "num-server-rounds": reg_rounds,
                    },
                )
            ] = f"ffgb-l, {task}, {split}, eta0 = 1, midpoint extension (one-shot)"
        reg_names[(task, "central", "ffgb-l")] = add(
            f"{task}-central-ffgb-l",
            1,
            {**FFGB_L, **steps, **CENTRAL, "task": task, "num-server-rounds": reg_rounds},
        )
    check_name = add(
        "lipschitz-kmeans-ffgb-l-oneshot-eta1",
        NODES,
        {
            **FFGB_L,
            **steps,
            **REGRESSION_SPLITS["kmeans"],
            "task": "lipschitz",
            "ffgb.one-shot": True,
            "num-server-rounds": reg_rounds,
        },
    )

    print(f"{len(jobs)} runs on {args.workers} workers", flush=True)
    results = run_jobs(jobs, runs_dir(quick, "ffgb_heterogeneous"), args.workers, args.reuse)

    # heterogeneity reports and central fits, after the runs (one heavy job at a time)
    het_start = time.perf_counter()
    het = {("digits", s): heterogeneity("digits", p) for s, p in DIGITS_SPLITS.items()}
    het |= {(t, s): heterogeneity(t, p) for t in tasks for s, p in REGRESSION_SPLITS.items()}
    central = {t: central_regression(t, quick) for t in tasks}
    side_s = time.perf_counter() - het_start
    (runs_dir(quick, "ffgb_heterogeneous") / "heterogeneity.json").write_text(
        json.dumps({f"{t}/{s}": v for (t, s), v in het.items()}, indent=1)
    )

    # -- part 1 table --
    checkpoints = sorted({1, max(1, digits_rounds // 3), 2 * digits_rounds // 3, digits_rounds})
    digits_table = []
    for split in [*DIGITS_SPLITS, "central"]:
        h = het.get(("digits", split))
        for alg in ("ffgb-c", "ffgb"):
            rows = results[digits_names[(split, alg)]]["rows"]
            acc = {r["round"]: r["test_accuracy"] for r in rows}
            last = rows[-1]
            digits_table.append(
                [
                    f"{split}" if split != "central" else "central (1 node)",
                    alg,
                    num(h["mean_w1"], ".3f") if h else "0",
                    num(h["mean_tv"], ".3f") if h else "0",
                    num(h["mean_tv_labels"], ".3f") if h else "0",
                ]
                + [pct(acc.get(c, math.nan)) for c in checkpoints]
                + [
                    num(last["test_loss"]),
                    num(last["train_loss"]),
                    f"{results[digits_names[(split, alg)]]['wall_s']:.0f}",
                ]
            )
    digits_headers = (
        ["split", "algorithm", "mean W1", "mean TV", "mean TV(y)"]
        + [f"acc % @{c}" for c in checkpoints]
        + ["test loss (last)", "train loss (last)", "wall s"]
    )
    eta_table = []
    for name, label in extra_names.items():
        if not name.startswith("digits"):
            continue
        alg = "ffgb-c" if "ffgb-c" in name else "ffgb"
        rows, ref = results[name]["rows"], results[digits_names[("kmeans", alg)]]["rows"]
        eta_table.append(
            [
                label,
                pct(rows[-1]["test_accuracy"]),
                num(rows[-1]["train_loss"]),
                pct(ref[-1]["test_accuracy"]),
                num(ref[-1]["train_loss"]),
            ]
        )
    eta_headers = [
        "run",
        "acc % (last)",
        "train loss (last)",
        f"same with eta0 = {DIGITS_FFGB['ffgb.eta0']:g}: acc %",
        "train loss",
    ]

    # -- part 2 tables --
    budget = reg_rounds * NODES * k  # FFGB.L's models exchanged at the last round
    one_shot_budget = k + NODES * k
    reg_table = []
    per_round = []
    for task in tasks:
        ref_name = reg_names[(task, "central", "ffgb-l")]
        ref = results[ref_name]["rows"][-1]["test_mse"]
        for split in [*REGRESSION_SPLITS, "central"]:
            h = het.get((task, split))
            name = reg_names[(task, split, "ffgb-l")]
            rows = results[name]["rows"]
            mses = [r["test_mse"] for r in train_rows(rows)]
            fed = reg_names.get((task, split, "fedavg"))
            reg_table.append(
                [
                    task,
                    split if split != "central" else "central (1 node)",
                    num(h["mean_w1"], ".3f") if h else "0",
                    num(h["mean_tv"], ".3f") if h else "0",
                    num(h["mean_tv_labels"], ".3f") if h else "0",
                    num(rows[0]["test_mse"]),
                    num(min(mses)),
                    num(mses[-1]),
                    num(mses[-1] / ref, ".2f"),
                    num(value_at_models(results[fed]["rows"], one_shot_budget, "test_mse"))
                    if fed
                    else "",
                    num(value_at_models(results[fed]["rows"], budget, "test_mse")) if fed else "",
                    num(min(r["test_mse"] for r in train_rows(results[fed]["rows"])))
                    if fed
                    else "",
                ]
            )
            per_round.append([f"{task}, {split}"] + [num(m) for m in mses])
    reg_headers = [
        "task",
        "split",
        "mean W1",
        "mean TV",
        "mean TV(y)",
        "MSE of f0 = 0",
        "FFGB.L best MSE",
        "FFGB.L final MSE",
        "final / central FFGB.L",
        f"FedAvg MSE @{one_shot_budget} models",
        f"FedAvg MSE @{budget} models",
        "FedAvg best MSE",
    ]
    round_headers = ["FFGB.L test MSE"] + [f"r{r}" for r in range(1, reg_rounds + 1)]
    central_headers = ["central fit (pooled training set)"] + list(tasks)
    labels = sorted({label for c in central.values() for label in c})
    central_table = [
        [label] + [num(central[t].get(label, math.nan)) for t in tasks] for label in labels
    ]
    one_shot_table = []
    for name, label in extra_names.items():
        if name.startswith("digits"):
            continue
        rows = train_rows(results[name]["rows"])
        one_shot_table.append(
            [
                label,
                num(rows[0]["test_mse"]),
                num(min(r["test_mse"] for r in rows)),
                num(rows[-1]["test_mse"]),
            ]
        )
    one_shot_headers = ["run", "MSE @r1", "best MSE", "final MSE"]
    check_rows = results[check_name]["rows"]
    multi_rows = results[reg_names[("lipschitz", "kmeans", "ffgb-l")]]["rows"]
    check_diff = max(
        abs(a["test_mse"] - b["test_mse"]) / b["test_mse"]
        for a, b in zip(train_rows(check_rows), train_rows(multi_rows))
    )
    check_models = train_rows(check_rows)[-1]["models_exchanged"]

    png = results_dir(quick) / "ffgb_heterogeneous.png"
    plot(results, het, digits_names, reg_names, central, png)
    wall = time.perf_counter() - start
    run_s = sum(r["wall_s"] for r in results.values())
    het_lines = "\n".join(
        f"- {t}, {s}: client sizes {h['sizes']}; W1 per client "
        f"{', '.join(f'{v:.2f}' for v in h['w1'])}"
        for (t, s), h in het.items()
        if s == "kmeans"
    )
    body = f"""\
{NODES} clients, seed {SEED}, one run per cell; every run goes through the real ServerApp
and ClientApp on the in-process engine (one process per run, one torch thread, {args.workers}
runs at a time; {len(jobs)} runs, {run_s:.0f} s of run time in all; heterogeneity reports and
central fits {side_s:.0f} s). omega: `tasks.heterogeneity` on the same split (W1: exact OT on at
most 500 points per side, Euclidean cost on the preprocessed features; TV: 2 x cross-validated
balanced accuracy of a logistic regression telling the client's points from the pooled ones,
minus 1, a lower estimate; TV(y): plug-in TV of the label (regression: target-decile)
frequencies), means over the clients; "central (1 node)" is the same algorithm with one node
holding all the training data (omega = 0).

## Part 1: FFGB.C and FFGB on digits (Theorem 3.2: radius ~ omega = mean TV)

K = {DIGITS_FFGB["ffgb.local-steps"]}, MLP 64-32-32-10 leaky-ReLU learners,
{(steps or DIGITS_FFGB)["ffgb.oracle-steps"]} Adam steps per fit, eta0 =
{DIGITS_FFGB["ffgb.eta0"]:g} (`experiment` schedule eta0 / (K t + k + 1)), mu = 0, cross-entropy.
FFGB.C: WO-infinity oracle (smooth sup, p = 8), gamma = 0.5, G = 1, so the residual is clipped
to G1 = 1 and the learners to G2 = 3 (no final clip Pi_B: mu = 0). {digits_rounds} rounds =
{digits_rounds * NODES * DIGITS_FFGB["ffgb.local-steps"]} models exchanged per client.

{md_table(digits_headers, digits_table)}

eta0: the default (10) against the table's 30 on kmeans (the only tuning; chosen on kmeans):

{md_table(eta_headers, eta_table)}

## Part 2: FFGB.L on {" and ".join(tasks)} (Theorem 3.3: radius ~ omega = mean W1)

FFGB.L: K = {k}, MLP d-32-32-1 leaky-ReLU learners fitted by WO-lip (smooth sup of the value
error on the node's points + the input-Jacobian error at 256 points of the node's bounding box,
weight 1), {(steps or FFGB_L)["ffgb.oracle-steps"]} Adam steps per fit, eta0 =
{FFGB_L["ffgb.eta0"]:g}, u_i = the Lipschitz extension of eq. 17 with L = the largest label slope
on the node's data (`ffgb.lipschitz=0`), {reg_rounds} rounds = {budget} models exchanged per
client. FedAvg: `mlp32` (the same 32-32 leaky-ReLU network as one model), SGD lr
{FEDAVG["learning-rate"]:g} (0.3, the default, oscillates on diabetes), batch 16, one local epoch,
{fedavg_rounds} rounds = {budget} models; "@{one_shot_budget} models" is FedAvg at FFGB.L's cost
in its one-round form (K up + N K down, Remark 3.1). `diabetes`: features and target
standardised (MSE in units of the target's training variance); `lipschitz`: raw units (target
variance about 0.11, noise floor 0.0025).

{md_table(reg_headers, reg_table)}

Per round:

{md_table(round_headers, per_round)}

Central fits on the pooled training set (test MSE):

{md_table(central_headers, central_table)}

FFGB.L step sizes (one-shot form; 4 is Theorem 3.3's constant c / mu with mu = 1, 10 the
default): eta_{{k,t}} > 1 in the first steps makes g^{{k+1}} = (1 - eta) g^k + eta h an
extrapolation, not an average.

{md_table(one_shot_headers, one_shot_table)}

Check of Remark 3.1: the one-shot run of lipschitz/kmeans at eta0 = {FFGB_L["ffgb.eta0"]:g}
matches the multi-round run's test MSE to a relative {check_diff:.1e} at every round, with
{check_models:g} models exchanged per client instead of {budget}.

Client sizes and W1 per client of the kmeans splits:

{het_lines}

![digits accuracy, FFGB.L and FedAvg MSE, against rounds and omega]({png.name})
"""
    write_report(
        results_dir(quick) / "ffgb_heterogeneous.md",
        "FFGB.C and FFGB.L under heterogeneity (digits, diabetes, lipschitz)",
        wall,
        body,
    )


if __name__ == "__main__":
    main()
