"""Every family with its default keys learns something (issue 35 item 5): each on every bundled
offline task and on the penguins and cars sites, 20 rounds, against the trivial predictor (the
training set's majority class, or its mean) and FedAvg with its defaults.

A cell meets the target when its final score is at least halfway from the trivial predictor's
to FedAvg's: accuracy >= (trivial + FedAvg) / 2; for regression, RMSE in the label's own units
(``test_rmse_label``, or the root of ``test_mse`` when the label is not standardised) <=
(trivial + FedAvg) / 2. A family that cannot run a task by design says why in its cell.

- bundled tasks: 10 nodes, the task's defaults (iid partitions, seed 0), central evaluation on
  the task's test split (FedFun and its baselines, which keep no global model: the mean over the
  nodes' own models, ``test_accuracy_mean``, each on its own test shard);
- sites (``tasks.sites``): 3 nodes, one per site, on each site's training file of
  ``benchmarks.sites.make_split`` (seed 0, 75/25), scored by the server on the union of the
  sites' test files (``server-test-path``); the trivial predictor is the pooled training rows'.

    python -m benchmarks.defaults                         # everything: about 3 h on 2 cores
    python -m benchmarks.defaults --families fedfw fedfw-plus --reuse   # re-run some, keep the rest
    python -m benchmarks.defaults --render                # rewrite the report from its JSON

Writes benchmarks/results/defaults.json (every run's final rows, wall time or failure) and
benchmarks/results/defaults.md (the table, with command, machine and commit).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, command_line, machine_info, md_table, write_report
from tasks.datasets import ONLINE_TASKS, REGRESSION_TASKS, TASK_NAMES

ROUNDS = 20
NODES = 10
TASKS = tuple(t for t in TASK_NAMES if t not in ONLINE_TASKS)  # every bundled task
SITES = {
    "penguins": {"data.label": "species", "data.categorical": "sex"},
    "cars": {"data.label": "Miles_per_Gallon", "data.kind": "regression"},
}
REGRESSION = (*REGRESSION_TASKS, "cars")
FAMILIES: dict[str, dict[str, Any]] = {
    "fedavg": {"algorithm": "fedavg"},
    "ffgb (MLP)": {"algorithm": "ffgb"},
    "ffgb (trees)": {"algorithm": "ffgb", "ffgb.learner": "tree"},
    "ffgb-c": {"algorithm": "ffgb-c"},
    "ffgb-l": {"algorithm": "ffgb-l"},
    "fedfw": {"algorithm": "fedfw"},
    "fedfw-plus": {"algorithm": "fedfw-plus"},
    "fedfw-sto": {"algorithm": "fedfw-sto"},
    "fedfun": {"algorithm": "fedfun"},
    "fedprox": {"algorithm": "fedprox"},
    "feddr": {"algorithm": "feddr"},
    "fedavg-proj": {"algorithm": "fedavg-proj"},
    "psr": {"algorithm": "psr"},
    "dfedavgm": {"algorithm": "dfedavgm"},
    "dfedfish": {"algorithm": "dfedfish"},
    "dfeddf": {"algorithm": "dfeddf"},
    "fedxgb-bagging": {"algorithm": "fedxgb-bagging"},
    "fedxgb-cyclic": {"algorithm": "fedxgb-cyclic"},
    "fedxgb-hist": {"algorithm": "fedxgb-hist"},
}
FEDFUN_FAMILY = ("fedfun", "psr", "dfedavgm", "dfedfish", "dfeddf")
# (family, kind) a family does not run with its defaults by design, and why
BY_DESIGN = {
    ("ffgb-l", "classification"): "FFGB.L is the paper's square-loss variant "
    "(regression; Section 3.3)",
    ("ffgb-c", "regression"): "needs ffgb.grad-bound: the square loss has no a-priori gradient "
    "bound G (FFGB.C's clip, Theorem 3.2)",
    **{
        (name, "regression"): "implemented for classification, as the FedFun paper's experiments"
        for name in FEDFUN_FAMILY
    },
}
# the keys that make a by-design cell run, measured beside it
DOCUMENTED = {("ffgb-c", "regression"): {"ffgb.grad-bound": 3.0}}
# cells whose defaults miss the target: why, and the keys that reach it, measured beside them
MISSES: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("ffgb (MLP)", "penguins"): (
        "with the authors' η0 = 10 (MNIST) the global function never learns Gentoo, which only "
        "Biscoe holds: each site's learners enter the average with weight 1/3 and the steps "
        "η0/(3t+k+1) shrink first (Biscoe's own training loss stays 0.83)",
        {"ffgb.eta0": 20.0},
    ),
    ("ffgb-l", "cars"): (
        "the Sobolev oracle's input-gradient term (eq. 25, weight 1) fits the extension's slopes, "
        "which with L from the data are steep, instead of its values: the training loss stays "
        "at half the label's variance",
        {"ffgb.sobolev-weight": 0.0},
    ),
    ("fedfw-sto", "lipschitz"): (
        "the box's constant step η = T^(-2/3) jitters after the best round (rounds 11-13), and "
        "FedFW-sto takes the sign of a 64-row minibatch gradient",
        {"fedfw.batch-size": 128},
    ),
    ("dfeddf", "penguins"): (
        "distilling the neighbours' ensemble erases the label only one site holds (Gentoo on "
        "Biscoe, whose own model scores 0.24 on its test rows): DFedDF's design, which the "
        "FedFun paper's FSR avoids",
        {},
    ),
    ("fedxgb-cyclic", "diabetes"): (
        "each round one node's 35 rows grow a depth-6 tree at η = 0.3: the booster overfits each "
        "node in turn",
        {"fedxgb.eta": 0.1},
    ),
    ("fedxgb-hist", "mnist-5k"): (
        "refused at round 1 by design: 784 pixels of up to 256 bins each and 10 trees of 32 "
        "open leaves make a level's histogram of 762 MB (fedxgb-hist.max-histogram-bytes, "
        "256 MiB); histogram boosting is for tables",
        {"fedxgb-hist.max-depth": 3},
    ),
}
COMMON = {"num-server-rounds": ROUNDS, "seed": 0, "tensorboard": False}
OUT = RESULTS / "defaults.json"


def kind_of(task: str) -> str:
    return "regression" if task in REGRESSION else "classification"


# -- the data each task is scored on -----------------------------------------------------------
def site_split(table: str, work: Path) -> Path:
    """The seed-0 split of ``table``'s sites (benchmarks.sites): train/<pid>.csv, test/all.csv."""
    from benchmarks.sites import make_split
    from tasks.sites import write_sites

    raw = work / table / "raw"
    write_sites(table, raw)
    make_split(table, raw, work / table / "split", 0)
    return work / table / "split"


