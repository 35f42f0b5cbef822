"""The sites' schema agreement and federated preprocessing, as maths (no Flower): columns by
name, labels and categories as unions, refusals that name the column, moments that equal the
pooled statistics, and a transform that refuses what was not agreed."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tasks import site_files
from tasks.schema_agreement import agree
from tasks.site_facts import check_facts, site_facts
from tasks.site_files import SiteDataError, read_site_file
from tasks.site_moments import check_moments, site_moments, with_moments
from tasks.site_schema import CLASSIFICATION, REGRESSION, Schema, SiteSpec, text, texts, transform

SPEC = SiteSpec(CLASSIFICATION, "species", categorical=("sex",))
A = pd.DataFrame(
    {
        "bill": [39.1, 39.5, None, 46.5],
        "sex": ["male", "female", None, "female"],
        "species": ["Adelie", "Adelie", "Adelie", "Gentoo"],
    }
)
B = pd.DataFrame(
    {
        "species": ["Chinstrap", "Gentoo", "Gentoo"],
        "sex": ["male", "male", "x"],
        "bill": [50.0, 48.0, 47.0],
    }
)  # columns in another order


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


def table(tmp_path, name, frame):
    frame.to_csv(tmp_path / name, index=False)
    return read_site_file(tmp_path / name)


def fitted(tmp_path, spec=SPEC, frames=(A, B)):
    tables = {node: table(tmp_path, f"{node}.csv", frame) for node, frame in enumerate(frames)}
    facts = {
        n: check_facts(json.loads(json.dumps(site_facts(t, spec))), spec) for n, t in tables.items()
    }
    agreement = agree(spec, facts)
    moments = {
        n: check_moments(
            json.loads(json.dumps(site_moments(t, agreement.schema, np.arange(t.rows)))),
            agreement.schema,
            facts[n],
        )
        for n, t in tables.items()
    }
    return tables, agreement, with_moments(agreement.schema, moments)


def test_columns_match_by_name_and_labels_and_categories_are_unions(tmp_path):
    tables, agreement, schema = fitted(tmp_path)
    assert not agreement.refused
    assert [c.name for c in schema.columns] == ["bill", "sex"]  # sorted, label apart
    assert schema.columns[1].categories == ("female", "male", "x")
    assert schema.classes == ("Adelie", "Chinstrap", "Gentoo")
    pooled = pd.concat([A, B])["bill"]
    assert schema.columns[0].mean == pytest.approx(pooled.mean())
    assert schema.columns[0].std == pytest.approx(pooled.std(ddof=0))
    assert schema.columns[1].mode == "male"  # 3 male, 2 female, 1 x over both sites
    x, y = transform(tables[1], schema)  # B's columns are in another order on disk
    assert x.shape == (3, 4) and y.tolist() == [1, 2, 2]
    assert x[:, 0] == pytest.approx(
        (np.array([50.0, 48.0, 47.0]) - pooled.mean()) / pooled.std(ddof=0)
    )
    x, _ = transform(tables[0], schema)  # missing values: the federated mean and the mode
    assert x[2, 0] == pytest.approx(0.0, abs=1e-6) and x[2, 1:].tolist() == [0, 1, 0]


def test_the_schema_travels_as_validated_json(tmp_path):
    schema = fitted(tmp_path)[2]
    assert Schema.from_json(schema.to_json()) == schema
    body = json.loads(schema.to_json())
    for bad in (
        {**body, "kind": "ranking"},
        {**body, "target": [0, -1]},
        {**body, "columns": [{**body["columns"][0], "std": 0}]},
        {**body, "extra": 1},
        [1, 2],
    ):
        with pytest.raises(SiteDataError, match="malformed"):
            Schema.from_json(json.dumps(bad))
    with pytest.raises(SiteDataError, match="does not decode"):
        Schema.from_json("{not json")


@pytest.mark.parametrize(
    "frame, reason",
    [
        (B.drop(columns="bill"), "no column 'bill'"),
        (B.assign(bill=["long", "short", "long"]), "column 'bill' is categorical here but numeric"),
    ],
)
def test_a_conflicting_site_is_refused_naming_the_column(tmp_path, frame, reason):
    facts = {
        n: site_facts(table(tmp_path, f"{n}.csv", f), SPEC)
        for n, f in enumerate((A, A.iloc[:3], frame))
    }
    agreement = agree(SPEC, facts)
    assert list(agreement.refused) == [2] and reason in agreement.refused[2]
    assert [c.name for c in agreement.schema.columns] == ["bill", "sex"]


def test_declared_features_fix_the_order_and_text_in_them_is_the_sites_error(tmp_path):
    spec = SiteSpec(CLASSIFICATION, "species", ("sex", "bill"), ("sex",))
    assert [c.name for c in fitted(tmp_path, spec)[2].columns] == ["sex", "bill"]
    bad = table(tmp_path, "bad.csv", B.assign(bill=["50", "unknown", "47"]))
    with pytest.raises(SiteDataError, match="column 'bill' must be numeric; row 1 holds 'unknown'"):
        site_facts(bad, spec)


def test_what_was_not_agreed_is_refused_at_transform(tmp_path):
    schema = fitted(tmp_path)[2]
    unseen = table(
        tmp_path, "test.csv", A.assign(species=["Adelie", "Emperor", "Adelie", "Gentoo"])
    )
    with pytest.raises(SiteDataError, match="'species' holds 'Emperor', which is not one of"):
        transform(unseen, schema)
    with pytest.raises(SiteDataError, match="no column 'sex'"):
        transform(table(tmp_path, "short.csv", A.drop(columns="sex")), schema)


def test_regression_standardises_the_target_from_federated_sums(tmp_path):
    spec = SiteSpec(REGRESSION, "mpg")
    frames = (
        pd.DataFrame({"mpg": [20.0, 30.0], "hp": [100.0, None]}),
        pd.DataFrame({"hp": [80.0, 120.0, 60.0], "mpg": [25.0, 18.0, 35.0]}),
    )
    tables, _, schema = fitted(tmp_path, spec, frames)
    pooled = pd.concat(frames)
    assert schema.target == pytest.approx((pooled["mpg"].mean(), pooled["mpg"].std(ddof=0)))
    _, y = transform(tables[1], schema)
    assert y.dtype == np.float32
    assert y == pytest.approx(
        ((frames[1]["mpg"] - pooled["mpg"].mean()) / pooled["mpg"].std(ddof=0)).to_numpy(), rel=1e-6
    )


def test_hostile_facts_and_moments_are_refused(tmp_path):
    good = site_facts(table(tmp_path, "a.csv", A), SPEC)
    for bad in (
        {**good, "rows": -1},
        {**good, "rows": True},
        {**good, "columns": {}},
        {**good, "missing": {**good["missing"], "bill": 99}},
        {**good, "ranges": {"bill": [1.0, float("inf")]}},
        {**good, "categories": {**good["categories"], "sex": ["a", "a"]}},
        {**good, "secret": 1},
    ):
        with pytest.raises(SiteDataError, match="facts"):
            check_facts(bad, SPEC)
    _, agreement, _ = fitted(tmp_path)
    moments = site_moments(table(tmp_path, "a.csv", A), agreement.schema, np.arange(4))
    for bad in (
        {**moments, "rows": 10**6},
        {**moments, "numeric": {}},
        {**moments, "numeric": {"bill": [5.0, 1.0, 1.0]}},
        {**moments, "categories": {"sex": [1, 1]}},
    ):
        with pytest.raises(SiteDataError, match="moments"):
            check_moments(bad, agreement.schema, good)


def test_texts_of_a_column_are_each_values_text_and_keep_missing_values_missing():
    column = pd.Series([3.0, "a", np.nan, 3.5, "a", None, 7.0, "3"], dtype=object)
    got = texts(column)
    assert list(got.index) == list(column.index)
    for value, name in zip(column, got, strict=True):
        assert name == (None if pd.isna(value) else text(value))
