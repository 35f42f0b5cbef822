"""Step 3 of the sites' schema (``tasks.site_schema``): each node sums its training rows
(``site_moments``: per numeric column the count, sum and sum of squares of the present values,
per categorical column each category's count, for regression the label's three sums), the
server checks each node's sums against the facts it reported (``check_moments``) or bounds them
for a secure sum (``moment_arrays``, ``moment_bounds``), adds them up and fixes the transform
(``with_moments``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from tasks.json_rules import Rule, checked, finite, keys_exactly, whole
from tasks.site_files import SiteDataError, SiteTable, numeric_column
from tasks.site_schema import REGRESSION, Column, Schema, check_table, texts

MIN_STD = 1e-12  # a standard deviation below this standardises by 1 (a constant column)


def site_moments(table: SiteTable, schema: Schema, rows: np.ndarray) -> dict[str, Any]:
    """The sums a node sends for ``rows`` of its table (its training rows): per numeric column
    [count, sum, sum of squares] of the present values, per categorical column the count of
    each agreed category, and (regression) the label's [count, sum, sum of squares]."""
    frame = table.frame.iloc[rows]
    check_table(table, schema)
    numeric, categories = {}, {}
    for column in schema.columns:
        if column.categories is None:
            values = numeric_column(table, column.name)[rows]
            present = values[~np.isnan(values)]
            numeric[column.name] = [
                float(present.size),
                float(present.sum()),
                float(np.square(present).sum()),
            ]
        else:
            counts = texts(frame[column.name].dropna()).value_counts()
            categories[column.name] = [int(counts.get(c, 0)) for c in column.categories]
    moments: dict[str, Any] = {"rows": len(rows), "numeric": numeric, "categories": categories}
    if schema.kind == REGRESSION:
        y = numeric_column(table, schema.label)[rows]
        moments["target"] = [float(y.size), float(y.sum()), float(np.square(y).sum())]
    return moments


def moment_arrays(moments: Mapping[str, Any], schema: Schema) -> dict[str, np.ndarray]:
    """A node's ``site_moments`` as arrays in the schema's order, to be summed securely
    (``moment_bounds`` gives each one's bound): the rows, each numeric column's (and a
    regression label's) count, sum and sum of squares (``n/``, ``s/``, ``q/`` and its name), each
    categorical column's counts (``c/``)."""
    triples = {c.name: moments["numeric"][c.name] for c in schema.columns if c.categories is None}
    if schema.kind == REGRESSION:
        triples[schema.label] = moments["target"]
    arrays = {"rows": np.array([moments["rows"]], np.float64)}
    for name, triple in triples.items():
        for kind, value in zip("nsq", triple):
            arrays[f"{kind}/{name}"] = np.array([value], np.float64)
    for column in schema.columns:
        if column.categories is not None:
            arrays[f"c/{column.name}"] = np.array(moments["categories"][column.name], np.float64)
    return arrays


def moment_bounds(
    schema: Schema, facts: Mapping[str, Any], rows: int
) -> dict[str, tuple[int, float]]:
    """Each of ``moment_arrays``' size and the largest magnitude it can hold on a node of at
    most ``rows`` rows whose values lie in the ranges of ``facts``: counts ``rows``, sums
    ``rows`` times the range's largest magnitude, sums of squares ``rows`` times its square."""
    names = [c.name for c in schema.columns if c.categories is None]
    names += [schema.label] if schema.kind == REGRESSION else []
    bounds = {"rows": (1, float(rows))}
    for name in names:
        span = facts["ranges"].get(name) or [0.0, 0.0]
        largest = max(abs(span[0]), abs(span[1]), 1.0)
        bounds |= {
            f"n/{name}": (1, float(rows)),
            f"s/{name}": (1, rows * largest),
            f"q/{name}": (1, rows * largest**2),
        }
    for column in schema.columns:
        if column.categories is not None:
            bounds[f"c/{column.name}"] = (len(column.categories), float(rows))
    return bounds


