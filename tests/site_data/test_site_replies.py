"""A hostile answer in the sites' schema agreement is a missing one: the ``query.facts`` reply of
one site has a declared field mutated (a count, a kind, a range, a category list, the partition
id, the record's kind, the JSON itself), and the server either accepts it as the valid facts it
still is or leaves the site out, agreeing exactly the schema of the honest sites; it never
fails."""

from __future__ import annotations

import copy
import json
import logging

import pytest
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_app.app import app as client_app
from functions.protocol import PARTITION_ID, QUERY_FACTS, SITE, SITE_FACTS
from run_config.common import RunSettings
from strategies.site_agreement import agree_sites
from tasks.schema_agreement import agree
from tasks.site_facts import check_facts, site_facts
from tasks.site_files import SiteDataError, read_site_file
from tasks.sites import write_sites
from testing.inprocess_grid import LocalGrid, run_config

HOSTILE = 2  # the partition whose facts are mutated
FIELDS = (
    "rows",
    "columns",
    "ranges",
    "scales",
    "missing",
    "categories",
    "test-rows",
    "label-counts",
    "extra",
)
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2 * 10**9),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.lists(st.integers(-2, 400), max_size=3),
    st.just({}),
)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("penguins")
    write_sites("penguins", folder)
    return run_config(
        **{
            "task": "site",
            "data.label": "species",
            "data.categorical": "sex",
            "dataset-path": f"{folder}/{{partition-id}}.csv",
        }
    )


@pytest.fixture(autouse=True)
def quiet(caplog):
    caplog.set_level(logging.ERROR, logger="flwr")  # every left-out site logs a warning


def mutated(facts: dict, draw) -> dict:
    """``facts`` with one declared field (or an entry inside it) replaced, removed or added."""
    facts = copy.deepcopy(facts)
    name = draw(st.sampled_from(FIELDS))
    if name in facts and isinstance(facts[name], dict) and facts[name] and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(facts[name])))
        facts[name][key] = draw(ANY_VALUE)
    elif name in facts and draw(st.booleans()):
        del facts[name]
    else:
        facts[name] = draw(ANY_VALUE)
    return facts


def hostile_client(change):
    """The real ClientApp, whose ``query.facts`` reply of partition ``HOSTILE`` goes through
    ``change`` (which returns the new content)."""

    def app(message: Message, context) -> Message:
        reply = client_app(message, context)
        if (
            message.metadata.message_type == QUERY_FACTS
            and context.node_config[PARTITION_ID] == HOSTILE
            and not reply.has_error()
        ):
            return Message(change(reply.content), reply_to=message)
        return reply

    return app


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_mutated_facts_reply_is_accepted_when_valid_and_otherwise_a_missing_one(config, data):
    spec = RunSettings.from_run_config(config).site
    honest = {
        p: site_facts(
            read_site_file(config["dataset-path"].replace("{partition-id}", str(p))), spec
        )
        for p in range(3)
    }
    kind = data.draw(st.sampled_from(["facts", "partition", "record", "json"]))
    facts = mutated(honest[HOSTILE], data.draw) if kind == "facts" else honest[HOSTILE]
    partition = data.draw(ANY_VALUE) if kind == "partition" else HOSTILE

    def change(content: RecordDict) -> RecordDict:
        if kind == "record":
            return RecordDict({SITE: MetricRecord({SITE_FACTS: 1.0})})
        text = "{not json" if kind == "json" else json.dumps(facts)
        values = {PARTITION_ID: partition, SITE_FACTS: text}
        try:
            return RecordDict({SITE: ConfigRecord(values)})
        except (TypeError, ValueError):  # a value no ConfigRecord holds: send it as text
            return RecordDict({SITE: ConfigRecord({**values, PARTITION_ID: str(partition)})})

    grid = LocalGrid(hostile_client(change), config, 3)
    node = grid.partition_node(HOSTILE)
    agreement = agree_sites(grid, RunSettings.from_run_config(config))
    try:
        valid = kind == "facts" and check_facts(json.loads(json.dumps(facts)), spec) is not None
    except SiteDataError:
        valid = False
    if kind == "partition":  # another partition's id: the roster's rule, the first node wins
        valid = type(partition) is int and partition >= 0 and partition not in (0, 1)
    if node in agreement.left_out and not valid:
        reason = agreement.left_out[node]
        # the reason says what was wrong with the answer, not only that it was unusable
        refused = "its query.facts answer was refused: "
        assert (
            reason.startswith(refused)
            and len(reason) > len(refused)
            or "is served by node" in reason
        ), reason
        expected = agree(spec, {p: honest[p] for p in range(2)}).schema
        assert [(c.name, c.categories) for c in agreement.schema.columns] == [
            (c.name, c.categories) for c in expected.columns
        ]
        assert agreement.schema.classes == expected.classes
        assert sorted(agreement.partitions.values()) == [0, 1]
    else:  # valid facts (a node may report any rows within bounds) are agreed like any
        assert valid, agreement.left_out