def trivial(task: str, split: Path | None) -> float:
    """The trivial predictor's score: the training set's majority class (accuracy) or mean
    (RMSE in the label's own units), on the test rows the runs are scored on."""
    if split is not None:
        label = SITES[task]["data.label"]
        train = pd.read_csv(split / "train" / "all.csv")[label]
        test = pd.read_csv(split / "test" / "all.csv")[label]
        y_train, y_test, scale = train.to_numpy(), test.to_numpy(), 1.0
    else:
        from tasks.datasets import load_task

        data = load_task(task, seed=0)
        y_train, y_test, scale = data.y_train, data.y_test, data.target_scale
    if kind_of(task) == "regression":
        y_train, y_test = np.asarray(y_train, float), np.asarray(y_test, float)
        return float(np.sqrt(np.mean((y_test - y_train.mean()) ** 2)) * scale)
    values, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(np.asarray(y_test) == values[np.argmax(counts)]))


def score(row: dict[str, Any], kind: str) -> float | None:
    """The final row's headline: accuracy, or RMSE in the label's own units (the nodes' mean
    for a family without a global model)."""
    if kind == "classification":
        for key in ("test_accuracy", "test_accuracy_mean"):
            if row.get(key) is not None:
                return row[key]
        return None
    for key, root in (
        ("test_rmse_label", False),
        ("test_rmse_label_mean", False),
        ("test_mse", True),
        ("test_mse_mean", True),
    ):
        if row.get(key) is not None:
            return math.sqrt(row[key]) if root else row[key]
    return None


# -- running -----------------------------------------------------------------------------------
def config_for(family: str, task: str, splits: dict[str, Path], out: Path) -> dict[str, Any]:
    """The run config of ``family`` on ``task``: its defaults (and, for a cell that needs a
    key by design, that key), the task, where to write."""
    config = {
        **FAMILIES[family],
        **DOCUMENTED.get((family, kind_of(task)), {}),
        **COMMON,
        "output-dir": str(out),
        "run-name": "run",
    }
    if task in SITES:
        return {
            **config,
            "task": "site",
            **SITES[task],
            "dataset-path": f"{splits[task]}/train/{{partition-id}}.csv",
            "server-test-path": f"{splits[task]}/test/all.csv",
        }
    return {**config, "task": task}