def moments_of_arrays(arrays: Mapping[str, np.ndarray], schema: Schema) -> dict[str, Any]:
    """``moment_arrays``' inverse: the moments' JSON form (for ``check_moments``)."""

    def triple(name: str) -> list[float]:
        n, first, second = (float(arrays[f"{k}/{name}"][0]) for k in "nsq")
        return [float(round(n)), first, second]

    moments: dict[str, Any] = {
        "rows": int(round(float(arrays["rows"][0]))),
        "numeric": {c.name: triple(c.name) for c in schema.columns if c.categories is None},
        "categories": {
            c.name: [int(round(float(v))) for v in arrays[f"c/{c.name}"]]
            for c in schema.columns
            if c.categories is not None
        },
    }
    if schema.kind == REGRESSION:
        moments["target"] = triple(schema.label)
    return moments


def pooled_facts(facts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The facts of several sites taken as one: rows and missing counts added, ranges joined,
    categories united (what a secure sum of their moments is checked against)."""
    facts = list(facts)
    ranges: dict[str, list | None] = {}
    for name in facts[0]["ranges"]:
        spans = [f["ranges"][name] for f in facts if f["ranges"].get(name) is not None]
        ranges[name] = [min(r[0] for r in spans), max(r[1] for r in spans)] if spans else None
    return {
        "rows": sum(f["rows"] for f in facts),
        "missing": {n: sum(f["missing"][n] for f in facts) for n in facts[0]["missing"]},
        "ranges": ranges,
        "categories": {
            n: sorted(set().union(*(f["categories"].get(n, []) for f in facts)))
            for n in facts[0]["categories"]
        },
    }


def with_moments(schema: Schema, moments: Mapping[int, Mapping[str, Any]]) -> Schema:
    """The schema with its transform fixed by the nodes' summed ``moments`` (already checked by
    ``check_moments``)."""
    columns = []
    for column in schema.columns:
        parts = [
            m["numeric" if column.categories is None else "categories"][column.name]
            for m in moments.values()
        ]
        total = np.sum(np.asarray(parts, dtype=np.float64), axis=0)
        if column.categories is None:
            mean, std = _mean_std(total)
            columns.append(replace(column, mean=mean, std=std))
        else:
            mode = column.categories[int(np.argmax(total))] if column.categories else ""
            columns.append(replace(column, mode=mode))
    target = (0.0, 1.0)
    if schema.kind == REGRESSION:
        target = _mean_std(np.sum([m["target"] for m in moments.values()], axis=0))
    return replace(schema, columns=tuple(columns), target=target, fitted=True)


def _mean_std(total: np.ndarray) -> tuple[float, float]:
    count, first, second = (float(v) for v in total)
    if count <= 0:
        return 0.0, 1.0
    mean = first / count
    std = math.sqrt(max(second / count - mean * mean, 0.0))
    return mean, (std if std > MIN_STD else 1.0)


def _moment_keys(schema: Schema) -> set[str]:
    return {"rows", "numeric", "categories"} | ({"target"} if schema.kind == REGRESSION else set())


def _present(facts: Mapping[str, Any], name: str) -> int:
    """The values of column ``name`` the node reported present."""
    return facts["rows"] - facts["missing"][name]


def _counts_fit(counts: Any, column: Column, facts: Mapping[str, Any]) -> bool:
    return (
        isinstance(counts, list)
        and len(counts) == len(column.categories)
        and all(type(c) is int and c >= 0 for c in counts)
        and sum(counts) <= _present(facts, column.name)
    )


def _unseen(counts: list[int], column: Column, facts: Mapping[str, Any]) -> list[str]:
    """The categories with rows that the node did not report having."""
    reported = set(facts["categories"][column.name])
    return [c for c, k in zip(column.categories, counts) if k and c not in reported]


def _categorical(schema: Schema) -> list[Column]:
    return [c for c in schema.columns if c.categories is not None]


def _miscounted(p: dict, schema: Schema, facts: Mapping[str, Any]) -> Column | None:
    """The first categorical column whose counts do not fit its present values."""
    bad = (c for c in _categorical(schema) if not _counts_fit(p["categories"][c.name], c, facts))
    return next(bad, None)


def _miscounted_fault(p: dict, schema: Schema, facts: Mapping[str, Any]) -> str:
    column = _miscounted(p, schema, facts)
    present = _present(facts, column.name)
    return f"category counts of {column.name!r} (at most its {present} present values)"


def _unreported(p: dict, schema: Schema, facts: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The first categorical column with rows of categories the node did not report, and
    those categories (("", []) when none)."""
    for column in _categorical(schema):
        if unseen := _unseen(p["categories"][column.name], column, facts):
            return column.name, unseen
    return "", []


