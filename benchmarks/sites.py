"""Every family on the two real tables with natural sites, against each site alone and all
sites pooled (issue 22 items 5 and 6).

Tables (``tasks.sites``): ``penguins`` (classification, label ``species``, categorical ``sex``;
sites Biscoe, Dream, Torgersen) and ``cars`` (regression, label ``Miles_per_Gallon``; sites
Europe, Japan, USA). For each seed, each site's file is split once, seeded, 75/25 into
``train/<pid>.csv`` and ``test/<pid>.csv``; ``test/all.csv`` is the union of the test files (the
federation's test set) and ``train/all.csv`` the union of the training files. Every method is
scored on these same rows:

- **federated** (3 nodes, ``task='site'``, ``dataset-path='<seed>/train/{partition-id}.csv'``,
  node config ``dataset-test-path='<seed>/test/<pid>.csv'``, ``server-test-path=
  '<seed>/test/all.csv'``): *all* = the server's central evaluation on ``test/all.csv`` (final
  round's ``test_accuracy`` or ``test_mse``); *own shares* = the federated evaluation's
  ``site<pid>_test_*`` (each site's test share scored by the model the site ends with: the
  global model, or the site's own model for FedFun, which has no global model and so no *all*).
- **alone** (each site, one node on ``train/<pid>.csv``, test file ``test/<pid>.csv``): *own* =
  its federated evaluation; *all* = the server's central evaluation of the site's model on
  ``test/all.csv``. The schema is agreed from the site's own file, so a penguin site knows only
  its own species (Torgersen: Adelie only) and the server refuses a test file with another
  label. For classification the server therefore scores the rows of ``test/all.csv`` whose
  label and categories the site knows (``test/known-<pid>.csv``), and the other rows count as
  wrong (the model cannot output a class it has never seen): accuracy on all = accuracy on the
  known rows x known rows / all rows. Cars has no label set, so the server scores all of
  ``test/all.csv``.
- **pooled** (one node on ``train/all.csv``, test file ``test/all.csv``): *all* = its federated
  evaluation; *own share* of site p = the server's central evaluation on ``test/<pid>.csv``, one
  run per site (the same seed and training data give the same model: the script checks that
  the three runs' ``train_loss`` rows are identical).

Regression losses are in units of the label's variance under each run's schema (standardised
by the federated, site or pooled mean and std); the script converts every MSE back to
(miles per gallon)^2 with the schema's std from ``config.json`` and reports RMSE in mpg.

    python -m benchmarks.sites                   # results/sites.json and .md; 3 seeds, 20 rounds
    python -m benchmarks.sites --tables penguins --seeds 0 --rounds 5 --out /tmp/s.json

Runs one after another in this process (the real ServerApp and ClientApp on
``testing.inprocess_grid.LocalGrid``), so it uses one core.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, machine_info, write_report

ROOT = Path(__file__).resolve().parents[1]
TEST_SHARE = 0.25
COMMON = {"task": "site", "tensorboard": False}

POOLED_MAX_BYTES = 2**30  # the pooled node's dataset-max-bytes (tasks.site_files: 256 MiB)


@dataclass(frozen=True)
class Family:
    """A method: its run config, the tables it runs on, and (optionally) fewer rounds."""

    name: str
    overrides: dict[str, Any]
    tables: tuple[str, ...] = ("penguins", "cars")
    per_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_rounds: int = 0  # 0: the benchmark's --rounds
    note: str = ""


# Regression on the standardised cars label (defaults diverge there; seed 0, 20 rounds):
# FFGB's default eta0 = 10 (the authors' MNIST value, for cross-entropy) overshoots the square
# loss (test MSE 48.8 label variances at round 20; FFGB.C 6.0), so FFGB and FFGB.C take
# eta0 = 1 on cars; FFGB.C also needs a gradient bound for regression (G = 3 standardised
# units; 3 and 5 give the same rows on seed 0, where the clip does not bind). FedAvg's and
# FedProx's default learning rate 0.3 blows the
# MLP up (MSE 3.6e4 variances), so they take 0.01 on cars. FFGB.L with the paper's upper
# Lipschitz extension and L from the data diverges (test MSE 43.6 -> 69.6 variances over 10
# rounds; 5.3 -> 7.3 over 5 with ffgb.lipschitz=1), so it runs with the midpoint extension.
# The same settings for every seed.
FAMILIES = (
    # trees at the defaults (Newton leaves, constant 0.3) on every table, cars included
    Family("ffgb-trees", {"algorithm": "ffgb", "ffgb.learner": "tree"}),
    Family(
        "ffgb-mlp",
        {"algorithm": "ffgb"},
        per_table={"cars": {"ffgb.eta0": 1.0}},
        max_rounds=10,
        note="MLP learners (500 Adam steps each): 10 rounds",
    ),
    Family(
        "ffgb-c-trees",
        {"algorithm": "ffgb-c", "ffgb.learner": "tree"},
        per_table={"cars": {"ffgb.eta0": 1.0, "ffgb.grad-bound": 3.0}},
    ),
    Family(
        "ffgb-l",
        {"algorithm": "ffgb-l", "ffgb.extension": "midpoint"},
        tables=("cars",),
        max_rounds=5,
        note="MLP learners with the Sobolev oracle (8 s a round): 5 rounds",
    ),
    Family("fedfw", {"algorithm": "fedfw"}),
    Family("fedavg", {"algorithm": "fedavg"}, per_table={"cars": {"learning-rate": 0.01}}),
    Family("fedprox", {"algorithm": "fedprox"}, per_table={"cars": {"learning-rate": 0.01}}),
    Family(
        "fedfun",
        {"algorithm": "fedfun"},
        tables=("penguins",),
        max_rounds=5,
        note="2,000 initial and 200 local steps per round, 5 rounds",
    ),
)
REFERENCES = ("ffgb-trees", "fedavg")  # run alone at each site and pooled


# -- data -----------------------------------------------------------------------------------
@dataclass
class Split:
    """One seed's files for one table."""

    folder: Path
    sites: list[str]  # site names, in partition order
    label: str
    kind: str
    categorical: list[str]
    test_rows: dict[str, int]  # "all" and each pid
    known_rows: dict[int, int] = field(default_factory=dict)  # pid -> rows of known-<pid>.csv


