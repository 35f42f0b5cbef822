"""Seconds per round on the CPU and on a GPU, for every family, side by side in one process.

Issue 37 items 3 and 5. Modes: ``cpu`` (every node, and the central evaluation, given
``device='cpu'``), ``cuda-eager`` (``'cuda'`` with the oracles' steps launched one by one:
``FL_CUDA_GRAPHS=0``, what issue 37 measured) and ``cuda-graphs`` (``'cuda'`` with the steps
replayed as CUDA graphs, the default: ``oracles.graphed_steps``); ``cpu-together`` and
``cuda-graphs-together`` run the 10 nodes of a round in lockstep, their MLP fits made as one
batched fit (``oracles.lockstep``: one process holding every node, one GPU). Two tables:

1. One oracle fit (the hot path): FFGB's WO2 with an MLP on digits and on mnist-5k points, with
   the LeNet on mnist-5k, FFGB.L's WO-lip, and FedFun's FSR step with three anchors; best of
   ``--repeats``.
2. Whole rounds: the in-process engine, 10 nodes; each workload's figure is the median time of
   rounds 2..R (round 1 pays CUDA's start-up and, for FedFun and PSR, the initial pass), with
   its final loss in each mode (same seed: the modes agree to float tolerance).

The in-process engine runs the nodes one after another, each with one torch thread (as the apps
set it), so the CPU column is one core's, as on a site whose SuperNode trains one node.

    python -m benchmarks.devices                       # on a machine with a GPU
    python -m benchmarks.devices --devices cpu         # the CPU columns alone, any machine
    python -m benchmarks.devices --modes cpu,cuda-graphs --only "FedFun|PSR" --skip-oracles
    python -m benchmarks.devices --modes cpu,cpu-together --skip-oracles --only "default job"
    python -m benchmarks.devices --quick
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import md_table, parser, results_dir, write_report
from oracles import graphed_steps

NODES = 10
CPU, EAGER, GRAPHS = "cpu", "cuda-eager", "cuda-graphs"
TOGETHER = "-together"  # a mode's nodes run in lockstep, their fits made together
MODES = (CPU, EAGER, GRAPHS, CPU + TOGETHER, GRAPHS + TOGETHER)
# (name, run-config overrides, rounds on the GPU, on the CPU); the first five are issue 37's
# table. FedFun's and PSR's round 1 runs fedfun.initial-steps (2,000 by default) before its
# round: cut to 200 here, as round 1 is not timed.
SHORT_START = {"fedfun.initial-steps": 200}
WORKLOADS: list[tuple[str, dict[str, Any], int, int]] = [
    ("FFGB, MLP learners, digits (the default job)", {}, 2, 2),
    ("FFGB, MLP learners, mnist-5k", {"task": "mnist-5k"}, 2, 2),
    (
        "FFGB, CNN learners (LeNet), mnist-5k, 200 oracle steps",
        {"task": "mnist-5k", "ffgb.learner": "cnn", "ffgb.oracle-steps": 200},
        2,
        1,  # about a minute a round on one core
    ),
    (
        "FedFun, MLP 50-50, synthetic",
        {"algorithm": "fedfun", "task": "synthetic", "fedfun.hidden": "50,50", **SHORT_START},
        2,
        2,
    ),
    ("FedAvg, CNN, mnist-5k", {"algorithm": "fedavg", "task": "mnist-5k", "model": "cnn"}, 2, 2),
    ("FFGB.C, MLP learners, digits", {"algorithm": "ffgb-c"}, 2, 2),
    # rounds after the first replay the node's first fits (client_app.ffgb_l_fits): the oracle's
    # cost is WO-lip's row of the oracle table
    ("FFGB.L, MLP learners, lipschitz", {"algorithm": "ffgb-l", "task": "lipschitz"}, 2, 2),
    ("FedFW, synthetic", {"algorithm": "fedfw", "task": "synthetic"}, 2, 2),
    ("FedDR, synthetic", {"algorithm": "feddr", "task": "synthetic"}, 2, 2),
    ("FedProx, digits", {"algorithm": "fedprox"}, 2, 2),
    ("PSR, synthetic", {"algorithm": "psr", "task": "synthetic", **SHORT_START}, 2, 2),
    ("DFedAvgM, synthetic", {"algorithm": "dfedavgm", "task": "synthetic"}, 2, 2),
    ("DFedFish, synthetic", {"algorithm": "dfedfish", "task": "synthetic"}, 2, 2),
    ("DFedDF, synthetic", {"algorithm": "dfeddf", "task": "synthetic"}, 2, 2),
]
QUICK = {"ffgb.oracle-steps": 40, "fedfun.local-steps": 20, "fedfun.initial-steps": 40}


def _together(mode: str) -> int:
    """How many nodes the in-process engine runs in lockstep in ``mode``."""
    return NODES if mode.endswith(TOGETHER) else 1


def _mode_env(mode: str) -> None:
    """Graphs off for the eager mode, on (the default) otherwise."""
    if mode == EAGER:
        os.environ[graphed_steps.ENV] = "0"
    else:
        os.environ.pop(graphed_steps.ENV, None)


def _device(mode: str) -> str:
    return "cpu" if mode.startswith(CPU) else "cuda"


def _finite(values: dict[str, float]) -> dict[str, float | None]:
    """NaN (a failed mode) as null, for the JSON record."""
    return {k: v if v == v else None for k, v in values.items()}


# -- one oracle fit --------------------------------------------------------------------------
def _oracle_cases(quick: bool) -> dict[str, Callable[[torch.device], np.ndarray]]:
    """Name -> a fit on a device returning its fitted values (for the comparison)."""
    from functions.convnets import ConvNetSpec
    from functions.networks import NetworkSpec, build
    from oracles.fsr_network import Anchor, fsr_train
    from oracles.weak_learning import OracleSettings, fit_least_squares, fit_sobolev
    from tasks.datasets import load_task

    steps = 50 if quick else 500
    settings = OracleSettings(steps=steps, lr=0.005, batch_size=128)
    rng = np.random.default_rng(0)
    cases: dict[str, Callable[[torch.device], np.ndarray]] = {}
    for task, points in (("digits", 180), ("mnist-5k", 400)):
        x = load_task(task).x_train[:points].reshape(points, -1).astype(np.float32)
        target = rng.normal(size=(points, 10)) * 0.3
        spec = NetworkSpec((x.shape[1], 32, 32, 10), "leaky_relu")
        cases[f"WO2, MLP {x.shape[1]}-32-32-10, {points} {task} points, {steps} steps"] = (
            lambda d, s=spec, x=x, t=target: (
                fit_least_squares(s, x, t, settings, 1, device=d).values
            )
        )
    cnn = ConvNetSpec((1, 28, 28), 10)
    cnn_settings = OracleSettings(steps=steps // 5, lr=0.005, batch_size=128)
    cases[f"WO2, LeNet, 400 mnist-5k points, {cnn_settings.steps} steps"] = (
        lambda d, x=x, t=target: fit_least_squares(cnn, x, t, cnn_settings, 1, device=d).values
    )
    box = load_task("lipschitz").x_train[:300].astype(np.float32)
    values = rng.normal(size=(300, 1)) * 0.3
    points = rng.uniform(box.min(0), box.max(0), size=(256, box.shape[1]))
    jacobian = rng.normal(size=(256, 1, box.shape[1])) * 0.3
    lip_spec = NetworkSpec((box.shape[1], 32, 32, 1), "leaky_relu")
    cases[f"WO-lip (FFGB.L), MLP {box.shape[1]}-32-32-1, 300 lipschitz points, {steps} steps"] = (
        lambda d: fit_sobolev(lip_spec, box, values, points, jacobian, settings, 1, d).values
    )
    cube = rng.uniform(size=(500, 60)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 500)]
    net_spec = NetworkSpec((60, 50, 50, 10), "relu")

    def fsr(device: torch.device) -> np.ndarray:
        torch.manual_seed(0)
        model = build(net_spec).to(device)
        torch.manual_seed(1)
        neighbour = build(net_spec).to(device).eval()
        anchors = [Anchor(0.5, lambda z: neighbour(z), replayable=True)] * 3
        xt, yt = torch.as_tensor(cube, device=device), torch.as_tensor(labels, device=device)
        g = torch.Generator().manual_seed(2)
        fsr_train(model, xt, yt, anchors, steps // 5, 0.05, 200, 1000, 1e-3, g)
        with torch.no_grad():
            return model(torch.as_tensor(cube[:50], device=device)).cpu().numpy()

    cases[f"FSR, MLP 60-50-50-10, 3 anchors, {steps // 5} steps"] = fsr
    return cases


def oracle_table(modes: list[str], repeats: int, quick: bool) -> tuple[str, list[dict]]:
    rows, records = [], []
    for name, fit in _oracle_cases(quick).items():
        seconds, values = {}, {}
        for mode in modes:
            _mode_env(mode)
            times = []
            try:
                for _ in range(repeats):
                    began = time.perf_counter()
                    values[mode] = fit(torch.device(_device(mode)))
                    if _device(mode) != CPU:
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - began)
            except Exception as error:  # one failed mode is a finding of its row
                print(f"  {name}: {mode} failed: {error!r}", flush=True)
                values.pop(mode, None)
            seconds[mode] = min(times) if len(times) == repeats else float("nan")
        both = GRAPHS in values and EAGER in values
        gap = float(np.abs(values[GRAPHS] - values[EAGER]).max()) if both else None
        records.append(
            {"oracle": name, "seconds": _finite(seconds), "graphs_vs_eager_max_abs": gap}
        )
        rows.append(
            [name]
            + [f"{seconds[m]:.3f}" for m in modes]
            + [f"{seconds[CPU] / seconds[m]:.2f}x" for m in modes if m != CPU and CPU in modes]
            + ([f"{gap:.1e}" if gap is not None else "-"] if GRAPHS in modes else [])
        )
    headers = ["oracle fit"] + [f"{m} s" for m in modes]
    headers += [f"{m} speed-up" for m in modes if m != CPU and CPU in modes]
    headers += ["max abs(graphs - eager)"] if GRAPHS in modes else []
    return md_table(headers, rows), records


# -- whole rounds ------------------------------------------------------------------------------
def _round_seconds(rows: list[dict]) -> float:
    times = [r["wall_time_s"] for r in rows]
    durations = [b - a for a, b in zip(times, times[1:])]
    tail = durations[1:] or durations
    return statistics.median(tail)


def _loss(rows: list[dict]) -> float | None:
    last = rows[-1]
    for key in ("test_loss", "local_loss", "train_loss"):
        if isinstance(last.get(key), int | float):
            return float(last[key])
    return None


def run_workload(overrides: dict[str, Any], rounds: int, mode: str, out: Path) -> list[dict]:
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, counting, run_config, server_context

    _mode_env(mode)
    device = _device(mode)
    config = run_config(
        **{
            "output-dir": str(out),
            "run-name": "run",
            "num-server-rounds": rounds,
            "central-device": device,
            **counting(overrides),
        }
    )
    grid = LocalGrid(
        client_app, config, NODES, [{"device": device}] * NODES, False, _together(mode)
    )
    server_main(grid, server_context(config))
    return json.loads((out / "run" / "metrics.json").read_text())["rounds"]


def round_table(
    modes: list[str], quick: bool, only: str, rounds: int = 0
) -> tuple[str, list[dict]]:
    rows, records = [], []
    for name, overrides, gpu_rounds, cpu_rounds in WORKLOADS:
        if only and not any(part.strip().lower() in name.lower() for part in only.split("|")):
            continue
        overrides = {**overrides, **(QUICK if quick else {})}
        seconds, losses = {}, {}
        for mode in modes:
            count = 2 if quick else rounds or (cpu_rounds if _device(mode) == CPU else gpu_rounds)
            try:
                with tempfile.TemporaryDirectory() as out:
                    run = run_workload(overrides, count, mode, Path(out))
            except Exception as error:  # one failed mode is a finding of its row
                seconds[mode], losses[mode] = float("nan"), None
                print(f"  {name:<58} {mode:<12} failed: {error!r}", flush=True)
                continue
            seconds[mode], losses[mode] = _round_seconds(run), _loss(run)
            print(f"  {name:<58} {mode:<12} {seconds[mode]:7.2f} s/round", flush=True)
        records.append(
            {
                "workload": name,
                "overrides": overrides,
                "s_per_round": _finite(seconds),
                "final_loss": losses,
            }
        )
        rows.append(
            [name]
            + [f"{seconds[m]:.2f}" for m in modes]
            + [f"{seconds[CPU] / seconds[m]:.2f}x" for m in modes if m != CPU and CPU in modes]
            + [" / ".join("-" if losses[m] is None else f"{losses[m]:.4g}" for m in modes)]
        )
    headers = ["workload (10 nodes)"] + [f"{m} s/round" for m in modes]
    headers += [f"{m} speed-up" for m in modes if m != CPU and CPU in modes]
    headers += ["final loss (" + " / ".join(modes) + ")"]
    return md_table(headers, rows), records


def main() -> None:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--devices", choices=("all", "cpu"), default="all")
    cli.add_argument("--repeats", type=int, default=3)
    cli.add_argument(
        "--only",
        default="",
        help="workloads whose name contains one of these ('|'-separated: names hold commas)",
    )
    cli.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of {', '.join(MODES)} (speed-ups need {CPU})",
    )
    cli.add_argument("--skip-oracles", action="store_true")
    cli.add_argument(
        "--rounds", type=int, default=0, help="rounds of every workload (0: the table's)"
    )
    cli.add_argument("--out", default="", help="report path (default results/devices.md)")
    args = cli.parse_args()
    modes = [CPU] if args.devices == "cpu" else [m.strip() for m in args.modes.split(",")]
    if not set(modes) <= set(MODES):
        cli.error(f"--modes: expected some of {', '.join(MODES)}")
    if any(_device(m) != CPU for m in modes) and not torch.cuda.is_available():
        cli.error("torch sees no CUDA device: use --devices cpu (or --modes cpu)")
    logging.disable(logging.WARNING)
    start = time.perf_counter()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    parts = [f"GPU: {gpu}; torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}.", ""]
    record: dict[str, Any] = {"gpu": gpu, "torch": torch.__version__}
    if not args.skip_oracles:
        one_fit = [m for m in modes if not m.endswith(TOGETHER)]  # a fit alone: no lockstep
        table, record["oracles"] = oracle_table(
            one_fit, 1 if args.quick else args.repeats, args.quick
        )
        parts += ["## One oracle fit (best of repeats)", "", table, ""]
        print(table, flush=True)
    table, record["rounds"] = round_table(modes, args.quick, args.only, args.rounds)
    parts += ["## Seconds per round, in-process engine, 10 nodes", "", table]
    print(table, flush=True)
    out = Path(args.out) if args.out else results_dir(args.quick) / "devices.md"
    write_report(out, "CPU and GPU, every family", time.perf_counter() - start, "\n".join(parts))
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
