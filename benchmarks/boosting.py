"""FFGB against Flower's federated XGBoost on tabular sites, in one harness (issue 24 item 3).

Every dataset is written as one CSV file per site and runs through ``task='site'`` exactly as
``benchmarks.sites`` runs the real tables: its 75/25 split of each site per seed, its runs on
the in-process engine and its scoring (its docstring says what *own*, *all*, *alone* and
*pooled* mean; ``make_split``, ``federated``, ``alone`` and ``pooled`` are reused as they are).

Datasets (``DATASETS``):

- ``penguins`` (3 islands) and ``cars`` (3 origins): the natural sites of ``tasks.sites``.
- ``breast-cancer`` (569 rows, 30 features, 2 classes) and ``diabetes`` (442 rows, 10
  features, regression), scikit-learn's, over 5 and 20 sites, by label skew (``label``:
  ``tasks.partitioning``'s label-sort, a share s = 0.1 spread iid and the rest sorted by label
  and dealt in order; diabetes by decile of the target) and by ``dirichlet`` over the labels
  (alpha 0.5; diabetes: deciles; breast-cancer over 20 sites alpha 2, as the partitioner finds
  no 20 sites of at least 10 rows with 2 classes at 0.5 or 1).
- ``synth50k``: ``make_classification`` with 50,000 rows, 20 features (10 informative, 5
  redundant), 3 classes, 2 clusters a class, ``random_state=0``; 10 sites by Dirichlet over the
  labels (alpha 0.5), then a per-site feature shift: site p adds one offset vector
  delta_p ~ N(0, ``SHIFT``^2 I) to all its rows (a per-site calibration offset: the same label
  rule seen through shifted instruments, so P(y | x) differs between sites).
- ``synth1m``: the same generator with 1,000,000 rows, cut and shifted the same way over 10
  sites: the time per tree at scale. Not in the default grid (``--datasets synth1m``).

The tables are fixed; the cut into sites (and the shifts) and the 75/25 split are drawn with the
seed (natural sites are the same for every seed).

Methods (``METHODS``): FFGB and FFGB.C with tree learners, FFGB with its MLP learners,
``fedxgb-bagging``, ``fedxgb-cyclic``, FedAvg (MLP), ``fedxgb-hist``, all at the project's
defaults, with the regression settings ``benchmarks.sites`` found on cars (FFGB with MLP
learners and FFGB.C eta0 = 1, FFGB.C G = 3, FedAvg learning rate 0.01; FFGB trees at its
defaults, Newton leaves and a constant 0.3) on every regression dataset. References: each site
alone and all sites pooled (one node on the union), with FFGB trees and with XGBoost
(``fedxgb-bagging`` on one node: one tree a round on the node's rows at eta 0.3, plain XGBoost).
With more than ``POOLED_SHARES_MAX`` sites the pooled model is scored on test/all.csv only (its
score on each site's share would take one run per site). ``fedxgb-hist`` (histogram-based
federated XGBoost) is a method and a reference: on one node it is XGBoost ``hist`` on the pooled
rows with the bins of that node's sketch, so its pooled row against its federated row shows what
the sites' merged sketches change; "pooled (xgboost)" is XGBoost with its own bins and, for two
classes, ``multi:softprob`` (the baselines' objective) where ``fedxgb-hist`` uses
``binary:logistic``.

Reported for every federated run, from its per-round rows: the final score on test/all.csv
(central) and on each site's own share (mean and worst site); the score at equal bytes (the
last round whose cumulative payload of every message, up and down, ``server_app.results.
cumulative_traffic``, is within what FFGB trees used over its whole run on the same dataset and
seed); mean payload bytes per round up and down; seconds per round (the server's clock, from the
end of round 0).

    python -m benchmarks.boosting --out benchmarks/results/boosting.json
    python -m benchmarks.boosting --datasets penguins --seeds 0 --rounds 3 --out /tmp/b.json
    python -m benchmarks.boosting --render --out benchmarks/results/boosting.json  # markdown only

Runs one after another in this process (one core). Writes the JSON and, beside it, the markdown
section (same name, ``.md``) after every dataset, so an interrupted grid keeps what ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, md_table, write_report
from benchmarks.sites import (
    FAMILIES,
    Family,
    Split,
    alone,
    cell,
    federated,
    make_split,
    mean_std,
    plain,
    pooled,
    score,
    unplain,
)

SHIFT = 0.5  # std of synth50k's per-site feature offsets (features have std about 1-2)
LABEL_SORT_S, DIRICHLET_ALPHA = 0.1, 0.5
POOLED_SHARES_MAX = 5  # more sites: the pooled model is scored on test/all.csv only
TITLE = "FFGB against federated XGBoost on tabular sites (issue 24 item 3)"
CURVE_ROUNDS = (1, 2, 5, 10, 20)  # the rounds of the per-round table


@dataclass(frozen=True)
class Dataset:
    """A table and how it is cut into sites."""

    source: str  # penguins, cars, breast-cancer, diabetes, or a synthetic size (SYNTH_ROWS)
    scheme: str  # natural, label, dirichlet, dirichlet-shift
    nodes: int
    alpha: float = DIRICHLET_ALPHA


DATASETS = {
    "penguins": Dataset("penguins", "natural", 3),
    "cars": Dataset("cars", "natural", 3),
    **{
        f"{source}-{scheme}-{nodes}": Dataset(source, scheme, nodes)
        for source in ("breast-cancer", "diabetes")
        for nodes in (5, 20)
        for scheme in ("label", "dirichlet")
    },
    # Two classes over 20 sites of at least 10 rows each: alpha 0.5 and 1 fail the partitioner's
    # 10 draws on every seed; alpha 2 leaves sites from 10 % to 95 % benign.
    "breast-cancer-dirichlet-20": Dataset("breast-cancer", "dirichlet", 20, alpha=2.0),
    "synth50k": Dataset("synth50k", "dirichlet-shift", 10),
    # the time per tree at scale (issue 38): run on its own, not in the default grid
    "synth1m": Dataset("synth1m", "dirichlet-shift", 10),
    # secure aggregation's cost at scale (benchmarks.secure_cost): not in the default grid
    "synth300k-3": Dataset("synth300k", "dirichlet-shift", 3),
    # benchmarks.hist_time's other sizes: not in the default grid
    "synth250k-3": Dataset("synth250k", "dirichlet-shift", 3),
    "synth10m": Dataset("synth10m", "dirichlet-shift", 10),
}
AT_SCALE = ("synth1m", "synth300k-3", "synth250k-3", "synth10m")  # each run on its own
DEFAULT_DATASETS = [name for name in DATASETS if name not in AT_SCALE]
SYNTH_ROWS = {
    "synth50k": 50_000,
    "synth250k": 250_000,
    "synth300k": 300_000,
    "synth1m": 1_000_000,
    "synth10m": 10_000_000,
}
REGRESSION = tuple(name for name, d in DATASETS.items() if d.source in ("cars", "diabetes"))

_SITES = {f.name: f for f in FAMILIES}


def _method(name: str, overrides: dict[str, Any]) -> Family:
    """A method with the regression settings ``benchmarks.sites`` uses on cars for ``name``
    (none for the XGBoost baselines)."""
    cars = _SITES[name].per_table.get("cars", {}) if name in _SITES else {}
    return Family(
        name, overrides, tables=tuple(DATASETS), per_table=dict.fromkeys(REGRESSION, cars)
    )


METHODS = (
    *(_method(name, _SITES[name].overrides) for name in ("ffgb-trees", "ffgb-c-trees", "ffgb-mlp")),
    _method("fedxgb-bagging", {"algorithm": "fedxgb-bagging"}),
    _method("fedxgb-cyclic", {"algorithm": "fedxgb-cyclic"}),
    _method("fedavg", _SITES["fedavg"].overrides),
    _method("fedxgb-hist", {"algorithm": "fedxgb-hist"}),
)
REFERENCES = {
    "ffgb-trees": METHODS[0],
    "xgboost": replace(METHODS[3], name="xgboost"),
    "fedxgb-hist": METHODS[6],
}
BUDGET_METHOD = "ffgb-trees"  # the equal-bytes budget: what this method used


# -- data -----------------------------------------------------------------------------------
def load_table(source: str) -> tuple[pd.DataFrame, str, str, np.ndarray]:
    """A scikit-learn table as a frame: (frame, label column, kind, labels to partition by)."""
    from sklearn import datasets

    if source == "breast-cancer":
        bunch = datasets.load_breast_cancer(as_frame=True)
        frame = bunch.data.rename(columns=lambda c: c.replace(" ", "_"))
        codes = bunch.target.to_numpy()
        return (
            frame.assign(diagnosis=bunch.target_names[codes]),
            "diagnosis",
            "classification",
            codes,
        )
    if source == "diabetes":
        bunch = datasets.load_diabetes(as_frame=True)
        frame = bunch.data.assign(progression=bunch.target.astype(float))
        return frame, "progression", "regression", frame["progression"].to_numpy()
    x, codes = datasets.make_classification(
        n_samples=SYNTH_ROWS[source],
        n_features=20,
        n_informative=10,
        n_redundant=5,
        n_classes=3,
        n_clusters_per_class=2,
        random_state=0,
    )
    frame = pd.DataFrame(x, columns=[f"x{i:02d}" for i in range(x.shape[1])])
    return frame.assign(y=[f"class{c}" for c in codes]), "y", "classification", codes


def write_raw(name: str, raw: Path, seed: int) -> None:
    """``raw/<pid>.csv`` for every site of dataset ``name`` and ``raw/sites.json``, in the
    format of ``tasks.sites.write_sites`` (which writes the natural sites)."""
    from tasks.partitioning import partition
    from tasks.sites import write_sites

    data = DATASETS[name]
    if data.scheme == "natural":
        write_sites(data.source, raw)
        return
    frame, label, kind, codes = load_table(data.source)
    scheme = "label-sort" if data.scheme == "label" else "dirichlet"
    parts = partition(scheme, data.nodes, codes, seed=seed, s=LABEL_SORT_S, alpha=data.alpha)
    features = [c for c in frame.columns if c != label]
    shifts = np.random.default_rng([seed, data.nodes]).normal(
        0.0, SHIFT, size=(data.nodes, len(features))
    )
    raw.mkdir(parents=True, exist_ok=True)
    for pid, rows in enumerate(parts):
        site = frame.iloc[rows].copy()
        if data.scheme == "dirichlet-shift":
            site[features] += shifts[pid]
        site.to_csv(raw / f"{pid}.csv", index=False)
    manifest = {
        "table": name,
        "label": label,
        "kind": kind,
        "categorical": [],
        "sites": {
            f"site{pid:02d}": {"partition-id": pid, "rows": len(rows)}
            for pid, rows in enumerate(parts)
        },
    }
    (raw / "sites.json").write_text(json.dumps(manifest, indent=1) + "\n")


def split_for(name: str, work: Path, seed: int) -> Split:
    """Write dataset ``name``'s sites for ``seed`` under ``work`` and split them 75/25."""
    raw = work / name / f"seed{seed}" / "raw"
    write_raw(name, raw, seed)
    return make_split(name, raw, work / name / f"seed{seed}", seed)