def make_split(table: str, raw: Path, folder: Path, seed: int) -> Split:
    """Split each site's file 75/25 (seeded by seed and partition id) into train/ and test/."""
    manifest = json.loads((raw / "sites.json").read_text())
    sites = sorted(manifest["sites"], key=lambda s: manifest["sites"][s]["partition-id"])
    (folder / "train").mkdir(parents=True, exist_ok=True)
    (folder / "test").mkdir(parents=True, exist_ok=True)
    trains, tests = [], []
    split = Split(folder, sites, manifest["label"], manifest["kind"], manifest["categorical"], {})
    for pid in range(len(sites)):
        frame = pd.read_csv(raw / f"{pid}.csv")
        order = np.random.default_rng([seed, pid]).permutation(len(frame))
        n_test = round(TEST_SHARE * len(frame))
        test, train = frame.iloc[np.sort(order[:n_test])], frame.iloc[np.sort(order[n_test:])]
        train.to_csv(folder / "train" / f"{pid}.csv", index=False)
        test.to_csv(folder / "test" / f"{pid}.csv", index=False)
        trains.append(train)
        tests.append(test)
        split.test_rows[str(pid)] = len(test)
    every = pd.concat(tests, ignore_index=True)
    every.to_csv(folder / "test" / "all.csv", index=False)
    pd.concat(trains, ignore_index=True).to_csv(folder / "train" / "all.csv", index=False)
    split.test_rows["all"] = len(every)
    if split.kind == "classification":
        for pid, train in enumerate(trains):  # the rows of test/all.csv this site can score
            keep = every[split.label].isin(set(train[split.label]))
            for column in split.categorical:
                keep &= every[column].isna() | every[column].isin(set(train[column].dropna()))
            every[keep].to_csv(folder / "test" / f"known-{pid}.csv", index=False)
            split.known_rows[pid] = int(keep.sum())
    return split


