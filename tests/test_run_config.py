"""Parsing and validation of the common run-config keys."""

import pytest

from run_config.common import RunSettings
from run_config.declared import declared_defaults, parse_overrides, with_overrides
from tasks.errors import ConfigError
from testing.inprocess_grid import run_config


def test_defaults_parse_and_match_the_dataclass():
    settings = RunSettings.from_run_config(declared_defaults())
    assert settings == RunSettings()


def test_ints_are_accepted_for_floats():
    settings = RunSettings.from_run_config(run_config(**{"learning-rate": 1, "fedprox.mu": 2}))
    assert settings.learning_rate == 1.0 and settings.fedprox_mu == 2.0


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num-server-rounds", 0, ">= 1"),
        ("partitioning.s", -0.1, "in [0, 1]"),
        ("partitioning.alpha", 0.0, "> 0"),
        ("fraction-train", 0.0, "in (0, 1]"),
        ("batch-size", 0, ">= 1"),
        ("learning-rate", -1.0, "> 0"),
        ("seed", "x", "of type int"),
        ("central-evaluation", 1, "of type bool"),
        ("node-partitions", "12:0,x:1", "NODE_ID:PARTITION_ID pairs"),
        ("node-partitions", "12:0,12:1", "node 12 is listed twice"),
        ("image-scaling", "standard", "one of"),
        ("partitioning.local-test", 1.0, "in [0, 1)"),
    ],
)
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as err:
        RunSettings.from_run_config(run_config(**{key: value}))
    assert str(err.value).startswith(f"{key}={value!r} is not valid") and fragment in str(err.value)


@pytest.mark.parametrize(("key", "fragment"), [
    ("num-server-round", "did you mean 'num-server-rounds'?"),
    ("fedfw.raduis", "did you mean 'fedfw.radius'"),
    ("zzzz", "see the run-configuration table in README.md"),
])
def test_an_unknown_key_names_the_closest_declared_one(key, fragment):
    with pytest.raises(ConfigError) as err:
        with_overrides({key: 1})
    message = str(err.value)
    assert message.startswith(f"{key!r} is not a run-config key; ") and fragment in message


def test_overrides_are_parsed_as_flower_parses_them():
    assert parse_overrides("algorithm='fedfw' num-server-rounds=3 fedfw.radius=2.5") == {
        "algorithm": "fedfw", "num-server-rounds": 3, "fedfw.radius": 2.5}
    assert parse_overrides("  ") == {}
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_overrides("algorithm=fedfw")  # a bare word is not a TOML value


def test_node_partitions_parse_to_a_map():
    settings = RunSettings.from_run_config(run_config(**{
        "node-partitions": "9223372036854776785:0, 12:3"}))
    assert settings.pinned_partitions == {9223372036854776785: 0, 12: 3}
    assert RunSettings.from_run_config(run_config()).pinned_partitions == {}
