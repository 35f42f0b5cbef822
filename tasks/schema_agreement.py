"""Step 2 of the sites' schema (``tasks.site_schema``): the server agrees one ``Schema`` from the
nodes' facts (``agree``: columns matched by name, the feature columns in a fixed order, each
numeric or categorical, its categories the union of the nodes' in sorted order, the classes the
union of the label sets), refuses a node whose facts conflict (a missing feature column, a
column that is text here and numbers elsewhere, a regression label that is text) with a reason
naming the column, and warns of what is only implausible (``plausibility``). ``misfit`` says
why a node's facts do not fit a schema kept as it is (a resumed run).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tasks.site_files import CATEGORICAL, NUMERIC, SiteDataError
from tasks.site_schema import CLASSIFICATION, REGRESSION, Column, Schema, SiteSpec


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