# -- running ----------------------------------------------------------------------------------
def run_one(
    out_dir: Path, name: str, config: dict[str, Any], node_configs: list[dict[str, Any]]
) -> dict[str, Any]:
    """One run of the real ServerApp on LocalGrid: its rows, target std, wall time, or the
    error that stopped it."""
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    full = run_config(**{"output-dir": str(out_dir), "run-name": name, **COMMON, **config})
    start = time.perf_counter()
    try:
        grid = LocalGrid(
            client_app, full, len(node_configs), node_configs=node_configs, keep_messages=False
        )
        server_main(grid, server_context(full))
    except Exception as err:  # reported in the table, the benchmark goes on
        return {"error": f"{type(err).__name__}: {err}", "wall_s": time.perf_counter() - start}
    wall = time.perf_counter() - start
    run_dir = out_dir / name
    rows = json.loads((run_dir / "metrics.json").read_text())["rounds"]
    sites = json.loads((run_dir / "config.json").read_text()).get("sites", {})
    target_std = float(sites.get("schema", {}).get("target", [0.0, 1.0])[1])
    return {
        "rows": rows,
        "last": rows[-1],
        "rounds": rows[-1].get("round", 0),
        "target_std": target_std,
        "train_losses": [r.get("train_loss") for r in rows],
        "wall_s": wall,
        "left_out": sites.get("left-out", {}),
    }


def score(row: dict[str, Any], prefix: str, kind: str, target_std: float) -> float:
    """Accuracy, or RMSE in the label's units, of ``<prefix>test_*`` in a metrics row."""
    if kind == "classification":
        return float(row.get(f"{prefix}test_accuracy", math.nan))
    mse = float(row.get(f"{prefix}test_mse", math.nan))
    return math.sqrt(mse) * target_std if math.isfinite(mse) else math.nan


def federated(
    split: Split,
    family: Family,
    table: str,
    seed: int,
    rounds: int,
    out_dir: Path,
    keep_rows: bool = False,
) -> dict[str, Any]:
    """All sites federated: test/all.csv (central) and each site's share; ``keep_rows`` also
    keeps every round's row and the label's std (``rows``, ``target_std``)."""
    folder = split.folder
    config = {
        **family.overrides,
        **family.per_table.get(table, {}),
        "seed": seed,
        "num-server-rounds": min(rounds, family.max_rounds or rounds),
        "data.label": split.label,
        "data.kind": split.kind,
        "data.categorical": ",".join(split.categorical),
        "dataset-path": str(folder / "train" / "{partition-id}.csv"),
        "server-test-path": str(folder / "test" / "all.csv"),
    }
    nodes = [
        {"dataset-test-path": str(folder / "test" / f"{pid}.csv")}
        for pid in range(len(split.sites))
    ]
    result = run_one(out_dir, f"{table}-s{seed}-{family.name}", config, nodes)
    record = {
        "table": table,
        "seed": seed,
        "method": family.name,
        "kind": "federated",
        "config": config,
        "wall_s": result["wall_s"],
    }
    if "error" in result:
        return {**record, "error": result["error"]}
    last, std = result["last"], result["target_std"]
    if keep_rows:
        record.update(rows=result["rows"], target_std=std)
    record.update(
        rounds=result["rounds"],
        left_out=result["left_out"],
        all=score(last, "", split.kind, std),
        own={str(p): score(last, f"site{p}_", split.kind, std) for p in range(len(split.sites))},
    )
    return record


def site_config(
    split: Split, family: Family, table: str, seed: int, rounds: int, train: str, server_test: str
) -> dict[str, Any]:
    folder = split.folder
    return {
        **family.overrides,
        **family.per_table.get(table, {}),
        "seed": seed,
        "num-server-rounds": min(rounds, family.max_rounds or rounds),
        "min-nodes": 1,
        "data.label": split.label,
        "data.kind": split.kind,
        "data.categorical": ",".join(split.categorical),
        "dataset-path": str(folder / "train" / train),
        "server-test-path": str(folder / "test" / server_test),
    }