def _unreported_fault(p: dict, schema: Schema, facts: Mapping[str, Any]) -> str:
    name, unseen = _unreported(p, schema, facts)
    return f"of {name!r}: rows of {unseen[:1]}, a category it did not report"


MOMENT_RULES = (
    Rule("unexpected keys", lambda p, schema, facts: keys_exactly(p, _moment_keys(schema))),
    Rule(
        lambda p, schema, facts: (
            f"rows={p['rows']!r} not in [1, {facts['rows']}] (the rows it reported)"
        ),
        lambda p, schema, facts: whole(p["rows"], 1, facts["rows"]),
    ),
    Rule(
        "numeric columns differ from the schema's",
        lambda p, schema, facts: (
            isinstance(p["numeric"], dict)
            and set(p["numeric"]) == {c.name for c in schema.columns if c.categories is None}
        ),
    ),
    Rule(
        "categorical columns differ from the schema's",
        lambda p, schema, facts: (
            isinstance(p["categories"], dict)
            and set(p["categories"]) == {c.name for c in _categorical(schema)}
        ),
    ),
)
SUMMED_RULES = (  # once each column's sums fit (``_check_sums``)
    Rule(
        lambda p, schema, facts: (
            f"of the label {schema.label!r}: a count other than its rows ({p['rows']})"
        ),
        lambda p, schema, facts: schema.kind != REGRESSION or p["target"][0] == p["rows"],
    ),
    Rule(_miscounted_fault, lambda p, schema, facts: _miscounted(p, schema, facts) is None),
    Rule(_unreported_fault, lambda p, schema, facts: not _unreported(p, schema, facts)[1]),
)


def check_moments(payload: Any, schema: Schema, facts: Mapping[str, Any]) -> dict[str, Any]:
    """A node's moments as decoded JSON, checked against the schema and against the node's own
    ``facts`` (checked by ``check_facts``): every column once, at most the rows it reported,
    and per numeric column (and regression label) a count within its present values, a mean
    inside the range it reported and a variance between 0 and (max - min)^2 / 4 (nothing
    else can come from values in that range; with the range's bound on magnitudes, no sum
    overflows), no sums without values; categorical counts within the column's present values,
    none of a category it did not report. ``SiteDataError`` names the column and the fault."""
    checked(payload, MOMENT_RULES, "moments", schema, facts)
    sums = dict(payload["numeric"])
    if schema.kind == REGRESSION:
        sums[schema.label] = payload["target"]
    for name, triple in sums.items():
        _check_sums(name, triple, facts["ranges"][name], _present(facts, name))
    return checked(payload, SUMMED_RULES, "moments", schema, facts)


def _check_sums(name: str, triple: Any, bounds: list | None, present: int) -> None:
    """A [count, sum, sum of squares] that values inside ``bounds`` (the range the node
    reported) can give, with at most ``present`` values; ``SiteDataError`` says what not."""
    where = f"moments of {name!r}"
    if not (isinstance(triple, list) and len(triple) == 3 and finite(triple)):
        raise SiteDataError(f"{where}: not three finite numbers [count, sum, sum of squares]")
    count, first, second = (float(v) for v in triple)
    if not (count.is_integer() and 0 <= count <= present):
        raise SiteDataError(
            f"{where}: a count of {count:.6g}, not a whole number in [0, "
            f"{present}] (its present values)"
        )
    if count == 0 or bounds is None:
        if count or first or second:
            raise SiteDataError(f"{where}: sums {first:.6g} and {second:.6g} over {count:g} values")
        return
    low, high = bounds
    mean = first / count
    slack = 1e-9 * max(abs(low), abs(high)) + 1e-300
    if not low - slack <= mean <= high + slack:
        raise SiteDataError(
            f"{where}: mean {mean:.4g} outside the range [{low:.6g}, {high:.6g}] it reported"
        )
    variance = second / count - mean * mean  # mean within the range: no overflow
    top, slack2 = (high - low) ** 2 / 4, 1e-9 * max(low * low, high * high) + 1e-300
    if not -slack2 <= variance <= top + slack2:
        raise SiteDataError(
            f"{where}: variance {variance:.4g} outside [0, {top:.4g}], what "
            f"values in the range [{low:.6g}, {high:.6g}] it reported can have"
        )
