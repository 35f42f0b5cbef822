"""Parsing and validation of the common run-config keys, and which family tables a run parses."""

import pytest

from run_config.common import RunSettings
from run_config.declared import declared_defaults, parse_overrides, with_overrides
from run_config.families import COMMON, algorithm_names, family_of, family_settings, validate_tables
from server_app.app import InvalidRunConfig
from server_app.preflight import check, main
from tasks.errors import ConfigError
from testing.inprocess_grid import run_config
from tests.helpers import all_keys, run_app


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
        ("learning-rate", -1.0, ">= 0 (0: the task's)"),
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


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("num-server-round", "did you mean 'num-server-rounds'?"),
        ("fedfw.raduis", "did you mean 'fedfw.radius'"),
        ("zzzz", "see the run-configuration reference in docs/configuration.md"),
    ],
)
def test_an_unknown_key_names_the_closest_declared_one(key, fragment):
    with pytest.raises(ConfigError) as err:
        with_overrides({key: 1})
    message = str(err.value)
    assert message.startswith(f"{key!r} is not a run-config key; ") and fragment in message


def test_overrides_are_parsed_as_flower_parses_them():
    assert parse_overrides("algorithm='fedfw' num-server-rounds=3 fedfw.radius=2.5") == {
        "algorithm": "fedfw",
        "num-server-rounds": 3,
        "fedfw.radius": 2.5,
    }
    assert parse_overrides("  ") == {}
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_overrides("algorithm=fedfw")  # a bare word is not a TOML value


def test_node_partitions_parse_to_a_map():
    settings = RunSettings.from_run_config(
        run_config(**{"node-partitions": "9223372036854776785:0, 12:3"})
    )
    assert settings.pinned_partitions == {9223372036854776785: 0, 12: 3}
    assert RunSettings.from_run_config(run_config()).pinned_partitions == {}


# --- only the chosen algorithm's family tables are parsed (run_config/families.py) ---


def _bad(key):
    """A value of another type, or one its check refuses (None: the key takes any string)."""
    return "not-a-value" if key.kind is not str or key.check is not None else None


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_only_the_chosen_familys_tables_are_parsed(algorithm):
    """Every key outside the common keys and the algorithm's own tables holds a bad value: the
    family still parses, to what the defaults give (its tables list every key it reads), and
    the run is refused naming each of those keys as having no effect."""
    own = {key.name for t in (COMMON, *family_of(algorithm).tables_of(algorithm)) for key in t.keys}
    config = run_config(algorithm=algorithm)
    expected = family_settings(RunSettings.from_run_config(config))
    others = [key.name for key in all_keys() if key.name not in own and _bad(key) is not None]
    for name in others:
        config[name] = _bad(next(k for k in all_keys() if k.name == name))
    settings = RunSettings.from_run_config(config)
    assert repr(family_settings(settings)) == repr(expected)
    with pytest.raises(ConfigError) as err:
        validate_tables(settings)
    assert [f"{name}=" in str(err.value) for name in others] == [True] * len(others)


