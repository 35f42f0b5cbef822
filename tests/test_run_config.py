"""Parsing and validation of the common run-config keys."""

import pytest

from tasks.errors import ConfigError
from tasks.run_config import RunSettings
from server_app.inprocess_grid import default_run_config, run_config


def test_defaults_parse_and_match_the_dataclass():
    settings = RunSettings.from_run_config(default_run_config())
    assert settings == RunSettings()


def test_ints_are_accepted_for_floats_and_family_keys_are_split():
    settings = RunSettings.from_run_config(run_config(**{"learning-rate": 1, "fedprox.mu": 2}))
    assert settings.learning_rate == 1.0 and settings.family("fedprox") == {"mu": 2}


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
    ],
)
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as err:
        RunSettings.from_run_config(run_config(**{key: value}))
    assert str(err.value).startswith(f"{key}={value!r} is not valid") and fragment in str(err.value)


def test_unknown_key_is_rejected_like_flower_does():
    with pytest.raises(ValueError, match="not present"):
        run_config(**{"no-such-key": 1})