# -- one dataset and seed ---------------------------------------------------------------------
def traffic(record: dict[str, Any], kind: str) -> dict[str, Any]:
    """Replace a federated record's rows by its curve [round, cumulative MB, score on
    test/all.csv], bytes per round (mean over rounds 1..R) and seconds per round."""
    from server_app.results import cumulative_traffic

    rows, std = record.pop("rows"), record.pop("target_std")
    key = "test_accuracy" if kind == "classification" else "test_mse"
    scored = [r for r in rows if r.get(key) is not None]
    record["curve"] = [
        [r["round"], mb, score(r, "", kind, std)]
        for r, mb in zip(scored, cumulative_traffic(rows, key))
    ]
    trained = [r for r in rows if r.get("round", 0) >= 1]
    record["bytes_up_per_round"] = statistics.fmean(r["bytes_up"] for r in trained)
    record["bytes_down_per_round"] = statistics.fmean(r["bytes_down"] for r in trained)
    record["s_per_round"] = (rows[-1]["wall_time_s"] - rows[0]["wall_time_s"]) / len(trained)
    # exchanges with the nodes per round: fedxgb-hist's tree levels, one train round otherwise
    record["exchanges_per_round"] = statistics.fmean(r.get("histogram_levels", 1) for r in trained)
    record["worst_own"] = extreme(record["own"].values(), kind)
    return record


