"""The worked examples' site files: natural sites of real tables, one file each."""

from __future__ import annotations

import json

import pytest

from tasks.site_facts import site_facts
from tasks.site_files import read_site_file
from tasks.site_schema import CLASSIFICATION, REGRESSION, SiteSpec
from tasks.sites import TABLES, write_sites


@pytest.mark.parametrize(
    "name, rows, label, kind",
    [
        ("penguins", {"Biscoe": 168, "Dream": 124, "Torgersen": 52}, "species", CLASSIFICATION),
        ("cars", {"Europe": 70, "Japan": 79, "USA": 249}, "Miles_per_Gallon", REGRESSION),
    ],
)
def test_each_site_file_holds_its_sites_rows_and_reads_back(tmp_path, name, rows, label, kind):
    assert write_sites(name, tmp_path) == rows
    manifest = json.loads((tmp_path / "sites.json").read_text())
    assert manifest["label"] == label and manifest["kind"] == kind
    assert {site: s["rows"] for site, s in manifest["sites"].items()} == rows
    assert [s["partition-id"] for s in manifest["sites"].values()] == [0, 1, 2]
    spec = SiteSpec(kind, label, categorical=TABLES[name].categorical)
    facts = {
        site: site_facts(read_site_file(tmp_path / f"{i}.csv"), spec) for i, site in enumerate(rows)
    }
    assert {site: f["rows"] for site, f in facts.items()} == rows
    for f in facts.values():  # the site column is gone; every site has the same columns
        assert set(f["columns"]) == set(facts[next(iter(rows))]["columns"])
        assert "island" not in f["columns"] and "Origin" not in f["columns"]
    if kind == CLASSIFICATION:  # label skew: Torgersen's penguins are all Adelie
        assert facts["Torgersen"]["categories"]["species"] == ["Adelie"]
        assert facts["Biscoe"]["missing"]["sex"] > 0
    else:
        assert sum(f["missing"]["Horsepower"] for f in facts.values()) == 6
