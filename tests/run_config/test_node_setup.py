"""A node's setup (settings, family table, local data, device, its own overrides) is built once per
run and node, not once per message (``client_app.setup``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from flwr.app import Context, RecordDict

from client_app import setup as node_setups
from client_app.setup import NodeSetup, clear_setups, node_setup
from run_config.common import RunSettings
from run_config.families import family_of
from tasks.errors import ConfigError
from testing.inprocess_grid import run_config
from tests.helpers import run_app


@pytest.fixture
def counted(monkeypatch):
    """Count every parse of the run config, of the family table, of the node's overrides and
    every load of its data, as the client's setup does them."""
    calls = Counter()

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    class CountedSettings:
        from_run_config = staticmethod(counting("settings", RunSettings.from_run_config))

    monkeypatch.setattr(node_setups, "RunSettings", CountedSettings)
    monkeypatch.setattr(node_setups, "local_data", counting("data", node_setups.local_data))
    counted_families = {}

    def counted_family(algorithm):
        family = family_of(algorithm)
        if family not in counted_families:
            counted_families[family] = replace(
                family,
                parse=counting("family", family.parse),
                node_overrides=counting("overrides", family.node_overrides),
            )
        return counted_families[family]

    monkeypatch.setattr(node_setups, "family_of", counted_family)
    monkeypatch.setattr(
        node_setups, "resolve_device", counting("device", node_setups.resolve_device)
    )
    clear_setups()
    yield calls
    clear_setups()


@pytest.mark.parametrize(
    "overrides",
    [
        {"algorithm": "fedfw", "task": "synthetic"},
        {
            "algorithm": "fedfun",
            "task": "wine",
            "fedfun.initial-steps": 20,
            "fedfun.local-steps": 5,
            "fedfun.penalty-samples": 20,
            "fedfun.hidden": "4",
        },
    ],
)
def test_a_run_parses_each_nodes_setup_once(tmp_path, counted, overrides):
    nodes = 3
    run = run_app(
        tmp_path, nodes, [{}, {}, {"device": "cpu"}], **{**overrides, "num-server-rounds": 3}
    )
    messages = Counter(m.metadata.dst_node_id for m in run.grid.down)
    assert min(messages.values()) >= 5  # query.node, train and evaluate rounds, ...
    assert all(row["failures"] == 0 for row in run.rows)
    assert counted == {
        "settings": nodes,
        "data": nodes,
        "family": nodes,
        "device": nodes,
        "overrides": nodes,
    }


def _context(run_id=1, node_id=7, node_config=None, **overrides) -> Context:
    return Context(
        run_id=run_id,
        node_id=node_id,
        state=RecordDict(),
        node_config={"partition-id": 0, "num-partitions": 2, **(node_config or {})},
        run_config=run_config(algorithm="fedavg", **overrides),
    )


def test_the_cache_key_is_the_run_the_node_and_both_configs(counted):
    first = node_setup(_context())
    assert node_setup(_context()) is first
    others = [
        node_setup(_context(run_id=2)),
        node_setup(_context(node_id=8)),
        node_setup(_context(seed=1)),
        node_setup(_context(node_config={"device": "cpu"})),
    ]
    assert len({id(s) for s in [first, *others]}) == 5
    assert counted["settings"] == 5


def test_what_fails_to_build_is_not_kept(counted):
    bad = Context(
        run_id=1,
        node_id=7,
        state=RecordDict(),
        node_config={},
        run_config=run_config(algorithm="fedavg"),
    )
    setup = node_setup(bad)
    for _ in range(2):
        with pytest.raises(ConfigError, match="node config lacks 'partition-id'"):
            _ = setup.data
    assert counted["data"] == 0  # partition_of fails before any data is loaded
    with pytest.raises(ConfigError, match="seed='x'"):
        node_setup(_context(seed="x"))
    with pytest.raises(ConfigError, match="seed='x'"):
        node_setup(_context(seed="x"))
    assert counted["settings"] == 3


def test_least_recently_used_setups_are_dropped(counted, monkeypatch):
    monkeypatch.setattr(node_setups, "MAX_SETUPS", 2)
    a, b = node_setup(_context(node_id=1)), node_setup(_context(node_id=2))
    assert node_setup(_context(node_id=1)) is a
    node_setup(_context(node_id=3))  # drops node 2's
    assert node_setup(_context(node_id=1)) is a
    assert node_setup(_context(node_id=2)) is not b


def test_a_setup_builds_what_a_message_used_to():
    settings = RunSettings.from_run_config(run_config(algorithm="fedfw", task="synthetic"))
    setup = NodeSetup(
        settings,
        {"partition-id": 1, "num-partitions": 3, "fedfw.constraint": "l2", "fedfw.radius": 2.0},
    )
    assert setup.data.partition_id == 1 and setup.data.num_partitions == 3
    assert setup.device.type in ("cpu", "cuda")
    assert setup.family.constraint.kind == "box" and setup.family.schedule.kind == "convex"
    assert (setup.overrides.kind, setup.overrides.radius) == ("l2", 2.0)