def run_one(
    family: str, task: str, config: dict[str, Any], nodes: int, alt: bool = False
) -> dict[str, Any]:
    """One run in this (worker) process: its last row and wall time, or why it failed
    (``alt``: a missed cell's run with the keys that reach the target)."""
    logging.disable(logging.WARNING)
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    start = time.perf_counter()
    result: dict[str, Any] = {"family": family, "task": task, "config": config, "alt": alt}
    try:
        full = run_config(**config)
        server_main(LocalGrid(client_app, full, nodes, keep_messages=False), server_context(full))
        result["error"] = None
    except Exception as err:  # the cell says why
        from functions.errors import one_sentence

        result["error"] = one_sentence(f"{type(err).__name__}: {err}")
    result["wall_s"] = time.perf_counter() - start
    metrics = Path(config["output-dir"]) / "run" / "metrics.json"
    rows = json.loads(metrics.read_text())["rounds"] if metrics.is_file() else []
    result["last"] = rows[-1] if rows else {}
    result["rounds"] = rows[-1]["round"] if rows else 0
    return result


def runnable(family: str, task: str) -> bool:
    """Whether the cell runs: with the defaults, or with the keys its design needs."""
    cell_kind = (family, kind_of(task))
    return cell_kind not in BY_DESIGN or cell_kind in DOCUMENTED


def run_all(
    families: list[str],
    tasks: list[str],
    work: Path,
    splits: dict[str, Path],
    workers: int,
    earlier: dict[tuple[str, str, bool], dict[str, Any]],
    save: Callable[[list[dict[str, Any]]], None],
    defaults: bool = True,
) -> list[dict[str, Any]]:
    """Every (family, task) run not in ``earlier`` (with ``defaults`` false: only the missed
    cells' runs with the keys that reach the target), ``workers`` at a time; ``save`` is given
    the results so far after each."""
    todo = [
        (f, t, False)
        for t in tasks
        for f in families
        if defaults and (f, t, False) not in earlier and runnable(f, t)
    ]
    todo += [
        (f, t, True)
        for (f, t), (_, keys) in MISSES.items()
        if keys and f in families and t in tasks and (f, t, True) not in earlier
    ]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(
                run_one,
                f,
                t,
                {
                    **config_for(f, t, splits, work / "runs" / f"{f}-{t}-{alt}"),
                    **(MISSES[(f, t)][1] if alt else {}),
                },
                3 if t in SITES else NODES,
                alt,
            )
            for f, t, alt in todo
        ]
        for future in as_completed(futures):
            result = future.result()
            alt = result["alt"]
            results.append(result)
            print(
                f"  {result['family'] + ' (alt)' * alt:<22} {result['task']:<14} "
                f"{result['wall_s']:7.1f} s  "
                f"{score(result['last'], kind_of(result['task']))}  "
                f"{result['error'] or ''}"[:200],
                flush=True,
            )
            save(results)
    return results


# -- the table ---------------------------------------------------------------------------------
def verdict(value: float | None, low: float, fedavg: float, kind: str) -> bool:
    """At least halfway from the trivial predictor's score to FedAvg's."""
    if value is None or not math.isfinite(value):
        return False
    target = (low + fedavg) / 2
    return value >= target if kind == "classification" else value <= target


def figure(
    result: dict[str, Any] | None, task: str, low: float, fedavg: float | None, mark: bool = True
) -> str:
    """A run's score with its verdict, or why it has none."""
    kind = kind_of(task)
    if result is None:
        return "not run"
    if result["error"]:
        return f"fails: {result['error']}"
    value = score(result["last"], kind)
    text = f"{value:.3f}" if value is not None else "no score"
    if mark and fedavg is not None:
        text += f" {'✓' if verdict(value, low, fedavg, kind) else '✗'}"
    return text


def keys_text(keys: dict[str, Any]) -> str:
    return " ".join(f"`{k}={v}`" for k, v in keys.items())


