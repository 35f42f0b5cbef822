"""The schema a run's sites agree before round 1, and the federated preprocessing it carries.

Three steps, each on facts or sums, never rows (``strategies.site_agreement`` runs the
exchanges; this module is the maths, without Flower):

1. ``site_facts``: a node describes its file under the run's ``SiteSpec`` (row count, every
   reported column's kind, numeric ranges and missing counts, categorical values, the label's
   values or range; label counts only when the run asks for them).
2. ``agree``: the server matches columns by name and agrees one ``Schema``: the feature columns in
   a fixed order, each numeric or categorical (its categories the union of the nodes', one-hot in
   sorted order), the classes (the union of the label sets, one index each); a node whose facts
   conflict (a missing feature column, a column that is text here and numbers elsewhere, a
   regression label that is text) is refused with a reason naming the column.
3. ``site_moments`` and ``with_moments``: each node sums its training rows (per numeric column:
   count, sum and sum of squares of the present values; per categorical column: each category's
   count; for regression the label's count, sum and sum of squares); the server adds them up and
   fixes the transform: numeric columns imputed with the federated mean and standardised by the
   federated standard deviation, categorical ones imputed with the most frequent category and
   one-hot encoded, a regression label standardised.

``transform`` applies the agreed schema to any table (a node's training rows, its test file, the
server's test file) and refuses a label or category outside the agreed sets. The schema travels as
JSON, and ``Schema.from_json`` validates everything it reads (it comes from the network).

Written here rather than with scikit-learn's ``StandardScaler``/``OneHotEncoder``: those fit on
rows in one place, while here the statistics come from sums over sites that never pool rows; the
transform itself is a few array operations.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tasks.json_rules import Rule, checked, distinct_texts, finite, keys_exactly, mapping, whole
from tasks.site_files import CATEGORICAL, NUMERIC, SiteDataError, SiteTable, numeric_column

CLASSIFICATION, REGRESSION = "classification", "regression"
KINDS = (CLASSIFICATION, REGRESSION)
MAX_FACT_CATEGORIES = 1000  # distinct values a categorical column may report
MAX_COLUMNS = 10_000  # columns a schema may hold
MAX_ROWS = 10**9  # rows a site may report
MIN_STD = 1e-12  # a standard deviation below this standardises by 1 (a constant column)
MAX_VALUE = 1e100  # a reported value's magnitude: the sums of squares of 1e9 rows stay finite
SCALE_FACTOR = 1000.0  # default of data.scale-factor: sites' magnitudes this far apart warn


@dataclass(frozen=True)
class SiteSpec:
    """What the run config says about the sites' files (``data.*`` keys)."""

    kind: str
    label: str
    features: tuple[str, ...] = ()  # empty: every other column most sites report
    categorical: tuple[str, ...] = ()
    label_counts: bool = False  # facts include how often each label occurs
    strict: bool = False  # an implausible site (``plausibility``) is refused, not warned of
    scale_factor: float = SCALE_FACTOR  # how far apart sites' magnitudes may be

    def kind_of(self, name: str, column: pd.Series) -> str:
        """Declared categorical, declared feature (numeric), or by the column's type."""
        if name in self.categorical or (name == self.label and self.kind == CLASSIFICATION):
            return CATEGORICAL
        if name in self.features or name == self.label:
            return NUMERIC
        numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
        return NUMERIC if numeric else CATEGORICAL