def extreme(values: Any, kind: str, best: bool = False) -> float:
    """The worst site's score (lowest accuracy, or highest RMSE), or with ``best`` the best."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan
    return min(finite) if (kind == "classification") != best else max(finite)


def at_budget(curve: list[list[float]], budget_mb: float) -> tuple[float, int]:
    """Score and round of the last row of ``curve`` whose cumulative MB is within the budget;
    NaN when not even round 1 is (the untrained model's score says nothing of the method)."""
    within = [point for point in curve if point[1] <= budget_mb * (1 + 1e-9)]
    last = int(within[-1][0]) if within else 0
    return (within[-1][2] if last >= 1 else math.nan), last


def run_dataset(
    name: str,
    seed: int,
    rounds: dict[str, int],
    methods: list[Family],
    references: bool,
    work: Path,
) -> list[dict[str, Any]]:
    """Every method federated, then each reference alone and pooled, on one dataset and seed;
    the federated records get their equal-bytes score."""
    split = split_for(name, work, seed)
    out_dir = work / name / f"seed{seed}" / "runs"
    records: list[dict[str, Any]] = []
    for family in methods:
        record = federated(split, family, name, seed, rounds[family.name], out_dir, keep_rows=True)
        records.append(traffic(record, split.kind) if "error" not in record else record)
        _progress(name, seed, "federated", family.name, [records[-1]])
    budget = next(
        (r["curve"][-1][1] for r in records if r["method"] == BUDGET_METHOD and "curve" in r),
        math.nan,
    )
    for record in records:
        if "curve" in record:
            record["budget_mb"] = budget
            record["at_budget"], record["rounds_in_budget"] = at_budget(record["curve"], budget)
    for label, family in REFERENCES.items() if references else ():
        records += alone(split, family, name, seed, rounds[label], out_dir)
        _progress(name, seed, "alone", label, records[-len(split.sites) :])
        records.append(
            pooled(
                split,
                family,
                name,
                seed,
                rounds[label],
                out_dir,
                own_shares=len(split.sites) <= POOLED_SHARES_MAX,
            )
        )
        _progress(name, seed, "pooled", label, records[-1:])
    for record in records:
        record["dataset"] = record.pop("table")
    return records


def _progress(name: str, seed: int, kind: str, method: str, new: list[dict[str, Any]]) -> None:
    errors = [r["error"] for r in new if "error" in r]
    print(
        f"  {name:<24} seed {seed} {kind:<9} {method:<14} "
        f"{sum(r['wall_s'] for r in new):6.1f} s"
        + (f"  {len(errors)} ERROR {errors[0]}" if errors else ""),
        flush=True,
    )


# -- summary ----------------------------------------------------------------------------------
def summarise(
    records: list[dict[str, Any]], name: str, kind: str, seeds: list[int]
) -> tuple[dict[str, Any], str]:
    """One dataset's {row: {column: [mean, std, n]}} and its markdown table and verdict."""
    mine = [r for r in records if r["dataset"] == name]
    expected = len(seeds)
    errors: list[str] = []
    summary: dict[str, Any] = {}
    rows = []

    def show(
        values: list[float], failed: list[dict[str, Any]], raw: bool = False, note: str = ""
    ) -> str:
        for error in sorted({r["error"] for r in failed}):
            if error not in errors:
                errors.append(error)
        marks = ", ".join(str(errors.index(e) + 1) for e in sorted({r["error"] for r in failed}))
        if not any(math.isfinite(v) for v in values):
            return f"error ({marks})" if failed else "-"
        if raw:  # a plain number, not a score
            mean, std, n = mean_std(values)
            text = f"{mean:.1f} ± {std:.1f}"
            text = text if n == expected else f"{text} ({n} of {expected} seeds)"
        else:
            text = cell(values, kind, expected)
        text += note
        return f"{text}; {len(failed)} runs refused ({marks})" if failed else text

    for family in METHODS:
        chosen = [r for r in mine if r["method"] == family.name and r["kind"] == "federated"]
        if not chosen:
            continue
        ok = [r for r in chosen if "error" not in r]
        failed = [r for r in chosen if "error" in r]
        columns = {
            "all": [r["all"] for r in ok],
            "own mean": [statistics.fmean(r["own"].values()) for r in ok],
            "own worst": [r["worst_own"] for r in ok],
            "at budget": [r["at_budget"] for r in ok],
            "rounds in budget": [float(r["rounds_in_budget"]) for r in ok],
            "kB up per round": [r["bytes_up_per_round"] / 1e3 for r in ok],
            "kB down per round": [r["bytes_down_per_round"] / 1e3 for r in ok],
            "ms per round": [1e3 * r["s_per_round"] for r in ok],
            # records from before the column: one exchange a round
            "exchanges per round": [r.get("exchanges_per_round", 1.0) for r in ok],
        }
        summary[family.name] = {k: list(mean_std(v)) for k, v in columns.items()}
        in_budget = mean_std(columns["rounds in budget"])[0]
        budget_cell = show(columns["at budget"], failed)
        rows.append(
            [
                family.name,
                _rounds(ok),
                show(columns["all"], failed),
                show(columns["own mean"], failed),
                show(columns["own worst"], failed),
                (
                    "over budget at round 1"
                    if budget_cell == "-"
                    else f"{budget_cell} (r {in_budget:.1f})"
                ),
                show(columns["kB up per round"], failed, raw=True),
                show(columns["kB down per round"], failed, raw=True),
                show(columns["ms per round"], failed, raw=True),
                show(columns["exchanges per round"], failed, raw=True),
            ]
        )
    for label in REFERENCES:
        for kind_ in ("pooled", "alone"):
            chosen = [r for r in mine if r["method"] == label and r["kind"] == kind_]
            if chosen:
                summary[f"{kind_} ({label})"], row = _reference(chosen, kind_, kind, seeds, show)
                rows.append([f"{kind_} ({label})", _rounds(chosen), *row, "-", "-", "-", "-", "-"])
    headers = [
        "method",
        "rounds",
        "test/all.csv",
        "own shares, mean of sites",
        "worst site's",
        "test/all.csv at equal bytes (rounds)",
        "kB up / round",
        "kB down / round",
        "ms / round",
        "exchanges / round",
    ]
    budget = mean_std(
        [r["budget_mb"] for r in mine if r["method"] == BUDGET_METHOD and "budget_mb" in r]
    )[0]
    unit = (
        "accuracy %" if kind == "classification" else "RMSE in the label's units, lower is better"
    )
    title = (
        f"### {name} ({DATASETS[name].nodes} sites; {unit}; mean ± std over seeds "
        f"{', '.join(map(str, seeds))}; equal bytes = the whole run of {BUDGET_METHOD}, "
        f"{budget:.2f} MB on average)"
    )
    parts = [title, "", md_table(headers, rows), ""]
    parts += [f"({i}) {error}" for i, error in enumerate(errors, start=1)]
    parts += ["", curve_table(mine, kind, expected)]
    verdict = _verdict(summary, kind)
    summary["verdict"] = verdict
    return summary, "\n".join(parts + ["", f"**Verdict.** {verdict}", ""])


def curve_table(mine: list[dict[str, Any]], kind: str, expected: int) -> str:
    """Score on test/all.csv after rounds ``CURVE_ROUNDS`` and the cumulative MB (up and down)
    at the last round, per federated method, mean over seeds."""
    rounds = sorted({int(p[0]) for r in mine if "curve" in r for p in r["curve"]})
    shown = [r for r in CURVE_ROUNDS if r in rounds]
    rows = []
    for family in METHODS:
        curves = [r["curve"] for r in mine if r["method"] == family.name and "curve" in r]
        if not curves:
            continue
        at = [{int(p[0]): p for p in c} for c in curves]
        cells = [
            cell([c[r][2] for c in at if r in c], kind, expected)
            if any(r in c for c in at)
            else "-"
            for r in shown
        ]
        last = max(int(c[-1][0]) for c in curves)
        megabytes = mean_std([c[-1][1] for c in curves])[0]
        rows.append([family.name, *cells, f"{megabytes:.2f} (r {last})"])
    headers = ["method", *(f"round {r}" for r in shown), "MB up + down, whole run"]
    return "Per round (test/all.csv, mean ± std over seeds):\n\n" + md_table(headers, rows)


def _rounds(records: list[dict[str, Any]]) -> str:
    return "/".join(str(x) for x in sorted({r["rounds"] for r in records if "rounds" in r})) or "-"


def _reference(
    chosen: list[dict[str, Any]], kind_: str, kind: str, seeds: list[int], show: Any
) -> tuple[dict[str, Any], list[str]]:
    """A reference row: pooled (one model) or alone (one model per site; its test/all.csv
    cell is the mean over sites, with the best site)."""
    failed = [r for r in chosen if "error" in r]  # alone: a site's run refused, the others kept
    by_seed: dict[int, list[dict[str, Any]]] = {}
    for r in chosen:
        if "error" not in r:
            by_seed.setdefault(r["seed"], []).append(r)
    if kind_ == "pooled":
        alls = [r[0]["all"] for r in by_seed.values()]
        owns = [list(r[0]["own"].values()) for r in by_seed.values()]
    else:
        alls = [statistics.fmean(x["all"] for x in r) for r in by_seed.values()]
        owns = [[v for x in r for v in x["own"].values()] for r in by_seed.values()]
    columns = {
        "all": alls,
        "own mean": [statistics.fmean(o) if o else math.nan for o in owns],
        "own worst": [extreme(o, kind) for o in owns],
    }
    summary = {k: list(mean_std(v)) for k, v in columns.items()}
    note = ""
    if kind_ == "alone" and by_seed:
        best = [extreme([x["all"] for x in r], kind, best=True) for r in by_seed.values()]
        summary["best site on all"] = list(mean_std(best))
        scale, digits = (100.0, 1) if kind == "classification" else (1.0, 2)
        note = f" (best site {scale * mean_std(best)[0]:.{digits}f})"
    return summary, [
        show(columns["all"], failed, note=note),
        show(columns["own mean"], failed),
        show(columns["own worst"], failed),
    ]


def _verdict(summary: dict[str, Any], kind: str) -> str:
    """The best federated method on test/all.csv, against FFGB trees and pooled XGBoost."""
    federated_rows = {
        m.name: summary[m.name]
        for m in METHODS
        if m.name in summary and math.isfinite(summary[m.name]["all"][0])
    }
    if not federated_rows:
        return "no federated run finished."
    sign = 1.0 if kind == "classification" else -1.0
    best = max(federated_rows, key=lambda m: sign * federated_rows[m]["all"][0])
    scale, digits = (100.0, 1) if kind == "classification" else (1.0, 2)

    def value(row: str) -> str:
        entry = summary.get(row, {}).get("all", [math.nan])
        return "n/a" if not math.isfinite(entry[0]) else f"{scale * entry[0]:.{digits}f}"

    text = f"best federated on test/all.csv: {best} {value(best)}"
    reference = federated_rows.get(BUDGET_METHOD)
    if reference and best != BUDGET_METHOD:
        mine = federated_rows[best]
        bytes_ratio = (mine["kB up per round"][0] + mine["kB down per round"][0]) / (
            reference["kB up per round"][0] + reference["kB down per round"][0]
        )
        time_ratio = mine["ms per round"][0] / reference["ms per round"][0]
        text += (
            f" ({BUDGET_METHOD} {value(BUDGET_METHOD)}), at {bytes_ratio:.2g}x the bytes "
            f"and {time_ratio:.2g}x the time per round of {BUDGET_METHOD}"
        )
    others = ", ".join(f"{m} {value(m)}" for m in federated_rows if m not in (best, BUDGET_METHOD))
    others = f"{others}; " if others else ""
    text = (
        f"{text}; {others}pooled XGBoost {value('pooled (xgboost)')}, pooled FFGB trees "
        f"{value('pooled (ffgb-trees)')}."
    )
    return text + _hist_against_pooled(summary, kind)


def _hist_against_pooled(summary: dict[str, Any], kind: str) -> str:
    """fedxgb-hist against pooled XGBoost (its own bins) and against itself on one node with
    every row (the same algorithm pooled): within 0.5 points of accuracy or 1 % of RMSE?"""
    hist = summary.get("fedxgb-hist", {}).get("all", [math.nan])[0]
    parts = []
    for row, name in (("pooled (xgboost)", "pooled XGBoost"), ("pooled (fedxgb-hist)", "pooled")):
        pooled_ = summary.get(row, {}).get("all", [math.nan])[0]
        if not (math.isfinite(hist) and math.isfinite(pooled_)):
            continue
        if kind == "classification":
            gap, bound, unit = 100.0 * (hist - pooled_), 0.5, "points"
        else:
            gap, bound, unit = 100.0 * (hist - pooled_) / pooled_, 1.0, "% of RMSE"
        within = "within" if abs(gap) <= bound else "outside"
        parts.append(f"{gap:+.2f} {unit} against {name} ({within} {bound})")
    return f" fedxgb-hist: {'; '.join(parts)}." if parts else ""


# -- main -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS, choices=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of every run")
    parser.add_argument(
        "--methods", nargs="+", default=[m.name for m in METHODS], choices=[m.name for m in METHODS]
    )
    parser.add_argument(
        "--fewer-rounds",
        nargs="*",
        default=[],
        metavar="METHOD[@DATASET]=R",
        help="R rounds for METHOD (on DATASET only, with @), e.g. ffgb-mlp=10 ffgb-mlp@synth50k=5",
    )
    parser.add_argument(
        "--fewer-seeds",
        nargs="*",
        default=[],
        metavar="DATASET=S[,S...]",
        help="only these of the seeds on DATASET, e.g. synth50k=0",
    )
    parser.add_argument(
        "--no-references", action="store_true", help="skip the alone and pooled runs"
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the site files and run folders here (default: a temporary folder, removed)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "boosting.json",
        help="results JSON; the markdown goes beside it (.md; default: results/boosting.json)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="run nothing: rewrite the markdown beside --out from its JSON",
    )
    args = parser.parse_args(argv)
    if args.render:
        render(args.out)
        return 0
    caps = dict(item.split("=") for item in args.fewer_rounds)
    seeds = {
        name: [int(s) for s in listed.split(",")]
        for name, listed in (item.split("=") for item in args.fewer_seeds)
    }
    seeds = {name: seeds.get(name, args.seeds) for name in args.datasets}

    logging.disable(logging.WARNING)  # Flower logs every round at INFO
    chosen = [m for m in METHODS if m.name in args.methods]
    started = time.perf_counter()
    records: list[dict[str, Any]] = []
    summaries: dict[str, Any] = {}
    parts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="boosting-bench-") as tmp:
        work = args.work or Path(tmp)
        for name in args.datasets:
            rounds = {
                m: int(caps.get(f"{m}@{name}", caps.get(m, args.rounds)))
                for m in [*(m.name for m in METHODS), *REFERENCES]
            }
            kind = "regression" if name in REGRESSION else "classification"
            for seed in seeds[name]:
                records += run_dataset(name, seed, rounds, chosen, not args.no_references, work)
            summaries[name], part = summarise(records, name, kind, seeds[name])
            parts.append(part)
            _write(args, argv, time.perf_counter() - started, records, summaries, parts, seeds)
    return 0