class Notes:
    """The table's footnotes: each distinct reason once, numbered as first met."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"


def cell(
    found: dict, family: str, task: str, low: float, fedavg: float | None, notes: Notes
) -> str:
    """One cell: the score with its verdict; n/a with a note; a miss with its note and the
    run with the keys that reach the target."""
    kind = kind_of(task)
    why = BY_DESIGN.get((family, kind), "")
    if why and (family, kind) not in DOCUMENTED:
        return f"n/a {notes.mark(why)}"
    text = figure(found.get((family, task, False)), task, low, fedavg, family != "fedavg")
    if why:  # ran with the keys its design needs
        keys = keys_text(DOCUMENTED[(family, kind)])
        return f"{text} {notes.mark(f'{why}; measured with {keys}')}"
    if (family, task) in MISSES and "✓" not in text:
        reason, keys = MISSES[(family, task)]
        if keys:
            alt = figure(found.get((family, task, True)), task, low, fedavg)
            reason += f"; with {keys_text(keys)}: {alt}"
        return f"{text} {notes.mark(reason)}"
    return text


def render(data: dict[str, Any]) -> str:
    """The markdown body: the table (families by tasks), its notes, then the cells that miss."""
    tasks, families = data["tasks"], data["families"]
    found = {(r["family"], r["task"], r.get("alt", False)): r for r in data["results"]}
    fedavg = {
        t: (
            score(found[("fedavg", t, False)]["last"], kind_of(t))
            if ("fedavg", t, False) in found and not found[("fedavg", t, False)]["error"]
            else None
        )
        for t in tasks
    }
    notes = Notes()
    head = ["family"] + [f"{t} ({'RMSE' if kind_of(t) == 'regression' else 'acc.'})" for t in tasks]
    rows = [
        ["trivial predictor"] + [f"{data['trivial'][t]:.3f}" for t in tasks],
        ["target (halfway to FedAvg)"]
        + [
            "n/a" if fedavg[t] is None else f"{(data['trivial'][t] + fedavg[t]) / 2:.3f}"
            for t in tasks
        ],
    ]
    rows += [
        [f] + [cell(found, f, t, data["trivial"][t], fedavg[t], notes) for t in tasks]
        for f in families
    ]
    misses = [
        f"- {f} on {t}: {figure(found.get((f, t, False)), t, data['trivial'][t], fedavg[t])}"
        for f in families
        for t in tasks
        if f != "fedavg"
        and runnable(f, t)
        and "✓" not in figure(found.get((f, t, False)), t, data["trivial"][t], fedavg[t])
    ]
    return "\n\n".join(
        [
            f"Final score after {ROUNDS} rounds with every key at its default (10 nodes on the "
            "bundled tasks, 3 sites); accuracy, or RMSE in the label's own units (lower is "
            "better). ✓: at least halfway from the trivial predictor to FedAvg; [n]: the notes "
            "below the table.",
            md_table(head, rows),
            "\n".join(f"{i}. {text}" for i, text in enumerate(notes.texts, 1)),
            "Cells whose defaults miss the target or fail:\n\n" + ("\n".join(misses) or "none"),
            provenance(data["results"]),
        ]
    )


def provenance(results: list[dict[str, Any]]) -> str:
    """Which commit the runs ran at, newest first as listed: ``--reuse`` keeps earlier runs."""
    families: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for run in results:
        commit = run.get("commit", "not recorded")
        families.setdefault(commit, set()).add(run["family"])
        counts[commit] = counts.get(commit, 0) + 1
    return "Runs by commit:\n\n" + "\n".join(
        f"- `{commit}`: {counts[commit]} run{'s' * (counts[commit] != 1)} "
        f"({', '.join(sorted(families[commit]))})"
        for commit in sorted(counts, key=lambda c: c == "not recorded")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--tasks", nargs="*", default=[*TASKS, *SITES])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the runs already in the JSON but those of the named families on the named tasks",
    )
    parser.add_argument(
        "--alternatives",
        action="store_true",
        help="with --reuse: run only the missed cells' runs with the keys "
        "that reach the target (MISSES)",
    )
    parser.add_argument("--render", action="store_true", help="rewrite the report from the JSON")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    old = json.loads(args.out.read_text()) if args.out.is_file() else None
    if args.render:
        write_report(
            args.out.with_suffix(".md"),
            "Every family with its defaults",
            old["wall_s"],
            render(old),
            command=old["command"],
            info=old["machine"],
        )
        return 0
    earlier = {}
    if args.reuse and old:
        earlier = {
            (r["family"], r["task"], r.get("alt", False)): r
            for r in old["results"]
            if r["family"] not in args.families
            or r["task"] not in args.tasks
            or (args.alternatives and not r.get("alt", False))
        }
    start = time.perf_counter()
    before = old["wall_s"] if args.reuse and old else 0.0
    data: dict[str, Any] = {
        "command": command_line(),
        "machine": machine_info(),
        "rounds": ROUNDS,
        "tasks": [*TASKS, *SITES],
        "families": list(FAMILIES),
    }

    def save(fresh: list[dict[str, Any]]) -> None:
        for run in fresh:  # the commit each run ran at: --reuse assembles runs of several
            run.setdefault("commit", data["machine"]["commit"])
        data.update(
            wall_s=time.perf_counter() - start + before, results=[*earlier.values(), *fresh]
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=1, default=str) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        splits = {t: site_split(t, Path(tmp)) for t in SITES}
        data["trivial"] = {t: trivial(t, splits.get(t)) for t in [*TASKS, *SITES]}
        save(
            run_all(
                args.families,
                args.tasks,
                Path(tmp),
                splits,
                args.workers,
                earlier,
                save,
                not args.alternatives,
            )
        )
    write_report(
        args.out.with_suffix(".md"),
        "Every family with its defaults",
        data["wall_s"],
        render(data),
        command=data["command"],
        info=data["machine"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
