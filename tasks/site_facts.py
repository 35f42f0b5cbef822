"""Step 1 of the sites' schema (``tasks.site_schema``): what a node discloses about its own file
under the run's ``SiteSpec`` (``site_facts``: row count, every reported column's kind, numeric
ranges and magnitudes coarsened to powers of two, missing counts, categorical values, the
label's values; label counts only when the run asks for them), and the server's check of such
facts read from the network (``check_facts``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tasks.json_rules import Rule, checked, distinct_texts, finite, keys_exactly, mapping, whole
from tasks.site_files import CATEGORICAL, NUMERIC, SiteDataError, SiteTable, numeric_column
from tasks.site_schema import CLASSIFICATION, MAX_COLUMNS, MAX_FACT_CATEGORIES, SiteSpec, texts

MAX_ROWS = 10**9  # rows a site may report
MAX_VALUE = 1e100  # a reported value's magnitude: the sums of squares of 1e9 rows stay finite


def site_facts(table: SiteTable, spec: SiteSpec) -> dict[str, Any]:
    """What a node discloses about its file (no rows, and no value of a row): the row count,
    the kind and missing count of every reported column (the label and ``spec.features``, or
    every column when no features are declared), each numeric column's range and magnitude
    coarsened (``outside``, ``binade``: how the server finds a site in other units), each
    categorical column's values, and the label's values (with counts only if
    ``spec.label_counts``). ``SiteDataError`` names the file and the column of any fault (a
    missing column, text in a declared numeric column)."""
    frame = table.frame
    wanted = [spec.label, *spec.features] if spec.features else list(frame.columns)
    for name in [spec.label, *spec.features, *spec.categorical]:
        if name not in frame.columns:
            raise SiteDataError(
                f"{table.path}: no column {name!r}; columns are {list(frame.columns)}"
            )
    facts: dict[str, Any] = {
        "rows": table.rows,
        "columns": {},
        "ranges": {},
        "scales": {},
        "missing": {},
        "categories": {},
    }
    for name in wanted:
        column = frame[name]
        facts["missing"][name] = int(column.isna().sum())
        if spec.kind_of(name, column) == CATEGORICAL:
            values = sorted(set(texts(column.dropna())))
            if len(values) > MAX_FACT_CATEGORIES:
                raise SiteDataError(
                    f"{table.path}: column {name!r} has {len(values)} distinct "
                    f"values, more than {MAX_FACT_CATEGORIES}"
                )
            facts["columns"][name], facts["categories"][name] = CATEGORICAL, values
            continue
        values = numeric_column(table, name)
        present = values[~np.isnan(values)]
        facts["columns"][name] = NUMERIC
        facts["ranges"][name] = (
            list(outside(float(present.min()), float(present.max()))) if present.size else None
        )
        facts["scales"][name] = binade(float(np.median(np.abs(present)))) if present.size else None
    if facts["missing"][spec.label]:
        raise SiteDataError(
            f"{table.path}: the label column {spec.label!r} is missing in "
            f"{facts['missing'][spec.label]} row(s)"
        )
    if spec.kind == CLASSIFICATION and spec.label_counts:
        counts = texts(frame[spec.label]).value_counts()
        facts["label-counts"] = {str(k): int(v) for k, v in sorted(counts.items())}
    return facts


SMALLEST = 2.0**-30  # the finest power of two a coarsened range ends at (then 0)


def outside(low: float, high: float) -> tuple[float, float]:
    """The interval of 0 and signed powers of two that holds ``[low, high]`` with neither end
    touching it: a range the server can check sums against that states no value of a row."""

    def above(v: float) -> float:  # the least 0 or signed power of two strictly above v
        if v < 0:
            return -below(-v)
        return SMALLEST if v < SMALLEST else 2.0 ** (math.floor(math.log2(v)) + 1)

    def below(v: float) -> float:  # the greatest such value strictly below v
        if v <= 0:
            return -above(-v)
        return 0.0 if v <= SMALLEST else 2.0 ** (math.ceil(math.log2(v)) - 1)

    return below(low), above(high)


def binade(magnitude: float) -> float:
    """``magnitude`` as the geometric middle of its power-of-two interval (0 stays 0): within a
    factor of sqrt(2) of it, which tells units apart, and no row's value."""
    return 0.0 if magnitude == 0 else 2.0 ** (math.floor(math.log2(magnitude)) + 0.5)


