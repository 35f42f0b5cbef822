"""The schema a run's sites agree before round 1, and the federated preprocessing it carries:
what the run says of the sites' files (``SiteSpec``), the agreed feature space (``Schema``: its
columns in order, the classes, each column's fill and scale once fitted), and its application.

The schema is reached in three steps, each on facts or sums, never rows
(``strategies.site_agreement`` runs the exchanges; these modules are the maths, without Flower):

1. ``tasks.site_facts``: a node describes its file under the run's ``SiteSpec``.
2. ``tasks.schema_agreement``: the server agrees one ``Schema`` from the nodes' facts, refusing
   a node whose facts conflict with a reason naming the column.
3. ``tasks.site_moments``: each node sums its training rows; the server adds them up and fixes
   the transform (numeric columns imputed with the federated mean and standardised by the
   federated standard deviation, categorical ones imputed with the most frequent category and
   one-hot encoded, a regression label standardised).

``transform`` applies the agreed schema to any table (a node's training rows, its test file, the
server's test file) and refuses a label or category outside the agreed sets. The schema travels as
JSON, and ``Schema.from_json`` validates everything it reads (it comes from the network).

Written here rather than with scikit-learn's ``StandardScaler``/``OneHotEncoder``: those fit on
rows in one place, while here the statistics come from sums over sites that never pool rows; the
transform itself is a few array operations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tasks.json_rules import Rule, checked, distinct_texts, finite, keys_exactly
from tasks.site_files import CATEGORICAL, NUMERIC, SiteDataError, SiteTable, numeric_column

CLASSIFICATION, REGRESSION = "classification", "regression"
KINDS = (CLASSIFICATION, REGRESSION)
MAX_FACT_CATEGORIES = 1000  # distinct values a categorical column may report
MAX_COLUMNS = 10_000  # columns a schema may hold
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
