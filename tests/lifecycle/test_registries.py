"""Every family is registered on both halves under its one object, and they speak the same
messages."""

import inspect
import re
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest

from client_app.app import app as client_app
from client_app.job import ClientJob
from client_app.registry import CLIENT_HALVES, message_types
from client_app.site_data import SITE_HANDLERS
from functions.secure_sum import GROUP
from functions.secure_sum import STAGES as SECURE_SUM_STAGES
from run_config.families import FAMILIES, algorithm_names, family_of
from strategies.registry import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]


def test_the_catalogue_and_both_registries_hold_the_same_family_objects():
    assert list(STRATEGIES) == list(FAMILIES) == list(CLIENT_HALVES)


def test_every_algorithm_name_belongs_to_one_family():
    names = algorithm_names()
    assert len(names) == len(set(names))
    assert all(name in family_of(name).names for name in names)


def test_the_client_half_answers_every_message_type_the_family_declares():
    for family in FAMILIES:
        assert set(family.message_types) == set(CLIENT_HALVES[family]), family.name


def test_the_client_app_dispatches_every_registered_message_type():
    # Flower keeps no public list; it files "train" as "train.default"
    registered = set(client_app._registered_funcs)
    # and the sites' schema agreement, the stages of a secure sum and a relay's group key
    expected = (*message_types(), *SITE_HANDLERS, *SECURE_SUM_STAGES, GROUP)
    assert {t if "." in t else f"{t}.default" for t in expected} == registered


def _job_type(procedure):
    return get_type_hints(procedure)["job"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_procedure_receives_its_familys_typed_settings(family):
    """A procedure that reads ``job.family`` or ``job.overrides`` is typed ``ClientJob[S, N]``
    with its family's own types (those ``parse`` and ``node_overrides`` return), so none
    re-annotates them; a shared one (``describe_node``) reads neither."""
    settings = get_type_hints(family.parse)["return"]
    overrides = get_type_hints(family.node_overrides)["return"]
    for message_type, procedure in CLIENT_HALVES[family].items():
        hint = _job_type(procedure)
        if get_args(hint):
            assert get_origin(hint) is ClientJob, (family.name, message_type)
            assert get_args(hint) == (settings, overrides), (family.name, message_type)
            assert Any not in get_args(hint)
        else:
            source = inspect.getsource(procedure)
            assert "job.family" not in source and "job.overrides" not in source, message_type


def test_no_client_module_retypes_the_family_settings():
    for path in sorted((ROOT / "client_app").glob("*.py")):
        text = path.read_text()
        assert not re.search(r"\w+: [\w\[\], |.]+ = job\.(family|overrides)\b", text), path.name
        assert "-> Any" not in text, path.name
