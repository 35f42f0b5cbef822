"""The one validator of decoded JSON (``tasks.json_rules``): rules in order, the first fault
named, and the shapes' edges (a bool is no number, keys exactly, distinct texts)."""

from __future__ import annotations

import math

import pytest

from tasks.json_rules import Rule, checked, distinct_texts, finite, keys_exactly, mapping, whole
from tasks.site_files import SiteDataError

RULES = (
    Rule("its keys", lambda p: keys_exactly(p, {"n", "names"}, {"note"})),
    Rule(lambda p: f"n={p['n']!r} not in [1, 9]", lambda p: whole(p["n"], 1, 9)),
    Rule("names", lambda p: mapping(p["names"], None, lambda v: distinct_texts(v, 2), most=p["n"])),
)


def test_a_payload_that_keeps_every_rule_is_returned_as_it_is():
    payload = {"n": 2, "names": {"a": ["x", "y"]}, "note": "optional"}
    assert checked(payload, RULES, "facts") is payload


@pytest.mark.parametrize(
    "payload, fault",
    [
        ([1], "facts: its keys"),
        ({"n": 1}, "facts: its keys"),
        ({"n": True, "names": {}}, "facts: n=True not in [1, 9]"),  # a bool is not an int
        ({"n": 10, "names": {}}, "facts: n=10 not in [1, 9]"),
        ({"n": 1, "names": {"a": ["x", "x"]}}, "facts: names"),  # not distinct
        ({"n": 1, "names": {"a": [], "b": []}}, "facts: names"),  # more than n entries
        ({"n": 1, "names": {"a": ["x", "y", "z"]}}, "facts: names"),  # more than 2 texts
    ],
)
def test_the_first_broken_rule_is_named(payload, fault):
    with pytest.raises(SiteDataError) as err:
        checked(payload, RULES, "facts")
    assert str(err.value) == fault


def test_finite_numbers_are_ints_and_floats_but_no_bool_nor_inf():
    assert finite([0, 1.5, -3])
    assert not finite([True]) and not finite([math.inf]) and not finite(["1"])
