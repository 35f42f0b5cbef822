"""benchmarks.boosting's sites: the same files for the same seed, no empty site, and the
federation's test set exactly the union of the sites' test shares."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.boosting import curve_table, render, split_for, write_raw
from benchmarks.sites import plain


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.csv"))}


@pytest.mark.parametrize(
    "name", ["breast-cancer-label-20", "breast-cancer-dirichlet-20", "diabetes-dirichlet-5"]
)
def test_sites_are_deterministic_non_empty_and_test_all_is_the_union(name, tmp_path):
    first = split_for(name, tmp_path / "a", seed=1)
    again = split_for(name, tmp_path / "b", seed=1)
    other = split_for(name, tmp_path / "c", seed=2)
    assert _files(first.folder) == _files(again.folder)
    assert _files(first.folder) != _files(other.folder)

    shares = []
    for pid in range(len(first.sites)):
        train = pd.read_csv(first.folder / "train" / f"{pid}.csv")
        test = pd.read_csv(first.folder / "test" / f"{pid}.csv")
        assert len(train) > 0 and len(test) > 0
        shares.append(test)
    union = pd.concat(shares, ignore_index=True)
    every = pd.read_csv(first.folder / "test" / "all.csv")
    key = list(every.columns)
    assert len(every) == first.test_rows["all"] == sum(len(s) for s in shares)
    pd.testing.assert_frame_equal(
        union.sort_values(key, ignore_index=True), every.sort_values(key, ignore_index=True)
    )


def test_the_large_table_has_50000_rows_over_10_non_empty_sites(tmp_path):
    write_raw("synth50k", tmp_path, seed=0)
    rows = [len(pd.read_csv(tmp_path / f"{pid}.csv")) for pid in range(10)]
    assert min(rows) > 0 and sum(rows) == 50_000
    assert not (tmp_path / "10.csv").exists()


def test_an_ablation_variant_changes_only_its_settings_and_runs(tmp_path):
    """A variant is the paper's FFGB with trees (eta0 1 on regression) and its one change; a
    two-round run of the default and of Newton leaves on penguins gives a table with both."""
    from benchmarks.boosting_ablation import BASE, PAPER, VARIANTS, main, variant

    newton = variant("newton leaves", "cars")
    assert newton.overrides == {
        **BASE.overrides,
        **PAPER,
        "ffgb.eta0": 1.0,
        "ffgb.tree-leaves": "newton",
    }
    default = next(iter(VARIANTS))
    out = tmp_path / "ablation.json"
    assert (
        main(
            [
                "--datasets",
                "penguins",
                "--seeds",
                "0",
                "--rounds",
                "2",
                "--variants",
                default,
                "newton leaves",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = out.with_suffix(".md").read_text()
    assert "| newton leaves |" in table and f"| {default} |" in table
    assert "n/a" not in table


def _run(method: str, seed: int, curve: list[list[float]]) -> dict:
    """A federated record as benchmarks.boosting keeps it, with made-up numbers."""
    return {
        "dataset": "penguins",
        "method": method,
        "kind": "federated",
        "seed": seed,
        "rounds": int(curve[-1][0]),
        "all": curve[-1][2],
        "own": {"0": 0.5, "1": math.nan},
        "worst_own": 0.5,
        "at_budget": math.nan,
        "rounds_in_budget": 0,
        "bytes_up_per_round": 10.0,
        "bytes_down_per_round": 20.0,
        "s_per_round": 0.1,
        "budget_mb": 1.0,
        "curve": curve,
    }


def test_the_per_round_table_averages_each_round_over_seeds_and_marks_missing_rounds():
    runs = [
        _run("ffgb-trees", 0, [[0, 0.0, 0.3], [1, 0.1, 0.6], [2, 0.2, 0.8]]),
        _run("ffgb-trees", 1, [[0, 0.0, 0.3], [1, 0.1, 0.8], [2, 0.4, 0.9]]),
        _run("fedavg", 0, [[0, 0.0, 0.3], [1, 0.5, 0.7]]),
    ]
    table = curve_table(runs, "classification", expected=2)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()}
    assert "round 1 | round 2 |" in table and "round 5" not in table
    assert "| 70.0 ± 14.1 | 85.0 ± 7.1 | 0.30 (r 2) |" in rows["ffgb-trees"]
    assert "| 70.0 ± 0.0 (1 of 2 seeds) | - | 0.50 (r 1) |" in rows["fedavg"]


def test_render_rewrites_the_markdown_from_the_json_alone(tmp_path):
    """A report read back (NaN stored as null) renders the same tables the run wrote."""
    runs = [_run("ffgb-trees", 0, [[0, 0.0, 0.3], [1, 0.1, 0.6]])]
    out = tmp_path / "b.json"
    out.write_text(
        json.dumps(
            plain(
                {
                    "command": "python -m benchmarks.boosting --datasets penguins",
                    "wall_s": 60.0,
                    "machine": {"commit": "abc1234"},
                    "seeds": {"penguins": [0]},
                    "summary": {"penguins": {}},
                    "runs": runs,
                }
            )
        )
    )
    render(out)
    text = out.with_suffix(".md").read_text()
    assert "- command: `python -m benchmarks.boosting --datasets penguins`" in text
    assert "- commit: abc1234" in text
    assert "| ffgb-trees | 1 | 60.0 ± 0.0 | - | 50.0 ± 0.0 |" in text  # NaN came back as NaN
    assert "| 60.0 ± 0.0 | 0.10 (r 1) |" in text
    assert "best federated on test/all.csv: ffgb-trees 60.0; pooled XGBoost n/a" in text
