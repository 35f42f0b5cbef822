"""One site's statistics cannot ruin the federation: every node's moments are checked against the
facts it reported before they are used (counts within its rows, a mean inside its range, a
variance that values in that range can have), a poisoned one is refused naming the column and the
fault, and the honest sites' standardisation is what their sums alone give. What is only
implausible (a site in other units, a label no other site holds) is warned of, and refused under
``data.strict``. A property test draws facts and moments, honest and hostile."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pandas as pd
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_app.app import app as client_app
from functions.protocol import PARTITION_ID, QUERY_MOMENTS, SITE, SITE_MOMENTS
from tasks import site_files
from tasks.schema_agreement import agree
from tasks.site_facts import check_facts, site_facts
from tasks.site_files import SiteDataError, read_site_file
from tasks.site_moments import check_moments, site_moments, with_moments
from tasks.site_schema import CLASSIFICATION, REGRESSION, Schema, SiteSpec
from tasks.sites import write_sites
from tests.helpers import run_app

HOSTILE = 2
PENGUINS = {
    "task": "site",
    "data.label": "species",
    "data.categorical": "sex",
    "algorithm": "ffgb",
    "ffgb.learner": "tree",
    "num-server-rounds": 2,
}
SPEC = SiteSpec(CLASSIFICATION, "species", categorical=("sex",))


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


def facts_of(folder, partition: int, spec: SiteSpec = SPEC) -> dict:
    table = read_site_file(folder / f"{partition}.csv")
    return check_facts(json.loads(json.dumps(site_facts(table, spec))), spec)


def honest_moments(folder, partition: int, schema: Schema) -> dict:
    table = read_site_file(folder / f"{partition}.csv")
    return json.loads(json.dumps(site_moments(table, schema, np.arange(table.rows))))


def poisoned(moments: dict, column: str, triple) -> dict:
    return {**moments, "numeric": {**moments["numeric"], column: triple}}


MASS = "body_mass_g"
POISONS = [  # (the moments of body_mass_g given its honest [count, sum, sum of squares], fault)
    (lambda n, s, q: [n, 1e300, q], "mean 1.961e+298 outside the range [2048, 8192] it reported"),
    (
        lambda n, s, q: [n, s, 1e300],
        "variance 1.961e+298 outside [0, 9.437e+06], what values in "
        "the range [2048, 8192] it reported can have",
    ),
    (lambda n, s, q: [n, s * 1e6, q * 1e12], "mean 3.706e+09 outside the range [2048, 8192]"),
    (lambda n, s, q: [0, s, q], "sums 189025 and 7.10503e+08 over 0 values"),
    (lambda n, s, q: [n, s, s * s / n * 0.5], "variance -6.869e+06 outside [0, 9.437e+06]"),
    (lambda n, s, q: [n + 10**6, s, q], "a count of 1.00005e+06, not a whole number in [0, 51]"),
    (lambda n, s, q: [n + 0.5, s, q], "a count of 51.5, not a whole number"),
]


@pytest.mark.parametrize("poison, fault", POISONS)
def test_a_poisoned_numeric_sum_is_refused_naming_the_column_and_fault(penguins, poison, fault):
    facts = facts_of(penguins, HOSTILE)
    schema = agree(SPEC, {p: facts_of(penguins, p) for p in range(3)}).schema
    moments = honest_moments(penguins, HOSTILE, schema)
    assert check_moments(moments, schema, facts) is moments
    bad = poisoned(moments, MASS, poison(*moments["numeric"][MASS]))
    with pytest.raises(SiteDataError, match=f"moments of '{MASS}': ") as err:
        check_moments(bad, schema, facts)
    assert fault in str(err.value)


def test_a_poisoned_category_count_and_row_count_are_refused(penguins):
    facts = facts_of(penguins, HOSTILE)
    schema = agree(SPEC, {p: facts_of(penguins, p) for p in range(3)}).schema
    moments = honest_moments(penguins, HOSTILE, schema)
    with pytest.raises(SiteDataError, match="rows=53 not in"):
        check_moments({**moments, "rows": 53}, schema, facts)
    sex = moments["categories"]["sex"]
    with pytest.raises(SiteDataError, match="category counts of 'sex'"):
        check_moments({**moments, "categories": {"sex": [c + 100 for c in sex]}}, schema, facts)


def test_a_poisoned_regression_label_is_refused(tmp_path):
    write_sites("cars", tmp_path)
    spec = SiteSpec(REGRESSION, "Miles_per_Gallon")
    facts = {p: facts_of(tmp_path, p, spec) for p in range(3)}
    schema = agree(spec, facts).schema
    moments = honest_moments(tmp_path, 0, schema)
    count, first, second = moments["target"]
    for triple, fault in (
        ([count, first * 100, second * 1e4], "mean"),
        ([count, first, second * 50], "variance"),
        ([count, first, first * first / count * 0.9], "variance -"),
        ([count - 1, first, second], "a count other than its rows"),
    ):
        with pytest.raises(SiteDataError, match=fault):
            check_moments({**moments, "target": triple}, schema, facts[0])


def moments_client(change):
    """The real ClientApp, whose ``query.moments`` answer of partition ``HOSTILE`` goes through
    ``change``."""

    def app(message: Message, context) -> Message:
        reply = client_app(message, context)
        if (
            message.metadata.message_type == QUERY_MOMENTS
            and not reply.has_error()
            and context.node_config[PARTITION_ID] == HOSTILE
            and SITE in reply.content
        ):
            moments = change(json.loads(reply.content[SITE][SITE_MOMENTS]))
            return Message(
                RecordDict({SITE: ConfigRecord({SITE_MOMENTS: json.dumps(moments)})}),
                reply_to=message,
            )
        return reply

    return app


@pytest.mark.parametrize("poison, fault", POISONS[:3])
def test_the_poisoned_site_is_left_out_and_the_others_standardise_as_alone(
    tmp_path, penguins, poison, fault
):
    """The run of issue 35 (a sum of 1e300 made every node fail every round, at chance) now
    leaves the poisoned site out before round 1 and trains on the others' schema."""
    client = moments_client(lambda m: poisoned(m, MASS, poison(*m["numeric"][MASS])))
    run = run_app(
        tmp_path,
        3,
        client=client,
        **{**PENGUINS, "dataset-path": f"{penguins}/{{partition-id}}.csv"},
    )
    record = json.loads((run.out_dir / "config.json").read_text())["sites"]
    (reason,) = record["left-out"].values()
    assert reason.startswith(
        f"its query.moments answer was refused: moments of '{MASS}': " + fault.split(" ")[0]
    )  # its training rows' figures, then the range
    assert "the range [2048, 8192] it reported" in reason and record["partitions"] == [0, 1]
    honest = {p: facts_of(penguins, p) for p in range(2)}  # what the two alone agree
    schema = agree(SPEC, honest).schema
    # their training rows: the share the node holds out for testing is not summed
    alone = with_moments(schema, {p: moments_from_run(run, p, schema) for p in range(2)})
    mass = next(c for c in Schema.from_json(json.dumps(record["schema"])).columns if c.name == MASS)
    assert (mass.mean, mass.std) == next((c.mean, c.std) for c in alone.columns if c.name == MASS)
    assert run.rows[-1]["failures"] == 0 and run.rows[-1]["test_accuracy"] > 0.8


