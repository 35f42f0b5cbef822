"""A site's own file: read once per version, every bad input a clear error naming the file."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tasks import site_files
from tasks.site_facts import site_facts
from tasks.site_files import CATEGORICAL, NUMERIC, SiteDataError, read_site_file
from tasks.site_schema import CLASSIFICATION, REGRESSION, SiteSpec

PENGUIN_SPEC = SiteSpec(CLASSIFICATION, "species", categorical=("sex",))

PENGUINS = pd.DataFrame(
    {
        "bill_length_mm": [39.1, 39.5, None, 46.5, 50.0],
        "flipper_length_mm": [181, 186, 195, 210, 220],
        "sex": ["male", "female", None, "female", "male"],
        "species": ["Adelie", "Adelie", "Adelie", "Gentoo", "Chinstrap"],
    }
)


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


def write(tmp_path, name: str, frame: pd.DataFrame = PENGUINS):
    path = tmp_path / name
    if name.endswith(".csv"):
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("name", ["site.csv", "site.parquet"])
def test_a_site_file_gives_facts_and_no_rows(tmp_path, name):
    table = read_site_file(write(tmp_path, name))
    facts = site_facts(table, PENGUIN_SPEC)
    assert facts["rows"] == 5
    assert facts["columns"] == {
        "bill_length_mm": NUMERIC,
        "flipper_length_mm": NUMERIC,
        "sex": CATEGORICAL,
        "species": CATEGORICAL,
    }
    # the range 181..220, widened to the powers of two outside it: no row's value
    assert facts["ranges"]["flipper_length_mm"] == [128.0, 256.0]
    assert facts["missing"] == {"bill_length_mm": 1, "flipper_length_mm": 0, "sex": 1, "species": 0}
    assert facts["categories"]["species"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert "label-counts" not in facts  # only when the run asks
    stated = {v for r in facts["ranges"].values() for v in r} | set(facts["scales"].values())
    values = {*PENGUINS["bill_length_mm"].dropna(), *PENGUINS["flipper_length_mm"]}
    assert stated and not stated & values  # no row's value, not even an end
    counted = site_facts(table, replace(PENGUIN_SPEC, label_counts=True))
    assert counted["label-counts"] == {"Adelie": 3, "Chinstrap": 1, "Gentoo": 1}


def test_columns_in_another_order_give_the_same_facts(tmp_path):
    a = site_facts(read_site_file(write(tmp_path, "a.csv")), PENGUIN_SPEC)
    shuffled = PENGUINS[["species", "sex", "flipper_length_mm", "bill_length_mm"]]
    b = site_facts(read_site_file(write(tmp_path, "b.csv", shuffled)), PENGUIN_SPEC)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_npz_and_regression_labels(tmp_path):
    path = tmp_path / "site.npz"
    np.savez(path, x=np.arange(12.0).reshape(3, 2, 2), y=np.array([1.5, 2.5, 3.5]))
    facts = site_facts(read_site_file(path), SiteSpec(REGRESSION, "y"))
    assert facts["columns"] == {**{f"x{i}": NUMERIC for i in range(4)}, "y": NUMERIC}
    assert facts["ranges"]["y"] == [1.0, 4.0] and facts["rows"] == 3


def test_a_file_is_read_once_per_version(tmp_path, monkeypatch):
    path = write(tmp_path, "site.csv")
    first = read_site_file(path)
    assert read_site_file(path) is first
    PENGUINS.iloc[:3].to_csv(path, index=False)
    os.utime(path, ns=(1, 1))  # another version: size and time changed
    assert read_site_file(path).rows == 3


def bad(tmp_path, what: str):
    """A path that holds ``what``."""
    csv = tmp_path / "site.csv"
    if what == "missing file":
        return tmp_path / "nowhere.csv"
    if what == "a folder":
        (tmp_path / "folder.csv").mkdir()
        return tmp_path / "folder.csv"
    if what == "empty file":
        csv.write_bytes(b"")
        return csv
    if what == "truncated parquet":
        data = write(tmp_path, "site.parquet").read_bytes()
        (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
        return tmp_path / "cut.parquet"
    if what == "unreadable csv":
        csv.write_bytes(b'a,b\n1,"2\n3,4\n')  # an unterminated quote
        return csv
    if what == "not utf-8":
        csv.write_bytes("a,b\n1,\xe9\n".encode("latin-1"))
        return csv
    if what == "infinity":
        csv.write_text("a,species\n1,x\ninf,y\n")
        return csv
    if what == "unknown suffix":
        (tmp_path / "site.xlsx").write_bytes(b"PK")
        return tmp_path / "site.xlsx"
    if what == "duplicate columns":
        csv.write_text("a,a,species\n1,2,x\n")
        return csv
    if what == "header only":
        csv.write_text("a,species\n")
        return csv
    if what == "npz with other arrays":
        np.savez(tmp_path / "site.npz", features=np.zeros((2, 2)), y=np.zeros(2))
        return tmp_path / "site.npz"
    raise AssertionError(what)


@pytest.mark.parametrize(
    "what, message",
    [
        ("missing file", "no such file"),
        ("a folder", "a folder with no class sub-folders"),
        ("empty file", "empty file"),
        ("truncated parquet", "unreadable PARQUET"),
        ("unreadable csv", "unreadable CSV"),
        ("not utf-8", "unreadable CSV"),
        ("infinity", "column 'a' holds an infinite value"),
        ("unknown suffix", "unknown format '.xlsx'"),
        ("duplicate columns", "column names must be unique"),
        ("header only", "no rows"),
        ("npz with other arrays", "expected arrays x and y"),
    ],
)
def test_a_bad_file_is_an_error_naming_the_file_and_the_problem(tmp_path, what, message):
    path = bad(tmp_path, what)
    with pytest.raises(SiteDataError, match=message) as caught:
        read_site_file(path)
    assert str(path.name) in str(caught.value)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = write(tmp_path, "site.csv")
    monkeypatch.setitem(
        site_files._READERS, ".csv", lambda file: pytest.fail("read a file over the limit")
    )
    with pytest.raises(SiteDataError, match="more than the limit of 10 .*dataset-max-bytes"):
        read_site_file(path, max_bytes=10)


@pytest.mark.parametrize(
    "frame, label, message",
    [
        (PENGUINS.drop(columns="species"), "species", "no column 'species'"),
        (
            PENGUINS.assign(flipper_length_mm=["181", "x", "195", "210", "220"]),
            "species",
            "column 'flipper_length_mm' must be numeric; row 1 holds 'x'",
        ),
        (
            PENGUINS.assign(species=["Adelie", None, "Adelie", "Gentoo", "Chinstrap"]),
            "species",
            "label column 'species' is missing in 1 row",
        ),
    ],
)
def test_a_file_that_does_not_fit_the_schema_is_named(tmp_path, frame, label, message):
    table = read_site_file(write(tmp_path, "site.csv", frame))
    with pytest.raises(SiteDataError, match=message):
        site_facts(
            table,
            SiteSpec(
                CLASSIFICATION, label, ("bill_length_mm", "flipper_length_mm", "sex"), ("sex",)
            ),
        )