@pytest.mark.parametrize(
    ("algorithm", "override", "fragment"),
    [
        ("ffgb", "ffgb.hidden=0", "ffgb.hidden=0 is not valid; it must be in [1, 4096]"),
        ("ffgb-l", "ffgb.learner='tree'", "ffgb.learner='tree'"),
        (
            "fedfw",
            "fedfw.radius=-1.0",
            "fedfw.radius=-1.0 is not valid; it must be finite and >= 0",
        ),
        ("feddr", "fedfw.scope='row'", "fedfw.scope='row' is not valid; allowed values"),
        ("fedavg-proj", "fedfw.constraint='l3'", "fedfw.constraint='l3' is not valid"),
        ("feddr", "feddr.alpha=2.0", "feddr.alpha=2.0 is not valid; it must be in (0, 2)"),
        ("fedfun", "fedfun.hidden='0'", "fedfun.hidden='0' is not valid"),
        ("psr", "fedfun.momentum=1.0", "fedfun.momentum=1.0 is not valid; it must be in [0, 1)"),
    ],
)
def test_a_bad_value_in_the_chosen_familys_table_is_refused(algorithm, override, fragment):
    with pytest.raises(ConfigError) as err:
        check(f"algorithm='{algorithm}' {override}", 2)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("algorithm", "override", "readers"),
    [
        ("fedavg", "ffgb.hidden=5", "it is read only by ffgb, ffgb-c, ffgb-l"),
        (
            "ffgb",
            "fedfw.constraint='l2'",
            "it is read only by fedavg-proj, fedfw, fedfw-plus, fedfw-sto, feddr",
        ),
        ("fedfw", "feddr.eta=0.5", "it is read only by feddr"),
        (
            "fedxgb-cyclic",
            "fraction-train=0.5",
            "it is read only by fedavg, fedprox, fedavg-proj, ffgb, ffgb-c, ffgb-l, fedxgb-bagging",
        ),
        ("ffgb", "learning-rate=0.1", "it is read only by fedavg, fedprox, fedavg-proj"),
        ("fedavg", "fedprox.mu=0.1", "it is read only by fedprox"),
        ("fedfun", "model='mclr'", "it is read only by fedavg, fedprox, fedavg-proj, fedfw"),
    ],
)
def test_another_familys_key_is_refused_naming_who_reads_it(algorithm, override, readers):
    with pytest.raises(ConfigError) as err:
        check(f"algorithm='{algorithm}' num-server-rounds=2 {override}", 2)
    assert str(err.value).startswith(f"{override.split('=')[0]}=")
    assert f"has no effect with algorithm='{algorithm}': {readers}" in str(err.value)
    with pytest.raises(ConfigError, match="'ffgb.hiden' is not a run-config key"):
        check(f"algorithm='{algorithm}' ffgb.hiden=1", 2)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        (
            "dataset-path='sites/{partition-id}.csv' data.label='species'",
            "data.label='species' has no effect in this run: it is read only with task='site', and "
            "the run has task='digits'; dataset-path='sites/{partition-id}.csv' has no effect",
        ),
        ("server-test-path='t.csv'", "server-test-path='t.csv' has no effect in this run"),
        ("synthetic.alpha=0.5", "read only with task='synthetic', and the run has task='digits'"),
        (
            "partitioning.alpha=0.1",
            "read only with partitioning='dirichlet', and the run has partitioning='iid'",
        ),
        (
            "partitioning.labels-per-client=2",
            "read only with partitioning='labels-per-client' or partitioning='shifted-labels'",
        ),
        (
            "image-scaling='centred'",
            "read only with task='mnist-5k' or task='mnist' or task='cifar10'",
        ),
        (
            "task='site' data.label='y' partitioning='dirichlet'",
            "partitioning='dirichlet' has no effect in this run: it is read only with task other "
            "than 'site', and the run has task='site'",
        ),
    ],
)
def test_a_key_whose_condition_does_not_hold_is_refused(override, fragment):
    with pytest.raises(ConfigError) as err:
        check(f"algorithm='ffgb' {override}", 2)
    assert fragment in str(err.value)


def test_a_key_given_its_default_or_under_its_condition_counts():
    assert check("algorithm='ffgb' data.label='' learning-rate=0.0 fedfw.radius=0.0", 2)
    assert check("algorithm='fedprox' fedprox.mu=0.1 learning-rate=0.1 model='mclr'", 2)
    assert check("algorithm='ffgb' partitioning='dirichlet' \"partitioning.alpha\"=0.1", 2)
    with pytest.raises(
        ConfigError,
        match=r"TOML reads partitioning=\.\.\. and "
        r"partitioning.alpha=\.\.\. as a value and a table",
    ):
        check("algorithm='ffgb' partitioning='dirichlet' partitioning.alpha=0.1", 2)
    assert check("algorithm='ffgb' task='synthetic' synthetic.alpha=0.5", 2)


def test_preflight_exits_2_naming_the_key(capsys):
    assert main(["--nodes", "2", "algorithm='ffgb' ffgb.hidden=0"]) == 2
    assert "Invalid run config: ffgb.hidden=0 is not valid" in capsys.readouterr().err
    assert main(["--nodes", "2", "algorithm='fedavg' ffgb.hidden=0"]) == 2
    assert "ffgb.hidden=0 has no effect with algorithm='fedavg'" in capsys.readouterr().err


def test_the_serverapp_refuses_site_keys_without_the_site_task(tmp_path):
    """The run of issue 35: a site's keys without task='site' trained on the bundled digits set
    and reported success; the ServerApp now stops it before the first message."""
    with pytest.raises(
        InvalidRunConfig,
        match="dataset-path='sites/{partition-id}.csv' has no "
        "effect in this run: it is read only with task='site'",
    ):
        run_app(
            tmp_path,
            3,
            **{
                "algorithm": "ffgb",
                "ffgb.learner": "tree",
                "dataset-path": "sites/{partition-id}.csv",
                "data.label": "species",
                "server-test-path": "sites/test.csv",
            },
        )
    assert not (tmp_path / "job" / "metrics.json").exists()


@pytest.mark.parametrize(
    ("algorithm", "task", "eta0"),
    [
        ("ffgb", "digits", 10.0),
        ("ffgb", "diabetes", 0.5),
        ("ffgb-c", "lipschitz", 0.5),
        ("ffgb-l", "lipschitz", 1.0),
        ("ffgb-l", "diabetes", 1.0),
    ],
)
def test_ffgbs_auto_step_follows_the_loss(algorithm, task, eta0):
    """The authors' 10 for cross-entropy, 0.5 for the square loss (10 diverged on diabetes),
    FFGB.L's 1 whatever the task."""
    from run_config.ffgb import ffgb_settings

    settings = RunSettings.from_run_config(run_config(algorithm=algorithm, task=task))
    assert ffgb_settings(settings).steps.eta0 == eta0
