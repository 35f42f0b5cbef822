"""Parsing and validation of the common run-config keys, and which family tables a run parses."""

import pytest

from run_config.common import RunSettings
from run_config.declared import declared_defaults, parse_overrides, with_overrides
from run_config.tables import (
    COMMON,
    FAMILIES,
    all_keys,
    family_of,
    family_settings,
    validate_tables,
)
from server_app.preflight import check, main
from strategies.registry import ALGORITHMS
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
    ("zzzz", "see the run-configuration reference in docs/configuration.md"),
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


# --- only the chosen algorithm's family tables are parsed (run_config/tables.py) ---

def test_every_registered_algorithm_names_its_family():
    assert sorted(FAMILIES) == sorted(ALGORITHMS)


def _bad(key):
    """A value of another type, or one its check refuses (None: the key takes any string)."""
    return "not-a-value" if key.kind is not str or key.check is not None else None


@pytest.mark.parametrize("algorithm", sorted(FAMILIES))
def test_only_the_chosen_familys_tables_are_parsed(algorithm):
    """Every key outside the common keys and the algorithm's own tables holds a bad value: the
    family still parses, to what the defaults give (its tables list every key it reads)."""
    own = {key.name for table in (COMMON, *family_of(algorithm).tables) for key in table.keys}
    config = run_config(algorithm=algorithm)
    expected = family_settings(RunSettings.from_run_config(config))
    for key in all_keys():
        if key.name not in own and _bad(key) is not None:
            config[key.name] = _bad(key)
    settings = RunSettings.from_run_config(config)
    validate_tables(settings)
    assert repr(family_settings(settings)) == repr(expected)


@pytest.mark.parametrize(("algorithm", "override", "fragment"), [
    ("ffgb", "ffgb.hidden=0", "ffgb.hidden=0 is not valid; it must be in [1, 4096]"),
    ("ffgb-l", "ffgb.learner='tree'", "ffgb.learner='tree'"),
    ("fedfw", "fedfw.radius=-1.0", "fedfw.radius=-1.0 is not valid; it must be finite and > 0"),
    ("feddr", "fedfw.scope='row'", "fedfw.scope='row' is not valid; allowed values"),
    ("fedavg-proj", "fedfw.constraint='l3'", "fedfw.constraint='l3' is not valid"),
    ("feddr", "feddr.alpha=2.0", "feddr.alpha=2.0 is not valid; it must be in (0, 2)"),
    ("fedfun", "fedfun.hidden='0'", "fedfun.hidden='0' is not valid"),
    ("psr", "fedfun.momentum=1.0", "fedfun.momentum=1.0 is not valid; it must be in [0, 1)"),
])
def test_a_bad_value_in_the_chosen_familys_table_is_refused(algorithm, override, fragment):
    with pytest.raises(ConfigError) as err:
        check(f"algorithm='{algorithm}' {override}", 2)
    assert fragment in str(err.value)


@pytest.mark.parametrize(("algorithm", "override"), [
    ("fedavg", "ffgb.hidden=0 fedfw.radius=-1.0 feddr.alpha=2.0 fedfun.hidden='0'"),
    ("ffgb", "fedfw.constraint='l3' fedfun.topology='circle'"),
    ("fedfw", "ffgb.learner='nope' feddr.eta=0.0"),
    ("fedfun", "ffgb.hidden='wide' fedfw.schedule='fast'"),
])
def test_another_familys_table_is_not_parsed_but_its_keys_must_be_declared(algorithm, override):
    assert check(f"algorithm='{algorithm}' num-server-rounds=2 {override}", 2).startswith(
        "run config OK")
    with pytest.raises(ConfigError, match="'ffgb.hiden' is not a run-config key"):
        check(f"algorithm='{algorithm}' ffgb.hiden=1", 2)


def test_preflight_exits_2_naming_the_key(capsys):
    assert main(["--nodes", "2", "algorithm='ffgb' ffgb.hidden=0"]) == 2
    assert "Invalid run config: ffgb.hidden=0 is not valid" in capsys.readouterr().err
    assert main(["--nodes", "2", "algorithm='fedavg' ffgb.hidden=0"]) == 0
