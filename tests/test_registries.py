"""Both halves of every algorithm are registered under the same name and speak the same messages."""

from client_app.app import app as client_app
from client_app.site_data import SITE_HANDLERS
from client_app.registry import CLIENT_HALVES, message_types
from strategies.registry import ALGORITHMS


def test_server_and_client_name_the_same_algorithms():
    assert sorted(ALGORITHMS) == sorted(CLIENT_HALVES)


def test_the_client_half_answers_every_message_type_the_server_half_sends():
    for name, algorithm in ALGORITHMS.items():
        assert set(algorithm.message_types) == set(CLIENT_HALVES[name]), name


def test_the_client_app_dispatches_every_registered_message_type():
    # Flower keeps no public list; it files "train" as "train.default"
    registered = set(client_app._registered_funcs)  # noqa: SLF001
    expected = (*message_types(), *SITE_HANDLERS)  # and the sites' schema agreement
    assert {t if "." in t else f"{t}.default" for t in expected} == registered