def _write(
    args: argparse.Namespace,
    argv: list[str] | None,
    wall: float,
    records: list[dict[str, Any]],
    summaries: dict[str, Any],
    parts: list[str],
    seeds: dict[str, list[int]],
) -> None:
    """The JSON and the markdown report of what has run so far."""
    from benchmarks.common import machine_info

    command = " ".join(
        ["python -m benchmarks.boosting", *(argv if argv is not None else sys.argv[1:])]
    )
    report = {
        "command": command,
        "machine": machine_info(),
        "wall_s": wall,
        "datasets": {n: vars(DATASETS[n]) for n in summaries},
        "seeds": seeds,
        "rounds": args.rounds,
        "fewer_rounds": args.fewer_rounds,
        "methods": [
            {
                "name": m.name,
                "overrides": m.overrides,
                "regression": m.per_table.get(REGRESSION[0], {}),
            }
            for m in METHODS
            if m.name in args.methods
        ],
        "shift": SHIFT,
        "label_sort_s": LABEL_SORT_S,
        "dirichlet_alpha": DIRICHLET_ALPHA,
        "summary": summaries,
        "runs": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(plain(report), indent=1, default=str) + "\n")
    write_report(args.out.with_suffix(".md"), TITLE, wall, "\n".join(parts))


def render(out: Path) -> None:
    """The markdown of a finished (or interrupted) run, from its JSON alone, under the header
    the run wrote (its command, machine and wall time)."""
    report = json.loads(out.read_text())
    runs = unplain(report["runs"])
    parts = []
    for name, seeds in report["seeds"].items():
        if name in report["summary"]:
            kind = "regression" if name in REGRESSION else "classification"
            parts.append(summarise(runs, name, kind, seeds)[1])
    write_report(
        out.with_suffix(".md"),
        TITLE,
        report["wall_s"],
        "\n".join(parts),
        command=report["command"],
        info=report["machine"],
    )


if __name__ == "__main__":
    sys.exit(main())