def moments_from_run(run, partition: int, schema: Schema) -> dict:
    """The moments the node of ``partition`` sent in ``run`` (its answer to query.moments)."""
    from client_app.setup import node_setup
    from tasks.site_data import read_own, training_rows

    node = run.grid.partition_node(partition)
    context = run.grid.contexts[node]
    setup = node_setup(context)
    table = read_own(setup.node_config, setup.settings.dataset_path, partition)
    rows, _ = training_rows(
        table, setup.node_config, setup.site_share, partition, setup.settings.seed
    )
    return json.loads(json.dumps(site_moments(table, schema, rows)))


def sites_of(run) -> dict:
    return json.loads((run.out_dir / "config.json").read_text())["sites"]


@pytest.fixture
def mixed(tmp_path, penguins):
    """The penguins dealt to three sites at random: every site holds every species (by island,
    two species live on one island only, which ``data.strict`` refuses too)."""
    pooled = pd.concat([pd.read_csv(penguins / f"{p}.csv") for p in range(3)])
    pooled = pooled.sample(frac=1.0, random_state=0)
    folder = tmp_path / "mixed"
    folder.mkdir()
    for p in range(3):
        pooled.iloc[p::3].to_csv(folder / f"{p}.csv", index=False)
    return folder


@pytest.fixture
def milligrams(tmp_path, mixed):
    """Those sites, partition 2 weighing its birds in milligrams."""
    frame = pd.read_csv(mixed / f"{HOSTILE}.csv")
    frame[MASS] = frame[MASS] * 1e6
    frame.to_csv(mixed / f"{HOSTILE}.csv", index=False)
    return mixed


def test_a_site_in_other_units_is_warned_of_and_refused_under_strict(tmp_path, milligrams, caplog):
    caplog.set_level(logging.WARNING, logger="flwr")
    config = {
        **PENGUINS,
        "dataset-path": f"{milligrams}/{{partition-id}}.csv",
        "num-server-rounds": 1,
    }
    warned = sites_of(run_app(tmp_path / "warn", 3, **config))
    mass = [w for w in warned["warnings"] if MASS in w]
    assert (
        len(mass) == 1
        and "(partition 2): column 'body_mass_g' has median |value| 3.037e+09 "
        "here against 5793 at the other sites (their median), more than "
        "data.scale-factor=1000 times apart: another unit?"
        in mass[0]
    )
    assert warned["partitions"] == [0, 1, 2] and mass[0] in caplog.text
    strict = sites_of(run_app(tmp_path / "strict", 3, **config, **{"data.strict": True}))
    assert strict["partitions"] == [0, 1]
    (reason,) = strict["left-out"].values()
    assert "column 'body_mass_g' has median |value|" in reason and "data.strict=true" in reason
    relaxed = sites_of(run_app(tmp_path / "relaxed", 3, **config, **{"data.scale-factor": 1e7}))
    assert not [w for w in relaxed["warnings"] if MASS in w]


