"""What a curious server reads back about each site: the server's seat in real runs on the
penguins and cars sites (``tasks.sites``, 3 sites each), reconstructing from the replies it
receives and what it decided itself (the agreed schema of config.json, the bin edges, the base
score, FedFun's domain box, the run config) whatever it can, per family and site
(``benchmarks.privacy_attacks``):

- **values**: the share of the site's numeric training values recovered exactly, each at most
  as often as the server found it (fedxgb-hist's sketch, XGBoost's split conditions, KDDT
  thresholds), in the site's own units (de-standardised with the agreed schema);
- **labels**: the share of the site's training rows whose label the server recovers together
  with an exact feature value of the row (fedxgb-hist's histograms; KDDT's pure leaves);
- **single-row**: histogram slots at the root, or tree leaves, that hold one row (each gives
  that row's gradient: its label, or its residual);
- **facts**: the row values among those the schema agreement's facts and FedFun's
  ``query.bounds`` state (each range's ends, and a column's magnitude where it could be a row's
  value); coarsened to powers of two, they state none;
- **replies read**: the node's training replies whose own content the family's attack decodes
  (histograms, trees, a model, FedFW's points, FedDR's x_hat_i), of those that came: what every
  attack, and gradient inversion, starts from.

The runs use the real ServerApp and ClientApp on the in-process engine, recorded by
``testing.recording_grid.RecordingGrid``; each site's own file is read only to score. A case is
one line of ``CASES``, a protection a case of its own beside the plain one; an attack recovers
nothing from a record it does not know (a secure sum's masked vector, a sealed model). A family
whose exchange carries no exact value (networks) reports the replies read and its facts only
(Deep Leakage from Gradients: ``benchmarks.privacy_dlg``).

    python -m benchmarks.privacy            # 3 rounds, both tables
    python -m benchmarks.privacy --quick    # 1 round, the penguins sites

Writes ``results/privacy.md`` and ``results/privacy.json`` (``--quick``: under
``results/quick/``).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from benchmarks import privacy_attacks as attacks
from benchmarks.common import (
    command_line,
    machine_info,
    md_table,
    parser,
    results_dir,
    write_report,
)
from client_app.app import app as client_app
from functions.protocol import (
    ARRAYS,
    BOUNDS,
    CONFIG,
    DELTA,
    DELTA_ARRAYS,
    DR_XHAT,
    FW_POINT,
    GROWING,
    HISTOGRAMS,
    LAYOUT,
    MODEL_ARRAYS,
    PARTITION_ID,
    QUERY_BOUNDS,
    QUERY_FACTS,
    QUERY_MOMENTS,
    QUERY_SKETCH,
    REPLY_PREFIX,
    SERVER_ROUND,
    SITE,
    SITE_FACTS,
    SITE_MOMENTS,
    SKETCH,
    TRAIN,
)
from functions.trees import TreeArrays
from run_config.common import RunSettings
from server_app.app import main as server_main
from tasks.site_data import training_rows
from tasks.site_files import numeric_column, read_site_file
from tasks.site_schema import REGRESSION, Schema, text
from tasks.sites import TABLES, write_sites
from testing.inprocess_grid import LocalGrid, counting, run_config, server_context
from testing.recording_grid import Exchange, RecordingGrid

SEED = 0
NOT_APPLICABLE = "n/a (see privacy_dlg)"
NONE = "—"


@dataclass(frozen=True)
class Case:
    """One federated run of ``algorithm`` with run-config ``overrides`` per site table.
    ``exact``: whether the exchange can carry exact values (a network's cannot: facts only)."""

    name: str
    algorithm: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    tables: tuple[str, ...] = ("penguins", "cars")  # FedFun: classification only
    exact: bool = True


CASES = (
    Case("fedxgb-hist", "fedxgb-hist"),
    Case("fedxgb-hist, min-bin-count 5", "fedxgb-hist", {"fedxgb-hist.min-bin-count": 5}),
    Case(
        "fedxgb-hist, secure aggregation",
        "fedxgb-hist",
        {"secure-aggregation": True, "fedxgb-hist.bins": "grid"},
    ),
    Case("fedxgb-bagging", "fedxgb-bagging"),
    Case("FFGB, trees", "ffgb", {"ffgb.learner": "tree"}),
    Case(
        "FFGB, trees, relay encryption",
        "ffgb",
        {"ffgb.learner": "tree", "relay-encryption": True, "central-evaluation": False},
    ),
    Case("FedFun, KDDT", "fedfun", {"fedfun.learner": "tree"}, ("penguins",)),
    Case(
        "FedFun, KDDT, relay encryption",
        "fedfun",
        {"fedfun.learner": "tree", "relay-encryption": True},
        ("penguins",),
    ),
    Case("FFGB, MLP", "ffgb", exact=False),
    Case("FedAvg", "fedavg", exact=False),
    Case("FedAvg, secure aggregation", "fedavg", {"secure-aggregation": True}, exact=False),
    Case("FedFW", "fedfw", exact=False),
    Case("FedFW, secure aggregation", "fedfw", {"secure-aggregation": True}, exact=False),
    Case("FedDR", "feddr", exact=False),
    Case("FedDR, secure aggregation", "feddr", {"secure-aggregation": True}, exact=False),
)


# -- the run, recorded ------------------------------------------------------------------------
def site_overrides(table: str, folder: Path, rounds: int) -> dict[str, Any]:
    """The run config of ``table``'s sites in ``folder``."""
    spec = TABLES[table]
    return {
        "task": "site",
        "tensorboard": False,
        "seed": SEED,
        "num-server-rounds": rounds,
        "data.label": spec.label,
        "data.kind": spec.kind,
        "data.categorical": ",".join(spec.categorical),
        "dataset-path": str(folder / "{partition-id}.csv"),
    }


def recorded_run(overrides: Mapping[str, Any], nodes: int, out: Path, name: str):
    """Run the ServerApp and ClientApp with ``overrides``; every exchange the server made, the
    run config and the run's config.json."""
    config = run_config(**{"output-dir": str(out), "run-name": name, **counting(overrides)})
    grid = RecordingGrid(LocalGrid(client_app, config, nodes, keep_messages=False))
    server_main(grid, server_context(config))
    return grid.exchanges, config, json.loads((out / name / "config.json").read_text())


# -- what the server holds --------------------------------------------------------------------
def _arrays(content: RecordDict, name: str) -> dict[str, np.ndarray]:
    record = content.get(name)
    if not isinstance(record, ArrayRecord):
        return {}
    return {key: array.numpy() for key, array in record.items()}


def _config(content: RecordDict, name: str) -> dict[str, Any]:
    record = content.get(name)
    return dict(record) if isinstance(record, ConfigRecord) else {}


def _booster_json(content: RecordDict) -> Any:
    raw = _arrays(content, ARRAYS).get("0")
    try:
        return json.loads(raw.tobytes()) if raw is not None else None
    except ValueError:
        return None


class Numeric(NamedTuple):
    """A numeric column of the agreed schema: its place among them, name and scaling."""

    index: int
    name: str
    scale: attacks.Standardised


def numeric_columns(schema: Schema) -> dict[int, Numeric]:
    """The schema's numeric columns by their column in what the nodes train on (x)."""
    out, at = {}, 0
    for column in schema.columns:
        if column.categories is None:
            out[at] = Numeric(len(out), column.name, attacks.Standardised(column.mean, column.std))
        at += column.width
    return out


@dataclass(frozen=True)
class ServerView:
    """A run as the server saw it: each node's exchanges in order, the agreed schema (and its
    numeric columns), the run config, and each node's partition (stated in its facts reply)."""

    exchanges: dict[int, list[Exchange]]
    schema: Schema
    numeric: dict[int, Numeric]
    config: Mapping[str, Any]
    partitions: dict[int, int]

    @classmethod
    def of(
        cls, exchanges: Sequence[Exchange], config: Mapping[str, Any], run: Mapping
    ) -> ServerView:
        by_node: dict[int, list[Exchange]] = {}
        partitions = {}
        for e in exchanges:
            if e.reply is None or e.reply.has_error():
                continue
            node = e.sent.metadata.dst_node_id
            by_node.setdefault(node, []).append(e)
            partition = _config(e.reply.content, SITE).get(PARTITION_ID)
            if e.sent.metadata.message_type == QUERY_FACTS and isinstance(partition, int):
                partitions[node] = partition
        schema = Schema.from_json(json.dumps(run["sites"]["schema"]))
        return cls(by_node, schema, numeric_columns(schema), config, partitions)

    def of_type(self, node: int, message_type: str) -> list[Exchange]:
        return [e for e in self.exchanges[node] if e.sent.metadata.message_type == message_type]

    def label(self, z: float) -> float:
        """A recovered label in the file's units: the class index, or the target."""
        if self.schema.kind != REGRESSION:
            return float(z)
        target = attacks.Standardised(*self.schema.target)
        return float(attacks.decoded(np.array([z]), target)[0])

    def rows(self, node: int) -> int:
        """The node's training rows, as its ``query.moments`` reply states them (0: none)."""
        for e in self.of_type(node, QUERY_MOMENTS):
            try:
                return int(json.loads(_config(e.reply.content, SITE)[SITE_MOMENTS])["rows"])
            except (KeyError, TypeError, ValueError):
                return 0
        return 0

    def facts(self, node: int) -> dict:
        for e in self.of_type(node, QUERY_FACTS):
            try:
                return json.loads(_config(e.reply.content, SITE)[SITE_FACTS])
            except (KeyError, TypeError, ValueError):
                return {}
        return {}


@dataclass
class Findings:
    """What the attacks recovered about one site, in its own units: value claims per numeric
    column (alternatives each), labelled claims ((column, value, label) alternatives, rows),
    single-row slots or leaves (None: no attack applies), stated values per column name, and
    the training replies whose content the family's attack decoded (None: it has none)."""

    values: list[tuple[int, tuple[float, ...]]] = field(default_factory=list)
    labelled: list[tuple[tuple[tuple[int, float, float], ...], int]] = field(default_factory=list)
    single: int | None = None
    facts: dict[str, set[float]] = field(default_factory=dict)
    read: int | None = None

    def disclose(self, name: str, values: Sequence[float]) -> None:
        self.facts.setdefault(name, set()).update(v for v in values if np.isfinite(v))


def _value_claims(view: ServerView, by_column: Mapping[int, Sequence[float]]) -> list:
    """Claims of distinct standardised values per x column, decoded."""
    claims = []
    for f, values in by_column.items():
        if f in view.numeric and len(values):
            column, _, scale = view.numeric[f]
            decoded = attacks.decoded(np.array(sorted(values), np.float32), scale)
            claims += [(column, (float(v),)) for v in decoded]
    return claims


# -- the attacks of each family ----------------------------------------------------------------
def hist_findings(view: ServerView, node: int, found: Findings) -> None:
    """fedxgb-hist: the sketch's values; every level's histograms' labelled slots."""
    sketch: list[attacks.SketchColumn] = []
    for e in view.of_type(node, QUERY_SKETCH):
        sketch = attacks.sketch_columns(_arrays(e.reply.content, SKETCH))
    for f, (column, _, scale) in view.numeric.items():
        if f < len(sketch):
            for v in attacks.decoded(sketch[f].values.astype(np.float32), scale):
                found.values.append((column, (float(v),)))
    objective = attacks.objective_of(view.schema.num_classes)
    merged = int(view.config.get("fedxgb-hist.min-bin-count", 0)) > 1
    layout, start, claims, level, found.single, found.read = None, None, [], 0, 0, 0
    for e in view.of_type(node, TRAIN):
        sent = e.sent.content
        if LAYOUT in sent:  # a round's root: the booster and the edges come with it
            layout, level = attacks.layout_of(_arrays(sent, LAYOUT)), 0
            start = _start(objective, view.schema.num_classes, _booster_json(sent))
        leaves = [tuple(p) for p in _arrays(sent, GROWING).get("open", np.zeros((0, 2)))]
        if layout is None:
            continue
        reply = _arrays(e.reply.content, HISTOGRAMS)
        found.read += attacks.read_histograms(reply, layout, len(leaves)) is not None
        server_round = int(_config(sent, CONFIG).get(SERVER_ROUND, 0))
        if server_round == 1 and level == 0:
            found.single = attacks.single_row_slots(reply, layout, len(leaves))
        claims += attacks.histogram_labels(
            reply, layout, leaves, objective, start, sketch, merged, (server_round, level)
        )
        level += 1
    _add_labelled(view, found, attacks.combined(claims))


def _start(objective: str, classes: int, booster: Any) -> float | None:
    """Every row's prediction at a round's root when the booster has no tree yet (None
    otherwise): 1/K for softmax, 0.5 for the logistic (a margin of 0), the base score for
    squared error."""
    if booster is None or attacks.xgboost_trees(booster):
        return None
    if objective == attacks.SQUARED:
        try:
            score = booster["learner"]["learner_model_param"]["base_score"]
            return float(score.strip("[]").split(",")[0])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
    return 0.5 if objective == attacks.LOGISTIC else 1.0 / classes


def _add_labelled(view: ServerView, found: Findings, rows: Mapping[tuple, int]) -> None:
    for (f, z, label), count in rows.items():
        if f in view.numeric:
            column, _, scale = view.numeric[f]
            value = float(attacks.decoded(np.array([z], np.float32), scale)[0])
            found.labelled.append((((column, value, view.label(label)),), count))


def bagging_findings(view: ServerView, node: int, found: Findings) -> None:
    """fedxgb-bagging: the new trees' split conditions; their single-row leaves where every
    row's hessian is known (squared error; a classification's first round)."""
    conditions: dict[int, set[float]] = {}
    classes = view.schema.num_classes
    found.single, found.read = 0, 0
    for e in view.of_type(node, TRAIN):
        model = _booster_json(e.reply.content)
        found.read += bool(attacks.xgboost_trees(model))
        for f, values in attacks.xgboost_conditions(model).items():
            conditions.setdefault(f, set()).update(values)
        if not classes:
            found.single += attacks.xgboost_single_row_leaves(model, 1.0)
        elif _start(attacks.SOFTMAX, classes, _booster_json(e.sent.content)) is not None:
            p = 1.0 / classes
            found.single += attacks.xgboost_single_row_leaves(model, 2 * p * (1 - p))
    found.values += _value_claims(view, conditions)


def ffgb_findings(view: ServerView, node: int, found: Findings) -> None:
    """FFGB: every reply's learners, as the server decodes them. Tree thresholds are midpoints
    of two values (nothing exact); with Newton leaves and classes, the first learner of round 1
    gives its leaves' rows."""
    classes = view.schema.num_classes
    newton = view.config.get("ffgb.tree-leaves", "auto") in ("auto", "newton")
    found.read = 0
    if classes and newton:
        found.single = 0
    for e in view.of_type(node, TRAIN):
        reply = e.reply.content
        trees = attacks.first_trees(_config(reply, DELTA), _arrays(reply, DELTA_ARRAYS))
        found.read += bool(trees)
        first = int(_config(e.sent.content, CONFIG).get(SERVER_ROUND, 0)) == 1
        if found.single is not None and first and trees and isinstance(trees[0], TreeArrays):
            tree = trees[0]
            found.single += attacks.single_row_tree_leaves(
                tree.children_left, tree.children_right, tree.value, 1 / classes, view.rows(node)
            )


def fedfun_findings(view: ServerView, node: int, found: Findings) -> None:
    """FedFun with KDDTs: every split of a node's own model, where its reply holds it in the
    clear (sealed, ``relay-encryption``, it holds none), is a smoothed row's box edge (value =
    threshold ± radius in the agreed cube), labelled where the leaves on that side are pure;
    the ends of each feature's range in ``query.bounds`` are claimed as facts."""
    for e in view.of_type(node, QUERY_BOUNDS):
        for f, pair in enumerate(attacks.bounds_values(_arrays(e.reply.content, BOUNDS))):
            if f in view.numeric:
                _, name, scale = view.numeric[f]
                found.disclose(name, attacks.decoded(np.array(pair, np.float32), scale).tolist())
    delta = float(view.config.get("fedfun.delta", 0.0))
    box: dict[str, np.ndarray] = {}
    seen_values, seen_labels = set(), set()
    found.read = 0
    for e in view.of_type(node, TRAIN):
        box = _arrays(e.sent.content, BOUNDS) or box
        model = _arrays(e.reply.content, MODEL_ARRAYS)
        found.read += attacks.kddt_arrays(model, REPLY_PREFIX) is not None
        if set(box) != {"lower", "upper"}:
            continue
        splits = attacks.kddt_splits(
            model,
            REPLY_PREFIX,
            delta / (1 + 2 * delta),
            view.schema.kind != REGRESSION,
        )
        for split in splits:
            if split.feature not in view.numeric:
                continue
            column, _, scale = view.numeric[split.feature]
            cube = attacks.InCube(
                scale, box["lower"][split.feature], box["upper"][split.feature], delta
            )
            right, left = attacks.decoded(np.array([split.right, split.left], np.float32), cube)
            seen_values.add((column, float(right), float(left)))
            sides = [(float(right), split.right_label), (float(left), split.left_label)]
            labelled = tuple((column, v, label) for v, label in sides if label is not None)
            if labelled:
                seen_labels.add(labelled)
    found.values += [(column, pair) for column, *pair in sorted(seen_values)]
    found.labelled += [(claim, 1) for claim in sorted(seen_labels)]


def vector_findings(record: str, view: ServerView, node: int, found: Findings) -> None:
    """A network family whose node sends one vector under ``record`` (FedAvg's model, FedFW's
    points s_i, FedDR's x_hat_i): the replies that hold it in the clear. No exact value travels
    in it; gradient inversion starts from it (``benchmarks.privacy_dlg``)."""
    replies = view.of_type(node, TRAIN)
    found.read = sum(attacks.plain_vector(_arrays(e.reply.content, record)) for e in replies)


Attack = Callable[[ServerView, int, Findings], None]
FAMILY_ATTACKS: dict[str, Attack] = {
    "fedxgb-hist": hist_findings,
    "fedxgb-bagging": bagging_findings,
    "ffgb": ffgb_findings,
    "fedfun": fedfun_findings,
    "fedavg": partial(vector_findings, ARRAYS),
    "fedfw": partial(vector_findings, FW_POINT),
    "feddr": partial(vector_findings, DR_XHAT),
}


def findings(view: ServerView, node: int, algorithm: str) -> Findings:
    """Everything the server recovers about ``node``'s site."""
    found = Findings()
    for name, values in attacks.facts_values(view.facts(node)).items():
        found.disclose(name, values)
    attack = FAMILY_ATTACKS.get(algorithm)
    if attack is not None:
        attack(view, node, found)
    return found


# -- scoring against the site's file ----------------------------------------------------------
@dataclass(frozen=True)
class SiteTruth:
    """A site's file: its training rows' numeric features (the schema's numeric columns, in
    order; NaN missing) and labels (class index, or the target), and every numeric column the
    facts describe over all its rows."""

    names: tuple[str, ...]
    x: np.ndarray
    y: np.ndarray
    columns: dict[str, np.ndarray]


def site_truth(path: Path, schema: Schema, settings: RunSettings, partition: int) -> SiteTruth:
    """The file of ``partition`` under the run's schema and split (``tasks.site_data``)."""
    table = read_site_file(path)
    train, _ = training_rows(
        table, {}, settings.local_test or settings.test_fraction, partition, settings.seed
    )
    names = [c.name for c in schema.columns if c.categories is None]
    columns = {name: numeric_column(table, name) for name in names}
    if schema.kind == REGRESSION:
        columns[schema.label] = numeric_column(table, schema.label)
        y = columns[schema.label]
    else:
        index = {c: float(i) for i, c in enumerate(schema.classes)}
        y = table.frame[schema.label].map(text).map(index).to_numpy(dtype=np.float64)
    x = np.column_stack([columns[n] for n in names])
    return SiteTruth(tuple(names), x[train], y[train], columns)


def score(found: Findings, truth: SiteTruth, exact: bool, replies: int) -> dict[str, Any]:
    """The site's figures: values, labels, single-row, facts (recovered, out of), and the
    replies read of the node's ``replies`` training replies."""
    values = sum(
        attacks.recovered([alt for c, alt in found.values if c == column], truth.x[:, column])
        for column in range(truth.x.shape[1])
    )
    facts = sum(
        attacks.recovered([(v,) for v in sorted(found.facts.get(name, ()))], column)
        for name, column in truth.columns.items()
    )
    by_column = {
        name: attacks.labelled_rows(
            [c for c in found.labelled if c[0][0][0] == i], truth.x, truth.y
        )
        for i, name in enumerate(truth.names)
    }
    return {
        "rows": len(truth.y),
        "values": values if exact else None,
        "numeric_values": int(np.sum(~np.isnan(truth.x))),
        "labels": attacks.labelled_rows(found.labelled, truth.x, truth.y) if exact else None,
        "labels_by_column": {k: v for k, v in by_column.items() if v} if exact else None,
        "single_row": found.single if exact else None,
        "facts": facts,
        "file_values": int(sum(np.sum(~np.isnan(c)) for c in truth.columns.values())),
        "replies_read": found.read,
        "replies": replies,
    }


# -- the benchmark ----------------------------------------------------------------------------
def run_case(case: Case, table: str, folder: Path, rounds: int, out: Path) -> dict[str, dict]:
    """Each site's figures in one run of ``case`` on ``table``'s sites in ``folder``."""
    names = {
        v["partition-id"]: k
        for k, v in json.loads((folder / "sites.json").read_text())["sites"].items()
    }
    name = f"{table}-{case.name}".replace(" ", "").replace(",", "-")
    overrides = {
        **site_overrides(table, folder, rounds),
        "algorithm": case.algorithm,
        **case.overrides,
    }
    exchanges, config, run = recorded_run(overrides, len(names), out, name)
    view = ServerView.of(exchanges, config, run)
    settings = RunSettings.from_run_config(config)
    figures = {}
    for node, partition in sorted(view.partitions.items(), key=lambda item: item[1]):
        found = findings(view, node, case.algorithm)
        truth = site_truth(folder / f"{partition}.csv", view.schema, settings, partition)
        replies = len(view.of_type(node, TRAIN))
        figures[names[partition]] = score(found, truth, case.exact, replies)
    return figures


def share(part: int | None, whole: int) -> str:
    """A figure as a percentage of ``whole`` with both counts (None: not applicable)."""
    if part is None:
        return NOT_APPLICABLE
    return f"{100 * part / whole:.1f} % ({part}/{whole})" if whole else "0"


def table_rows(results: Mapping[str, Mapping[str, Mapping[str, dict]]]) -> list[list[str]]:
    """The report's main table: one row per case and site."""
    rows = []
    for case, tables in results.items():
        for table, sites in tables.items():
            for site, f in sites.items():
                read = f["replies_read"]
                rows.append(
                    [
                        case,
                        f"{table}: {site}",
                        f["rows"],
                        share(f["values"], f["numeric_values"]),
                        share(f["labels"], f["rows"]),
                        NONE if f["single_row"] is None else f["single_row"],
                        f"{f['facts']} of {f['file_values']}",
                        NONE if read is None else f"{read} of {f['replies']}",
                    ]
                )
    return rows


def by_column_rows(results: Mapping[str, Mapping[str, Mapping[str, dict]]]) -> list[list[str]]:
    """Per site with labels, the rows each column's exact values give a label to."""
    rows = []
    for case, tables in results.items():
        for table, sites in tables.items():
            for site, f in sites.items():
                if f["labels"]:
                    given = ", ".join(f"{k} {v}" for k, v in f["labels_by_column"].items())
                    rows.append([case, f"{table}: {site}", given])
    return rows


NOTES = """\
Per site: *values*, the share of its numeric training values (present ones) the server holds
exactly, in the file's units, each counted at most as often as the server found it; *labels*,
the share of its training rows whose label the server recovers together with an exact value of
the row; *single-row*, root histogram slots (fedxgb-hist, round 1) or tree leaves (fedxgb-bagging:
where the hessian sums count rows; FFGB: the first learner of round 1, Newton leaves) holding one
row, each revealing that row's label or residual (not counted in *labels*: the row's value is
not exact); *facts*, the file's values among those the agreement's facts (and FedFun's
`query.bounds`) state, each range's ends and a magnitude that could be a row's (coarsened to
powers of two: none), of the file's present numeric values (features, and the label for
regression), train and test rows; *replies read*, the node's training replies whose own content
(histograms, trees, a model, FedFW's points s_i, FedDR's x_hat_i) the family's attack decodes,
of those that came: what every attack here, and gradient inversion, starts from.

- fedxgb-hist: the sketch of a column with fewer rows than `sketch-size` holds every rank, so
  it is the column; a slot's class counts are count / K - grad sum at round 1 (every row at the
  base score), and after it a single-row slot's gradient sign still gives its class; a slot's
  value is exact when the node's sketch has one value in its bins (with `min-bin-count`, the
  bins merged into it). Not used: the sibling histograms the server derives by subtraction,
  which can only add. With `min-bin-count` a slot still gives its value where the site's column
  holds one value in the merged bins: a column of few distinct values (a year) keeps labelling
  whole slots. A site holding one class (penguins: Torgersen) has every label known from its
  facts alone.
- fedxgb-bagging: split conditions are the node's own cut points, its values; a leaf's
  `sum_hessian` counts its rows where every row's hessian is known.
- FFGB trees: thresholds are midpoints of two training values (scikit-learn's CART), never
  claimed as values; Newton leaf values give each leaf's rows and class counts in round 1. With
  `relay-encryption` each learner travels sealed under the nodes' group key: the reply holds
  ciphertext (and the schedule's weights) and no tree to read.
- FedFun KDDT: a threshold is the edge of a smoothed row's box, the row's value ± the kernel
  radius (the server knows the cube map and the radius); both are claimed, one recovered at most.
  A node's tree is fitted to its neighbours' leaves too, so its thresholds also carry their
  values: a value found may be a neighbour's that this site shares. `query.bounds` states each
  feature's range as the powers of two just outside it (no row's value); the agreed box, their
  union, is the cube map the attack uses. With `relay-encryption` a node's model travels
  sealed to its neighbours and itself: the reply holds ciphertext and no tree to read.
- Networks (FFGB MLP, FedAvg, FedFW, FedDR): exact values are not the measure (see
  `benchmarks.privacy_dlg`); their facts are the agreement's, as every family's.
- `secure-aggregation`: a node's training reply is its masked vector in a secure sum (FedAvg's
  model, fedxgb-hist's histograms, the change of FedFW's x_i and of FedDR's x_hat_i), under the
  sum's own record: the family's record, which the attack reads, is not in it.
"""


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    rounds = 1 if args.quick else args.rounds
    tables = ("penguins",) if args.quick else ("penguins", "cars")
    start = time.monotonic()
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="privacy-") as tmp:
        work = Path(tmp)
        for table in tables:
            write_sites(table, work / table)
        for case in CASES:
            for table in (t for t in case.tables if t in tables):
                case_start = time.monotonic()
                figures = run_case(case, table, work / table, rounds, work / "runs")
                results.setdefault(case.name, {})[table] = figures
                print(f"{case.name} on {table}: {time.monotonic() - case_start:.1f} s", flush=True)
    wall = time.monotonic() - start
    out = results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    payload = {
        "command": command_line(),
        "machine": info,
        "wall_s": wall,
        "rounds": rounds,
        "cases": [asdict(c) for c in CASES],
        "results": results,
    }
    (out / "privacy.json").write_text(json.dumps(payload, indent=1) + "\n")
    headers = [
        "case",
        "site",
        "training rows",
        "values",
        "labels",
        "single-row",
        "facts",
        "replies read",
    ]
    write_report(
        out / "privacy.md",
        "What a curious server reads back about each site",
        wall,
        f"{rounds} round(s), seed {SEED}, 3 sites a table.\n\n"
        + md_table(headers, table_rows(results))
        + "\n\nThe rows whose label comes with each column's exact value (a row may come with "
        "several):\n\n"
        + md_table(["case", "site", "rows by column"], by_column_rows(results))
        + "\n\n"
        + NOTES,
        info=info,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
