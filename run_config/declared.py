"""The run-config keys the app declares (``[tool.flwr.app.config]``); overrides checked on them.

Flower rejects an unknown key with a bare "Invalid run configuration."; here the error names the
key and the closest declared one, so a typo is found before any engine starts.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.common.config import flatten_dict, parse_config_args

from tasks.errors import ConfigError

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared_defaults(pyproject: Path = PYPROJECT) -> dict[str, Any]:
    """Every declared key with its default, flattened as Flower flattens it."""
    with open(pyproject, "rb") as handle:
        table = tomllib.load(handle)["tool"]["flwr"]["app"]["config"]
    return flatten_dict(table)


def unknown_key(key: str, known: Mapping[str, Any]) -> ConfigError:
    """The error for an undeclared ``key``, naming the closest declared keys."""
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(repr(k) for k in close)}?"
        if close
        else "see the run-configuration reference in docs/configuration.md"
    )
    return ConfigError(f"{key!r} is not a run-config key; {hint}")


def with_overrides(overrides: Mapping[str, Any], pyproject: Path = PYPROJECT) -> dict[str, Any]:
    """The declared defaults with ``overrides`` applied; ConfigError on an undeclared key."""
    config = declared_defaults(pyproject)
    for key in overrides:
        if key not in config:
            raise unknown_key(key, config)
    return {**config, **overrides}


_NAME = re.compile(r"(?:^|\s)([A-Za-z0-9_.-]+)\s*=")  # an unquoted key of ``key=value``


def parse_overrides(text: str) -> dict[str, Any]:
    """``key=value`` pairs as ``flwr run --run-config`` reads them (TOML values)."""
    try:
        return parse_config_args([text]) if text.strip() else {}
    except Exception as err:  # click's or tomli's parse errors, with their own message
        names = _NAME.findall(text)
        clash = next(
            (
                f"{parent}=... and {name}=..."
                for name in names
                for parent in names
                if name.startswith(f"{parent}.")
            ),
            None,
        )
        hint = (
            f" (TOML reads {clash} as a value and a table of the same name: quote the "
            'dotted key, e.g. "partitioning.alpha"=0.1)'
            if clash
            else ""
        )
        raise ConfigError(f"cannot parse the run config {text!r}: {err}{hint}") from None
