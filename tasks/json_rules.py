"""Checks of decoded JSON that came from the network, written as data: a validator is a tuple
of ``Rule``s (what must hold, and what to say when it does not), checked in order by one
function (``checked``), which names the first fault. The predicates here are the shapes those
rules are made of (whole numbers in a range, finite numbers, distinct texts, objects with
exactly their keys, maps of names to values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tasks.site_files import SiteDataError


@dataclass(frozen=True)
class Rule:
    """``holds(payload, *context)`` must be true; otherwise the fault is ``what`` (a text, or
    a function of the same arguments that says it)."""

    what: str | Callable[..., str]
    holds: Callable[..., bool]

    def fault(self, *args: Any) -> str:
        return self.what if isinstance(self.what, str) else self.what(*args)


def checked(payload: Any, rules: Iterable[Rule], prefix: str, *context: Any) -> Any:
    """``payload`` once every rule holds (in order, each may rely on the ones before it);
    ``SiteDataError("<prefix>: <fault>")`` for the first that does not."""
    for rule in rules:
        if not rule.holds(payload, *context):
            raise SiteDataError(f"{prefix}: {rule.fault(payload, *context)}")
    return payload


def finite(values: Iterable[Any]) -> bool:
    """Every value a finite int or float (a bool is neither)."""
    return all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )


def whole(value: Any, low: int, high: int) -> bool:
    """An int (not a bool) in [low, high]."""
    return type(value) is int and low <= value <= high


def distinct_texts(value: Any, most: int) -> bool:
    """A list of at most ``most`` distinct strings."""
    return (
        isinstance(value, list)
        and len(value) <= most
        and all(isinstance(v, str) for v in value)
        and len(set(value)) == len(value)
    )


def keys_exactly(value: Any, keys: set[str], optional: set[str] = frozenset()) -> bool:
    """An object whose keys are ``keys``, and any of ``optional``."""
    return isinstance(value, dict) and set(value) - set(optional) == set(keys)


def mapping(
    value: Any, names: Iterable[str] | None, item: Callable[[Any], bool], most: int = 10**9
) -> bool:
    """An object of at most ``most`` entries, its keys exactly ``names`` (None: any strings),
    each value passing ``item``."""
    return (
        isinstance(value, dict)
        and len(value) <= most
        and (
            set(value) == set(names)
            if names is not None
            else all(isinstance(k, str) for k in value)
        )
        and all(item(v) for v in value.values())
    )