def text(value: Any) -> str:
    """A categorical value as text (3.0 from a float column reads as "3")."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def texts(column: pd.Series) -> pd.Series:
    """``text`` of every value of a column (missing values stay missing), computed once per
    distinct value: a column of a million rows holds few categories or labels."""
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    names = np.array([text(u) for u in uniques] + [None], dtype=object)
    return pd.Series(names[codes], index=column.index, dtype=object)


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


@dataclass(frozen=True)
class Column:
    """One agreed feature column: numeric (``categories`` None) or categorical, with its
    imputation and scaling once the moments are in."""

    name: str
    categories: tuple[str, ...] | None = None
    mean: float = 0.0  # numeric: federated mean (the fill of a missing value)
    std: float = 1.0  # numeric: federated standard deviation (1 for a constant column)
    mode: str = ""  # categorical: the most frequent category (the fill of a missing value)

    @property
    def width(self) -> int:
        return 1 if self.categories is None else len(self.categories)


@dataclass(frozen=True)
class Schema:
    """The agreed feature space: columns in order, the classes (classification) and, once the
    moments are in, each column's fill and scale and the regression target's."""

    kind: str
    label: str
    columns: tuple[Column, ...]
    classes: tuple[str, ...] = ()
    target: tuple[float, float] = (0.0, 1.0)  # regression: the label's federated mean and std
    fitted: bool = False  # whether the moments are in

    @property
    def width(self) -> int:
        """Features after one-hot encoding."""
        return sum(c.width for c in self.columns)

    @property
    def num_classes(self) -> int:
        return len(self.classes) if self.kind == CLASSIFICATION else 0

    def to_json(self) -> str:
        body = {
            "kind": self.kind,
            "label": self.label,
            "classes": list(self.classes),
            "target": list(self.target),
            "fitted": self.fitted,
            "columns": [
                {
                    "name": c.name,
                    "categories": None if c.categories is None else list(c.categories),
                    "mean": c.mean,
                    "std": c.std,
                    "mode": c.mode,
                }
                for c in self.columns
            ],
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, payload: str) -> Schema:
        """The schema in ``payload``, every field checked; ``SiteDataError`` names the fault."""
        try:
            body = json.loads(payload)
            return _schema_of(body)
        except SiteDataError:
            raise
        except (ValueError, TypeError, KeyError) as err:
            raise SiteDataError(f"the agreed schema does not decode: {err}") from None


SCHEMA_KEYS = {"kind", "label", "classes", "target", "fitted", "columns"}
COLUMN_KEYS = {"name", "categories", "mean", "std", "mode"}
SCHEMA_RULES = (
    Rule("its keys", lambda b: keys_exactly(b, SCHEMA_KEYS)),
    Rule("kind or label", lambda b: b["kind"] in KINDS and isinstance(b["label"], str)),
    Rule("fitted", lambda b: isinstance(b["fitted"], bool)),
    Rule("classes", lambda b: distinct_texts(b["classes"], MAX_FACT_CATEGORIES)),
    Rule(
        "target",
        lambda b: isinstance(t := b["target"], list) and len(t) == 2 and finite(t) and t[1] > 0,
    ),
    Rule(
        "columns", lambda b: isinstance(b["columns"], list) and 0 < len(b["columns"]) <= MAX_COLUMNS
    ),
    Rule("a column's keys", lambda b: all(keys_exactly(c, COLUMN_KEYS) for c in b["columns"])),
    Rule(
        "a column's categories",
        lambda b: all(
            c["categories"] is None or distinct_texts(c["categories"], MAX_FACT_CATEGORIES)
            for c in b["columns"]
        ),
    ),
    Rule(
        "a column's fields",
        lambda b: all(
            isinstance(c["name"], str)
            and isinstance(c["mode"], str)
            and finite([c["mean"], c["std"]])
            and c["std"] > 0
            for c in b["columns"]
        ),
    ),
    Rule(
        "column names",
        lambda b: (
            len({c["name"] for c in b["columns"]}) == len(b["columns"])
            and b["label"] not in {c["name"] for c in b["columns"]}
        ),
    ),
)


def _schema_of(body: Any) -> Schema:
    checked(body, SCHEMA_RULES, "the agreed schema is malformed")
    columns = tuple(
        Column(
            item["name"],
            None if item["categories"] is None else tuple(item["categories"]),
            float(item["mean"]),
            float(item["std"]),
            item["mode"],
        )
        for item in body["columns"]
    )
    target = body["target"]
    return Schema(
        body["kind"],
        body["label"],
        columns,
        tuple(body["classes"]),
        (float(target[0]), float(target[1])),
        body["fitted"],
    )


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


# -- agreement ----------------------------------------------------------------------------------
@dataclass
class Agreement:
    """The agreed schema, every refused node with the reason (naming the column), and what is
    implausible about the nodes it kept (``plausibility``; refused instead under
    ``data.strict``)."""

    schema: Schema
    refused: dict[int, str] = field(default_factory=dict)
    warnings: dict[int, list[str]] = field(default_factory=dict)


def _class_order(values: set[str]) -> tuple[str, ...]:
    """Labels in numeric order when they are all numbers, else in text order."""
    try:
        return tuple(sorted(values, key=float))
    except ValueError:
        return tuple(sorted(values))


def _natural(name: str) -> list[str | int]:
    """Names in natural order: ``x2`` before ``x10`` (an image's pixels stay in order)."""
    return [
        int(part) if odd else part
        for odd, part in ((i % 2, p) for i, p in enumerate(re.split(r"(\d+)", name)))
    ]


def agree(spec: SiteSpec, facts: Mapping[int, Mapping[str, Any]]) -> Agreement:
    """One schema for the nodes' ``facts`` (node id -> ``site_facts``, in the run's node order).

    Feature columns: ``spec.features`` in that order, or every column other than the label that
    more than half the nodes report, in natural order of their names. A column's kind is the
    declared one, or the kind most nodes report (numeric on a tie). A node is refused when it
    lacks a feature column, when one of its columns has the other kind, or (regression) when its
    label is not numeric; the schema is then agreed again without it. What is only implausible
    (``plausibility``) is a warning, or with ``spec.strict`` a refusal too. ``SiteDataError``
    when no node is left."""
    refused: dict[int, str] = {}
    while True:
        kept = {n: f for n, f in facts.items() if n not in refused}
        if not kept:
            raise SiteDataError(
                "no site's data fits a common schema: "
                + "; ".join(f"node {n}: {r}" for n, r in refused.items())
            )
        schema, conflicts = _agree_once(spec, kept)
        strict, warnings = judged(spec, {} if conflicts else plausibility(spec, kept))
        conflicts.update(strict)
        if not conflicts:
            return Agreement(schema, refused, warnings)
        refused.update(conflicts)


def judged(
    spec: SiteSpec, doubts: dict[int, list[str]]
) -> tuple[dict[int, str], dict[int, list[str]]]:
    """``plausibility``'s doubts as refusals (``data.strict``) or as warnings: (refused node ->
    reason, warned node -> warnings)."""
    if spec.strict:
        return {n: "; ".join(d) + " (data.strict=true refuses it)" for n, d in doubts.items()}, {}
    return {}, doubts


def plausibility(spec: SiteSpec, facts: Mapping[int, Mapping[str, Any]]) -> dict[int, list[str]]:
    """What is plausible but probably a mistake, by node: a numeric column (a regression label
    too) whose median absolute value is more than ``spec.scale_factor`` times the sites'
    median (another unit: grams against milligrams), and a label only one site holds (a class
    for every site). With two sites, a column that far apart is said of both."""
    doubts: dict[int, list[str]] = {}
    names = {
        name
        for f in facts.values()
        for name, kind in f["columns"].items()
        if kind == NUMERIC and (name != spec.label or spec.kind == REGRESSION)
    }
    for name in sorted(names, key=_natural):
        scales = {
            n: f["scales"][name]
            for n, f in facts.items()
            if f["scales"].get(name) and f["columns"].get(name) == NUMERIC
        }
        for node, other in _far_apart(scales, spec.scale_factor).items():
            doubts.setdefault(node, []).append(
                f"column {name!r} has median |value| {scales[node]:.4g} here against "
                f"{other:.4g} at the other sites (their median), more than "
                f"data.scale-factor={spec.scale_factor:g} times apart: another unit?"
            )
    if spec.kind == CLASSIFICATION and len(facts) > 1:
        holders: dict[str, list[int]] = {}
        for node, f in facts.items():
            for label in f["categories"].get(spec.label, []):
                holders.setdefault(label, []).append(node)
        for label, nodes in sorted(holders.items()):
            if len(nodes) == 1:
                doubts.setdefault(nodes[0], []).append(
                    f"the label {label!r} is held by no other site (it becomes a class for "
                    "every site)"
                )
    return doubts


def _far_apart(scales: Mapping[int, float], factor: float) -> dict[int, float]:
    """{node: the magnitude it is compared with} for each node whose magnitude is more than
    ``factor`` times from the median of the nodes' (in log scale); of two nodes, both when
    they are that far apart."""
    if len(scales) < 2:
        return {}
    logs = {n: math.log10(v) for n, v in scales.items()}
    limit = math.log10(factor)
    if len(logs) == 2:
        (a, la), (b, lb) = logs.items()
        return {a: scales[b], b: scales[a]} if abs(la - lb) > limit else {}
    centre = float(np.median(list(logs.values())))
    return {n: 10**centre for n, v in logs.items() if abs(v - centre) > limit}


def _agree_once(
    spec: SiteSpec, facts: Mapping[int, Mapping[str, Any]]
) -> tuple[Schema, dict[int, str]]:
    names = list(spec.features)
    if not names:
        seen: dict[str, int] = {}
        for f in facts.values():
            for name in f["columns"]:
                seen[name] = seen.get(name, 0) + 1
        names = sorted(
            (n for n, count in seen.items() if n != spec.label and 2 * count > len(facts)),
            key=_natural,
        )
    kinds = {}
    for name in names:
        reported = [f["columns"][name] for f in facts.values() if name in f["columns"]]
        if name in spec.categorical:
            kinds[name] = CATEGORICAL
        else:
            kinds[name] = (
                CATEGORICAL if 2 * reported.count(CATEGORICAL) > len(reported) else NUMERIC
            )
    conflicts: dict[int, str] = {}
    for node, f in facts.items():
        columns = f["columns"]
        missing = [n for n in [spec.label, *names] if n not in columns]
        clash = [n for n in names if n in columns and columns[n] != kinds[n]]
        if missing:
            conflicts[node] = f"no column {missing[0]!r} (the other sites have it)"
        elif clash:
            conflicts[node] = (
                f"column {clash[0]!r} is {columns[clash[0]]} here but "
                f"{kinds[clash[0]]} at the other sites"
            )
        elif spec.kind == REGRESSION and columns[spec.label] != NUMERIC:
            conflicts[node] = f"the label {spec.label!r} is not numeric (data.kind=regression)"
    if conflicts:
        return Schema(spec.kind, spec.label, ()), conflicts
    columns = []
    for name in names:
        if kinds[name] == NUMERIC:
            columns.append(Column(name))
            continue
        values = set().union(*(f["categories"].get(name, []) for f in facts.values()))
        columns.append(Column(name, tuple(sorted(values))))
    classes: tuple[str, ...] = ()
    if spec.kind == CLASSIFICATION:
        classes = _class_order(set().union(*(f["categories"][spec.label] for f in facts.values())))
    if not columns:
        raise SiteDataError(f"no feature column besides the label {spec.label!r}")
    return Schema(spec.kind, spec.label, tuple(columns), classes), {}


def misfit(schema: Schema, facts: Mapping[str, Any]) -> str | None:
    """Why a node's ``facts`` do not fit ``schema``, an agreed one kept as it is (a resumed run
    keeps its transform), or None: a feature column it lacks or holds with the other kind, a
    category or class outside the schema's, a regression label that is not numeric."""
    columns, categories = facts["columns"], facts["categories"]
    for column in schema.columns:
        kind = NUMERIC if column.categories is None else CATEGORICAL
        if column.name not in columns:
            return f"no column {column.name!r} (the run's schema has it)"
        if columns[column.name] != kind:
            return (
                f"column {column.name!r} is {columns[column.name]} here but {kind} in the "
                "run's schema"
            )
        extra = sorted(set(categories.get(column.name, [])) - set(column.categories or ()))
        if extra:
            return f"column {column.name!r} holds {extra[0]!r}, not one of the run's categories"
    if schema.kind == REGRESSION:
        return (
            None
            if columns.get(schema.label) == NUMERIC
            else f"the label {schema.label!r} is not numeric (data.kind=regression)"
        )
    extra = sorted(set(categories.get(schema.label, [])) - set(schema.classes))
    return (
        f"the label {schema.label!r} holds {extra[0]!r}, not one of the run's classes"
        if extra
        else None
    )


# -- moments and the fitted transform ----------------------------------------------------------
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


def check_columns(table: SiteTable, schema: Schema) -> None:
    """Every agreed column and the label are in the table."""
    for name in [schema.label, *(c.name for c in schema.columns)]:
        if name not in table.frame.columns:
            raise SiteDataError(f"{table.path}: no column {name!r} (the run's schema needs it)")


def _unknown(table: SiteTable, name: str, values: Any, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(values) - set(allowed))
    if extra:
        raise SiteDataError(
            f"{table.path}: column {name!r} holds {extra[0]!r}, which is not one "
            f"of the agreed values {list(allowed)}"
        )


def check_table(table: SiteTable, schema: Schema) -> None:
    """The table fits the schema: every agreed column, numbers in the numeric ones, and only
    agreed categories and labels; ``SiteDataError`` names the file, the column and the value."""
    check_columns(table, schema)
    for column in schema.columns:
        if column.categories is None:
            numeric_column(table, column.name)
        else:
            present = texts(table.frame[column.name].dropna()).unique()
            _unknown(table, column.name, present, column.categories)
    if schema.kind == CLASSIFICATION:
        labels = texts(table.frame[schema.label])
        if labels.isna().any():
            raise SiteDataError(
                f"{table.path}: the label column {schema.label!r} has missing values"
            )
        _unknown(table, schema.label, labels.unique(), schema.classes)
    elif np.isnan(numeric_column(table, schema.label)).any():
        raise SiteDataError(f"{table.path}: the label column {schema.label!r} has missing values")


def transform(table: SiteTable, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 (rows, width), y) of the whole table under the fitted schema: y a class index
    (int64) or the standardised target (float32); ``check_table``'s errors first."""
    check_table(table, schema)
    frame, blocks = table.frame, []
    for column in schema.columns:
        if column.categories is None:
            values = numeric_column(table, column.name)
            values = np.where(np.isnan(values), column.mean, values)
            blocks.append(((values - column.mean) / column.std)[:, None])
            continue
        cells = texts(frame[column.name]).fillna(column.mode)
        index = {c: i for i, c in enumerate(column.categories)}
        onehot = np.zeros((len(frame), len(column.categories)))
        onehot[np.arange(len(frame)), cells.map(index).to_numpy(dtype=np.int64)] = 1.0
        blocks.append(onehot)
    x = np.ascontiguousarray(np.hstack(blocks), dtype=np.float32)
    if schema.kind == CLASSIFICATION:
        index = {c: i for i, c in enumerate(schema.classes)}
        return x, texts(frame[schema.label]).map(index).to_numpy(dtype=np.int64)
    y = numeric_column(table, schema.label)
    return x, ((y - schema.target[0]) / schema.target[1]).astype(np.float32)
