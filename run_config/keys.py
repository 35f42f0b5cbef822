"""Run-config keys declared once: name, type, default, check and one line of help.

Each family module declares its keys as a module-level tuple of ``Key`` (``COMMON_KEYS`` in
``run_config.common``, ``FFGB_KEYS`` in ``run_config.ffgb``, ...). ``read_keys`` reads and checks a
table from a run config; ``run_config.reference`` writes the ``[tool.flwr.app.config]`` table of
``pyproject.toml`` and the key reference of docs/configuration.md from the same tuples. As in
scikit-learn's declarative parameter validation, a key's type and range live beside its default;
what needs several keys at once (``fedfun.gamma`` > 0 when ``fedfun.lambda`` is 0) stays code in
the family's parser, after the per-key checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from tasks.errors import ConfigError

Scalar = int | float | str | bool
KINDS = (bool, int, float, str)  # the value types of a Flower run config


def read_key(raw: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """Read ``key`` as ``kind`` (ints are accepted for floats); ConfigError names the key."""
    value = raw.get(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError.bound(key, value, f"of type {kind.__name__}")
    return value


def require(condition: bool, key: str, value: object, requirement: str) -> None:
    """Raise a one-line ConfigError for ``key`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError.bound(key, value, requirement)


@dataclass(frozen=True)
class Check:
    """A per-key rule: ``ok(value)``, or ``<key>=<value> is not valid; it must be <requirement>``"""

    requirement: str
    ok: Callable[[Any], bool]

    def __call__(self, key: str, value: Any) -> None:
        require(self.ok(value), key, value, self.requirement)


@dataclass(frozen=True)
class OneOf:
    """A choice: ``<key>=<value> is not valid; allowed values: a, b, c``."""

    allowed: tuple[Scalar, ...]

    def __call__(self, key: str, value: Any) -> None:
        if value not in self.allowed:
            raise ConfigError.choice(key, value, self.allowed)


def _with(text: str, note: str) -> str:
    return f"{text} {note}" if note else text


def at_least(low: float, note: str = "") -> Check:
    """value >= low."""
    return Check(_with(f">= {low}", note), lambda v: v >= low)


def above(low: float, note: str = "") -> Check:
    """value > low."""
    return Check(_with(f"> {low}", note), lambda v: v > low)


def finite_at_least(low: float, note: str = "") -> Check:
    """low <= value < inf."""
    return Check(_with(f"finite and >= {low}", note), lambda v: low <= v < math.inf)


def finite_above(low: float, note: str = "") -> Check:
    """low < value < inf."""
    return Check(_with(f"finite and > {low}", note), lambda v: low < v < math.inf)


def within(low: float, high: float, ends: str = "[]", note: str = "") -> Check:
    """value in the interval written ``ends``: ``[]``, ``(]``, ``[)`` or ``()``."""
    left = (lambda v: low <= v) if ends[0] == "[" else (lambda v: low < v)
    right = (lambda v: v <= high) if ends[1] == "]" else (lambda v: v < high)
    return Check(_with(f"in {ends[0]}{low}, {high}{ends[1]}", note), lambda v: left(v) and right(v))


@dataclass(frozen=True)
class When:
    """Where a key has an effect: only when the common key ``on`` has one of ``values`` (with
    ``unless``: none of them). A key given another value elsewhere is refused
    (``run_config.families.inert_keys``): it would change nothing, silently."""

    on: str
    values: tuple[Scalar, ...]
    unless: bool = False

    def holds(self, common: Mapping[str, Any]) -> bool:
        """Whether the key counts, given the run's common keys ({name: typed value})."""
        return (common[self.on] in self.values) != self.unless

    @property
    def text(self) -> str:
        """``task='site'``, ``task other than 'site'``."""
        values = " or ".join(repr(v) for v in self.values)
        return (
            f"{self.on} other than {values}"
            if self.unless
            else " or ".join(f"{self.on}={v!r}" for v in self.values)
        )


@dataclass(frozen=True)
class Key:
    """One run-config key: its name as in ``--run-config``, type, default, per-key check (None:
    any value of the type) and one line of help for ``pyproject.toml`` and docs/configuration.md.

    ``field`` names the settings-dataclass field the key fills (``build``); empty: the name's
    last part with ``_`` for ``-`` (``ffgb.tree-depth`` fills ``tree_depth``). ``when``: the
    common key's values under which it has an effect (None: whenever its table is read)."""

    name: str
    kind: type
    default: Scalar
    help: str
    check: Callable[[str, Any], Any] | None = None
    field: str = ""
    when: When | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TypeError(f"{self.name}: a run-config key is one of {KINDS}, not {self.kind}")
        if type(self.default) is not self.kind:
            raise TypeError(
                f"{self.name}: the default {self.default!r} is not a {self.kind.__name__}"
            )
        if self.check is not None:
            self.check(self.name, self.default)  # a default must pass its own check

    @property
    def field_name(self) -> str:
        """The settings-dataclass field this key fills."""
        return self.field or self.name.rsplit(".", 1)[-1].replace("-", "_")

    def given(self, raw: Mapping[str, Any]) -> bool:
        """Whether ``raw`` sets this key to anything but its default (a value of the wrong
        type counts as given)."""
        try:
            return read_key(raw, self.name, self.kind, self.default) != self.default
        except ConfigError:
            return True

    def read(self, raw: Mapping[str, Any]) -> Any:
        """The key's value in ``raw`` (its default when absent), typed and checked."""
        value = read_key(raw, self.name, self.kind, self.default)
        if self.check is not None:
            self.check(self.name, value)
        return value


def read_keys(raw: Mapping[str, Any], keys: Iterable[Key]) -> dict[str, Any]:
    """Every key of a table as {name: value}, in table order; ConfigError names the first bad
    key."""
    return {key.name: key.read(raw) for key in keys}


def defaults(keys: Iterable[Key]) -> dict[str, Scalar]:
    """{name: default} of a table."""
    return {key.name: key.default for key in keys}


def build(cls: type, values: Mapping[str, Any], keys: Iterable[Key], **computed: Any) -> Any:
    """A settings dataclass ``cls``: each field from ``computed``, else from the key that fills
    it (``Key.field_name``; keys that fill no field are left to ``computed``). TypeError for a
    field with neither, so a renamed key or field cannot fall back to a default unseen."""
    by_field = {key.field_name: values[key.name] for key in keys}
    kwargs = {}
    for f in fields(cls):
        if f.init and f.name in computed:
            kwargs[f.name] = computed[f.name]
        elif f.init and f.name in by_field:
            kwargs[f.name] = by_field[f.name]
        elif f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: no key fills it and no value is given")
    return cls(**kwargs)