def alone(
    split: Split, family: Family, table: str, seed: int, rounds: int, out_dir: Path
) -> list[dict[str, Any]]:
    """Each site on its own: own test share (federated evaluation) and test/all.csv (central,
    on the rows it can score for classification, the others counted wrong)."""
    records = []
    for pid in range(len(split.sites)):
        classification = split.kind == "classification"
        server_test = f"known-{pid}.csv" if classification else "all.csv"
        config = site_config(split, family, table, seed, rounds, f"{pid}.csv", server_test)
        node = [{"dataset-test-path": str(split.folder / "test" / f"{pid}.csv")}]
        result = run_one(out_dir, f"{table}-s{seed}-{family.name}-alone{pid}", config, node)
        record = {
            "table": table,
            "seed": seed,
            "method": family.name,
            "kind": "alone",
            "site": pid,
            "config": config,
            "wall_s": result["wall_s"],
        }
        if "error" in result:
            records.append({**record, "error": result["error"]})
            continue
        last, std = result["last"], result["target_std"]
        on_all = score(last, "", split.kind, std)
        if classification:
            record["known_rows"] = split.known_rows[pid]
            record["all_known_only"] = on_all
            on_all *= split.known_rows[pid] / split.test_rows["all"]
        record.update(
            rounds=result["rounds"],
            all=on_all,
            own={str(pid): score(last, "site0_", split.kind, std)},
        )
        records.append(record)
    return records


def pooled(
    split: Split,
    family: Family,
    table: str,
    seed: int,
    rounds: int,
    out_dir: Path,
    own_shares: bool = True,
) -> dict[str, Any]:
    """One node on every site's training rows: all from its federated evaluation on
    test/all.csv, each site's share from the server's evaluation, one run per site
    (``own_shares=False``: one run, and no site's share)."""
    record = {
        "table": table,
        "seed": seed,
        "method": family.name,
        "kind": "pooled",
        "own": {},
        "wall_s": 0.0,
    }
    losses = []
    for pid in range(len(split.sites) if own_shares else 1):
        config = site_config(split, family, table, seed, rounds, "all.csv", f"{pid}.csv")
        # the one node holds every site's file: its limit is the union's (synth1m: 295 MB)
        node = [
            {
                "dataset-test-path": str(split.folder / "test" / "all.csv"),
                "dataset-max-bytes": POOLED_MAX_BYTES,
            }
        ]
        result = run_one(out_dir, f"{table}-s{seed}-{family.name}-pooled-on{pid}", config, node)
        record["wall_s"] += result["wall_s"]
        record["config"] = {**config, "server-test-path": "test/<pid>.csv"}
        if "error" in result:
            return {**record, "error": result["error"]}
        last, std = result["last"], result["target_std"]
        if own_shares:
            record["own"][str(pid)] = score(last, "", split.kind, std)
        record["all"] = score(last, "site0_", split.kind, std)
        record["rounds"] = result["rounds"]
        losses.append(result["train_losses"])
    record["same_model_in_every_run"] = all(loss == losses[0] for loss in losses)
    return record


# -- summary ----------------------------------------------------------------------------------
def mean_std(values: list[float]) -> tuple[float, float, int]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan, 0
    return (
        statistics.fmean(finite),
        statistics.stdev(finite) if len(finite) > 1 else 0.0,
        len(finite),
    )


def cell(values: list[float], kind: str, expected: int) -> str:
    mean, std, n = mean_std(values)
    if n == 0:
        return "n/a"
    scale, digits = (100.0, 1) if kind == "classification" else (1.0, 2)
    text = f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"
    return text if n == expected else f"{text} ({n} of {expected} seeds)"


