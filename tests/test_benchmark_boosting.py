"""benchmarks.boosting's sites: the same files for the same seed, no empty site, and the
federation's test set exactly the union of the sites' test shares."""

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.boosting import split_for, write_raw


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.csv"))}


@pytest.mark.parametrize("name", ["breast-cancer-label-20", "breast-cancer-dirichlet-20",
                                  "diabetes-dirichlet-5"])
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
    pd.testing.assert_frame_equal(union.sort_values(key, ignore_index=True),
                                  every.sort_values(key, ignore_index=True))


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
    assert newton.overrides == {**BASE.overrides, **PAPER, "ffgb.eta0": 1.0,
                                "ffgb.tree-leaves": "newton"}
    default = next(iter(VARIANTS))
    out = tmp_path / "ablation.json"
    assert main(["--datasets", "penguins", "--seeds", "0", "--rounds", "2", "--variants",
                 default, "newton leaves", "--out", str(out)]) == 0
    table = out.with_suffix(".md").read_text()
    assert "| newton leaves |" in table and f"| {default} |" in table
    assert "n/a" not in table