def _scale_fits(scale: Any, bounds: list | None) -> bool:
    """A median |value| that values in ``bounds`` can have (None exactly when there are none)."""
    if bounds is None or scale is None:
        return bounds is None and scale is None
    low, high = bounds
    smallest = 0.0 if low <= 0.0 <= high else min(abs(low), abs(high))
    return finite([scale]) and smallest * (1 - 1e-12) <= scale <= max(-low, high) * (1 + 1e-12)


FACT_KEYS = {"rows", "columns", "ranges", "scales", "missing", "categories"}


def _numeric(facts: Mapping[str, Any]) -> set[str]:
    return {n for n, k in facts["columns"].items() if k == NUMERIC}


def _range_fits(bounds: Any) -> bool:
    """None (no values), or [low, high]: finite, ordered, within the magnitude bound."""
    return bounds is None or (
        isinstance(bounds, list)
        and len(bounds) == 2
        and finite(bounds)
        and -MAX_VALUE <= bounds[0] <= bounds[1] <= MAX_VALUE
    )


FACT_RULES = (
    Rule(
        "unexpected keys", lambda p, spec: keys_exactly(p, FACT_KEYS, {"label-counts", "test-rows"})
    ),
    Rule(
        lambda p, spec: f"rows={p['rows']!r} not in [1, {MAX_ROWS}]",
        lambda p, spec: whole(p["rows"], 1, MAX_ROWS),
    ),
    Rule(
        "columns must map names to 'numeric' or 'categorical'",
        lambda p, spec: (
            mapping(p["columns"], None, lambda k: k in (NUMERIC, CATEGORICAL), MAX_COLUMNS)
            and len(p["columns"]) > 0
        ),
    ),
    Rule(
        lambda p, spec: f"no label column {spec.label!r}",
        lambda p, spec: spec.label in p["columns"],
    ),
    Rule(
        "missing counts",
        lambda p, spec: mapping(p["missing"], p["columns"], lambda v: whole(v, 0, p["rows"])),
    ),
    Rule(
        f"ranges (finite, low <= high, within ±{MAX_VALUE:g})",
        lambda p, spec: mapping(p["ranges"], _numeric(p), _range_fits),
    ),
    Rule(
        "scales (each column's median |value|, inside its range's magnitudes)",
        lambda p, spec: (
            mapping(p["scales"], _numeric(p), lambda v: True)
            and all(_scale_fits(p["scales"][n], p["ranges"][n]) for n in _numeric(p))
        ),
    ),
    Rule(
        "categories",
        lambda p, spec: mapping(
            p["categories"],
            set(p["columns"]) - _numeric(p),
            lambda v: distinct_texts(v, MAX_FACT_CATEGORIES),
        ),
    ),
    Rule("test-rows", lambda p, spec: whole(p.get("test-rows", 1), 1, MAX_ROWS)),
    Rule(
        "label counts",
        lambda p, spec: (
            p.get("label-counts") is None
            or mapping(
                p["label-counts"], None, lambda v: whole(v, 1, p["rows"]), MAX_FACT_CATEGORIES
            )
        ),
    ),
)


def check_facts(payload: Any, spec: SiteSpec) -> dict[str, Any]:
    """A node's facts as decoded JSON (from the network), checked (``FACT_RULES``): the fields
    ``site_facts`` writes and no others, every column named once with its kind, counts whole
    and within the row count (at most ``MAX_ROWS``), ranges finite, at most ``MAX_COLUMNS``
    columns and ``MAX_FACT_CATEGORIES`` values a column; ``SiteDataError`` names the fault."""
    return checked(payload, FACT_RULES, "facts", spec)
