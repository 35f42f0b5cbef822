"""The node's half of the sites' schema agreement (``task='site'``; the server's half is
``strategies.site_agreement``), for every family alike.

- ``query.facts``: the facts of the node's own file (``tasks.site_facts.site_facts``: no rows),
  with its partition id, and the row count of its test file if it has one.
- ``query.moments``: under the schema the server sends, the sums of the node's training rows
  (and its test file, if it has one, checked against the schema), as arrays into a secure sum
  when the server asks (``secure``: ``secure-aggregation``); or, when the server refuses
  the node, the reason, which the node logs. A resumed run sends the schema its checkpoint
  keeps, already fitted: the node keeps it as from a ``query.node`` (a resumed run does not ask
  its roster's nodes again) and sends no sums.
- every ``query.node`` of such a run carries the fitted schema: the node keeps it in its
  ``Context.state`` (which outlives the ClientApp process) and reads its data under it from then
  on (``agreed_schema``).

A file that cannot be used raises ``SiteDataError`` naming the file and the problem; Flower
answers the server with that message as the error reason (no traceback), and the server leaves
the node out.
"""

from __future__ import annotations

import json
from logging import WARNING

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.logger import log

from client_app.setup import NodeSetup, partition_of
from functions.protocol import (
    PARTITION_ID,
    QUERY_FACTS,
    QUERY_MOMENTS,
    SITE,
    SITE_ARRAYS,
    SITE_FACTS,
    SITE_MOMENTS,
    SITE_REFUSED,
    SITE_SCHEMA,
    SITE_SECURE,
)
from tasks.site_data import read_own, read_test, training_rows
from tasks.site_facts import site_facts
from tasks.site_files import SiteDataError, SiteTable
from tasks.site_moments import moment_arrays, site_moments
from tasks.site_schema import Schema, check_table


def _site_record(content: RecordDict) -> ConfigRecord:
    record = content.get(SITE)
    if not isinstance(record, ConfigRecord):
        raise SiteDataError(f"the server's message has no {SITE!r} ConfigRecord")
    return record


def _own_table(setup: NodeSetup) -> tuple[int, SiteTable]:
    """The node's partition id and its own training file."""
    partition_id, _ = partition_of(setup.node_config)
    return partition_id, read_own(setup.node_config, setup.settings.dataset_path, partition_id)


def describe_file(setup: NodeSetup, content: RecordDict, state: RecordDict) -> RecordDict:
    """``query.facts``: the partition id and the facts of the node's file."""
    partition_id, table = _own_table(setup)
    facts = site_facts(table, setup.settings.site)
    test_table = read_test(setup.node_config)
    if test_table is not None:
        facts["test-rows"] = test_table.rows
    return RecordDict(
        {
            SITE: ConfigRecord(
                {PARTITION_ID: partition_id, SITE_FACTS: json.dumps(facts, sort_keys=True)}
            )
        }
    )


def sum_rows(setup: NodeSetup, content: RecordDict, state: RecordDict) -> RecordDict:
    """``query.moments``: the sums of the training rows under the schema sent, or the refusal
    logged and acknowledged with an empty answer."""
    record = _site_record(content)
    if SITE_REFUSED in record:
        log(WARNING, "The server leaves this node out of the run: %s", record[SITE_REFUSED])
        return RecordDict()
    text = str(record.get(SITE_SCHEMA, ""))
    schema = Schema.from_json(text)
    test_table = read_test(setup.node_config)
    if test_table is not None:  # its columns, labels and categories must fit the schema too
        check_table(test_table, schema)
    if schema.fitted:  # a resumed run's: final, and no sums are needed
        _keep(state, text)
        return RecordDict()
    partition_id, table = _own_table(setup)
    train, _ = training_rows(
        table, setup.node_config, setup.site_share, partition_id, setup.settings.seed
    )
    moments = site_moments(table, schema, train)
    if record.get(SITE_SECURE) is True:  # into a secure sum: arrays the node's half masks
        arrays = moment_arrays(moments, schema)
        return RecordDict({SITE_ARRAYS: ArrayRecord({k: Array(v) for k, v in arrays.items()})})
    return RecordDict({SITE: ConfigRecord({SITE_MOMENTS: json.dumps(moments)})})


SITE_HANDLERS = {QUERY_FACTS: describe_file, QUERY_MOMENTS: sum_rows}


def _keep(state: RecordDict, text: str) -> None:
    """Keep a validated, fitted schema's JSON in the node's state."""
    state[SITE] = ConfigRecord({SITE_SCHEMA: text})


def agreed_schema(content: RecordDict, state: RecordDict) -> str:
    """The fitted schema's JSON: from this message (a ``query.node``: validated, then kept in
    the node's state), or from the state, where only a validated one is ever put (the node's
    setup decodes it once per schema, not once per message); ``SiteDataError`` when the node
    never received one (it was not admitted)."""
    record = content.get(SITE)
    if isinstance(record, ConfigRecord) and SITE_SCHEMA in record:
        text = str(record[SITE_SCHEMA])
        if not Schema.from_json(text).fitted:
            raise SiteDataError("the server sent a schema without its fitted transform")
        _keep(state, text)
        return text
    kept = state.get(SITE)
    if not isinstance(kept, ConfigRecord) or SITE_SCHEMA not in kept:
        raise SiteDataError(
            "this node holds no agreed schema: the server did not admit it to the run"
        )
    return str(kept[SITE_SCHEMA])