def test_a_label_only_one_site_holds_is_warned_of_and_refused_under_strict(tmp_path, mixed):
    """Three sites that all hold the three species, the third also 10 rows of a fourth."""
    folder = mixed
    frame = pd.read_csv(folder / f"{HOSTILE}.csv")
    frame.loc[frame.index[:10], "species"] = "Emperor"
    frame.to_csv(folder / f"{HOSTILE}.csv", index=False)
    config = {**PENGUINS, "dataset-path": f"{folder}/{{partition-id}}.csv", "num-server-rounds": 1}
    warned = sites_of(run_app(tmp_path / "warn", 3, **config))
    (warning,) = warned["warnings"]
    assert warning.endswith(
        "(partition 2): the label 'Emperor' is held by no other site (it "
        "becomes a class for every site)"
    )
    assert warned["schema"]["classes"] == ["Adelie", "Chinstrap", "Emperor", "Gentoo"]
    strict = sites_of(run_app(tmp_path / "strict", 3, **config, **{"data.strict": True}))
    assert strict["schema"]["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    assert strict["partitions"] == [0, 1] and strict["warnings"] == []
    (reason,) = strict["left-out"].values()
    assert "'Emperor' is held by no other site" in reason and "data.strict=true" in reason


# -- the property: refused, or finite positive scales ------------------------------------------
BIG = st.floats(-1e300, 1e300, allow_nan=False) | st.sampled_from(
    [0.0, -0.0, 1e-300, 5e-324, 1e100, -1e100, 1e200, math.inf, -math.inf, math.nan]
)


@st.composite
def site(draw, hostile: bool):
    """One site's checked facts and its moments for a numeric column x: honest ones from drawn
    values, or with the triple (and the rows) drawn freely."""
    values = draw(
        st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=30)
    )
    frame = pd.DataFrame({"x": values, "y": np.arange(len(values), dtype=float)})
    facts = {
        "rows": len(values),
        "columns": {"x": "numeric", "y": "numeric"},
        "ranges": {"x": [min(values), max(values)], "y": [0.0, len(values) - 1.0]},
        "scales": {n: float(np.median(np.abs(frame[n]))) for n in ("x", "y")},
        "missing": {"x": 0, "y": 0},
        "categories": {},
    }
    array = frame["x"].to_numpy(np.float64)
    triple = [float(len(values)), float(array.sum()), float(np.square(array).sum())]
    target = [float(len(values)), float(frame["y"].sum()), float(np.square(frame["y"]).sum())]
    moments = {"rows": len(values), "numeric": {"x": triple}, "categories": {}, "target": target}
    if hostile:
        field = draw(st.sampled_from(["x", "target", "rows"]))
        drawn = [draw(st.integers(-3, 100) | st.floats(-5, 100)), draw(BIG), draw(BIG)]
        if field == "rows":
            moments["rows"] = draw(st.integers(-3, 100))
        elif field == "x":
            moments["numeric"] = {"x": drawn}
        else:
            moments["target"] = drawn
    return facts, moments


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sites=st.lists(st.booleans().flatmap(site), min_size=1, max_size=4))
def test_the_agreement_refuses_a_node_or_gives_finite_positive_scales(sites):
    spec = SiteSpec(REGRESSION, "y")
    facts = {n: check_facts(json.loads(json.dumps(f)), spec) for n, (f, _) in enumerate(sites)}
    schema = agree(spec, facts).schema
    accepted = {}
    for node, (_, moments) in enumerate(sites):
        try:
            accepted[node] = check_moments(moments, schema, facts[node])
        except SiteDataError as err:
            assert str(err).startswith("moments")
    if accepted:
        fitted = with_moments(schema, accepted)
        for column in fitted.columns:
            assert math.isfinite(column.mean) and math.isfinite(column.std) and column.std > 0
            if sum(accepted[n]["numeric"][column.name][0] for n in accepted):  # any value
                low = min(facts[n]["ranges"][column.name][0] for n in accepted)
                high = max(facts[n]["ranges"][column.name][1] for n in accepted)
                assert low - 1e-6 * abs(low) - 1e-9 <= column.mean <= high + 1e-6 * abs(high) + 1e-9
        assert all(math.isfinite(v) for v in fitted.target) and fitted.target[1] > 0