def summarise(
    records: list[dict[str, Any]],
    tables: list[str],
    seeds: list[int],
    sites: dict[str, list[str]],
    kinds: dict[str, str],
) -> tuple[dict, str]:
    """{table: {row: {column: [mean, std, seeds]}}} and the markdown tables. A cell whose
    every run stopped with an error reads ``error (n)``, n numbering the errors under the
    tables."""
    summary: dict[str, Any] = {}
    parts = []
    for table in tables:
        summary[table], part = summarise_table(
            table, [r for r in records if r["table"] == table], kinds[table], sites[table], seeds
        )
        parts.append(part)
    return summary, "\n".join(parts)


def summarise_table(
    table: str, mine: list[dict[str, Any]], kind: str, names: list[str], seeds: list[int]
) -> tuple[dict[str, Any], str]:
    """One table's summary and markdown (see ``summarise``)."""
    expected = len(seeds)
    unit = "accuracy %" if kind == "classification" else "RMSE in mpg, lower is better"
    errors: list[str] = []

    def note(chosen: list[dict[str, Any]]) -> str:
        found = sorted({r["error"] for r in chosen if "error" in r})
        for error in found:
            if error not in errors:
                errors.append(error)
        return "error (" + ", ".join(str(errors.index(e) + 1) for e in found) + ")"

    def show(values: list[float], failed: list[dict[str, Any]]) -> str:
        if not values and failed:
            return note(failed)
        return cell(values, kind, expected)

    def add(label: str, chosen: list[dict[str, Any]], with_all: bool) -> list[Any]:
        ok = [r for r in chosen if "error" not in r]
        failed = [r for r in chosen if "error" in r]
        by_seed: dict[int, dict[str, float]] = {}
        for r in ok:
            by_seed.setdefault(r["seed"], {}).update(r.get("own", {}))
        columns = {
            "all": [r.get("all", math.nan) for r in ok] if with_all else [],
            "own mean": [
                statistics.fmean(v.values()) for v in by_seed.values() if len(v) == len(names)
            ],
        }
        for pid, name in enumerate(names):
            columns[name] = [v[str(pid)] for v in by_seed.values() if str(pid) in v]
        table_summary[label] = {k: list(mean_std(v)) for k, v in columns.items()}
        if failed:
            table_summary[label]["errors"] = sorted({r["error"] for r in failed})
        site_failed = {
            pid: [r for r in failed if r.get("site", pid) == pid] for pid in range(len(names))
        }
        return [
            label,
            "/".join(str(x) for x in sorted({r.get("rounds") for r in ok})) or "-",
            show(columns["all"], failed) if with_all else "n/a",
            show(columns["own mean"], failed),
            *[show(columns[n], site_failed[pid]) for pid, n in enumerate(names)],
        ]

    table_summary: dict[str, Any] = {}
    rows = []
    for family in FAMILIES:
        chosen = [r for r in mine if r["method"] == family.name and r["kind"] == "federated"]
        if chosen:
            has_all = any(math.isfinite(r.get("all", math.nan)) for r in chosen)
            rows.append(add(family.name, chosen, has_all or all("error" in r for r in chosen)))
    for method in REFERENCES:
        rows.append(
            add(
                f"pooled ({method})",
                [r for r in mine if r["method"] == method and r["kind"] == "pooled"],
                True,
            )
        )
        rows.append(
            add(
                f"alone ({method})",
                [r for r in mine if r["method"] == method and r["kind"] == "alone"],
                False,
            )
        )
    alone_rows = []
    for method in REFERENCES:
        line = [f"alone ({method})"]
        for pid, name in enumerate(names):
            runs = [
                r
                for r in mine
                if r["method"] == method and r["kind"] == "alone" and r["site"] == pid
            ]
            values = [r["all"] for r in runs if "error" not in r]
            table_summary.setdefault(f"alone ({method}) on test/all.csv", {})[name] = list(
                mean_std(values)
            )
            line.append(show(values, [r for r in runs if "error" in r]))
        alone_rows.append(line)
    headers = [
        "method",
        "rounds",
        "test/all.csv",
        "own shares, mean of sites",
        *[f"{name} own" for name in names],
    ]
    title = f"### {table} ({unit}; final round, mean ± std over seeds {', '.join(map(str, seeds))})"
    parts = [
        title,
        "",
        md_table(headers, rows),
        "",
        md_table(["each site alone, scored on test/all.csv", *names], alone_rows),
        "",
    ]
    parts += [f"({i}) {error}" for i, error in enumerate(errors, start=1)]
    if errors:
        parts.append("")
    return table_summary, "\n".join(parts)


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join([":--"] + ["--:"] * (len(headers) - 1)) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def plain(value: Any) -> Any:
    """``value`` with every NaN or infinity as None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def unplain(value: Any) -> Any:
    """The inverse of ``plain`` for a report read back: every None a NaN."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: unplain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unplain(v) for v in value]
    return value


# -- main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tables", nargs="+", default=["penguins", "cars"], choices=["penguins", "cars"]
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--rounds",
        type=int,
        default=20,
        help="rounds of every run (fewer for the slow families, see FAMILIES)",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        default=[f.name for f in FAMILIES],
        choices=[f.name for f in FAMILIES],
    )
    parser.add_argument(
        "--no-references", action="store_true", help="skip the alone and pooled runs"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the split files and run folders here (default: a temporary folder, removed)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "sites.json",
        help="results JSON; its report goes beside it as .md (default: results/sites.json)",
    )
    args = parser.parse_args(argv)

    logging.disable(logging.WARNING)  # Flower logs every round at INFO
    from tasks.sites import write_sites

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sites-bench-") as tmp:
        work = args.work or Path(tmp)
        records: list[dict[str, Any]] = []
        sites, kinds, walls = {}, {}, {}
        chosen = [f for f in FAMILIES if f.name in args.families]
        for table in args.tables:
            raw = work / table / "raw"
            write_sites(table, raw)
            for seed in args.seeds:
                split = make_split(table, raw, work / table / f"seed{seed}", seed)
                sites[table], kinds[table] = split.sites, split.kind
                out_dir = work / table / f"seed{seed}" / "runs"
                todo = [("federated", f) for f in chosen if table in f.tables]
                if not args.no_references:
                    todo += [
                        (kind, f)
                        for f in FAMILIES
                        if f.name in REFERENCES
                        for kind in ("alone", "pooled")
                    ]
                for kind, family in todo:
                    if kind == "federated":
                        new = [federated(split, family, table, seed, args.rounds, out_dir)]
                    elif kind == "alone":
                        new = alone(split, family, table, seed, args.rounds, out_dir)
                    else:
                        new = [pooled(split, family, table, seed, args.rounds, out_dir)]
                    records += new
                    wall = sum(r["wall_s"] for r in new)
                    key = f"{table} {kind} {family.name}"
                    walls[key] = walls.get(key, 0.0) + wall
                    errors = [r["error"] for r in new if "error" in r]
                    print(
                        f"  {table} seed {seed} {kind:<9} {family.name:<13} {wall:6.1f} s"
                        + (f"  ERROR {errors[0]}" if errors else ""),
                        flush=True,
                    )
    summary, markdown = summarise(records, args.tables, args.seeds, sites, kinds)
    wall = time.perf_counter() - started
    report = {
        "command": " ".join(
            ["python -m benchmarks.sites", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": machine_info(),
        "wall_s": wall,
        "cpu_threads": os.cpu_count(),
        "tables": args.tables,
        "seeds": args.seeds,
        "rounds": args.rounds,
        "test_share": TEST_SHARE,
        "families": [
            {
                "name": f.name,
                "overrides": f.overrides,
                "per_table": f.per_table,
                "tables": list(f.tables),
                "max_rounds": f.max_rounds,
                "note": f.note,
            }
            for f in chosen
        ],
        "references": list(REFERENCES),
        "wall_s_by_method": walls,
        "summary": summary,
        "markdown": markdown,
        "runs": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(plain(report), indent=1, default=str) + "\n")
    write_report(
        args.out.with_suffix(".md"),
        "Sites' own data: every family against each site alone and all sites pooled",
        wall,
        markdown,
        command=report["command"],
        info=report["machine"],
    )
    print(markdown)
    print(f"wall time {wall:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
