"""XGBoost boosters on the wire: XGBoost's own JSON model format, never a pickle, validated.

A booster travels as the bytes ``xgboost.Booster.save_raw("json")`` writes, in one uint8 array
(key ``"0"`` of an ArrayRecord, as Flower's ``FedXgbBagging`` and ``FedXgbCyclic`` send it).
JSON rather than UBJSON: it is what Flower's xgboost strategies and examples exchange, and
Python parses it without another decoder (UBJSON was 22 % smaller for 100 depth-6 trees on
``synthetic``, 34 % larger for 6 depth-2 trees on iris). ``read_booster`` bounds the bytes
before anything is parsed, parses them with Python's ``json`` (NaN and Infinity refused), checks
every part beside the trees against the run's ``BoosterSpec`` (objective, features, classes,
base score: exactly what ``encode_booster`` writes) and every tree: a binary tree of numeric
splits on known features, no deeper than the run allows, with finite values. It returns a
``Booster``, the trees as numpy arrays; ``encode_booster`` writes the canonical JSON back from
them, so nothing of a received model but its checked trees is ever sent on or loaded into
XGBoost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from functions.errors import DecodeError, NonFiniteError
from functions.params import array_to_numpy, arrays_to_record, npy_data_bytes
from functions.xgboost_trees import ROOT_PARENT, Tree

SOFTPROB, SQUARED_ERROR, LOGISTIC = "multi:softprob", "reg:squarederror", "binary:logistic"
KEY = "0"  # the array's key in its ArrayRecord (Flower's xgboost strategies read arrays["0"])
FORMAT_VERSION = (3, 2, 0)  # the model format written (xgboost-cpu 3.2)
_EMPTY_CATS = {"enc": [], "feature_segments": [], "sorted_idx": []}


@dataclass(frozen=True)
class BoosterSpec:
    """What every booster of a run agrees on: the objective (multi-class softmax with
    ``num_class`` classes, squared error with ``num_class`` 0, or with ``binary`` the logistic
    loss of 2 classes, ``num_class`` 0 as XGBoost writes it), the input width, the base score,
    the deepest tree and the most bytes a booster may take."""

    num_class: int
    num_feature: int
    max_depth: int
    max_bytes: int
    binary: bool = False

    @property
    def objective(self) -> str:
        if self.binary:
            return LOGISTIC
        return SOFTPROB if self.num_class else SQUARED_ERROR

    @property
    def outputs(self) -> int:
        """Trees per boosting iteration: one per class, or one."""
        return self.num_class or 1

    @property
    def classes(self) -> int:
        """How many classes the booster tells apart (0: a regression)."""
        return 2 if self.binary else self.num_class

    @property
    def base_score(self) -> float:
        """The agreed start f0 of every output (0.5 for classes: softmax ignores a common
        shift, and the logistic's 0.5 is a margin of 0; 0 for a standardised target), so every
        node's trees add to the same base."""
        return 0.5 if self.classes else 0.0

    @property
    def max_nodes(self) -> int:
        return 2 ** (self.max_depth + 1) - 1

    def params(self) -> dict[str, Any]:
        """The XGBoost parameters that define the model (a node adds its training ones)."""
        params = {
            "objective": self.objective,
            "base_score": self.base_score,
            "max_depth": self.max_depth,
        }
        return {**params, "num_class": self.num_class} if self.num_class else params

    def header(self, num_trees: int) -> dict[str, Any]:
        """The model's JSON beside its trees, as XGBoost 3.2 writes it."""
        objective: dict[str, Any] = (
            {"name": SOFTPROB, "softmax_multiclass_param": {"num_class": str(self.num_class)}}
            if self.num_class
            else {"name": self.objective, "reg_loss_param": {"scale_pos_weight": "1"}}
        )
        iterations = num_trees // self.outputs
        return {
            "attributes": {},
            "feature_names": [],
            "feature_types": [],
            "learner_model_param": {
                "base_score": "[" + ",".join([repr(self.base_score)] * self.outputs) + "]",
                "boost_from_average": "0",
                "num_class": str(self.num_class),
                "num_feature": str(self.num_feature),
                "num_target": "1",
            },
            "objective": objective,
            "gradient_booster": {
                "name": "gbtree",
                "model": {
                    "cats": _EMPTY_CATS,
                    "gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(num_trees)},
                    "iteration_indptr": [i * self.outputs for i in range(iterations + 1)],
                    "tree_info": [i % self.outputs for i in range(num_trees)],
                    "trees": [],
                },
            },
        }


@dataclass(frozen=True, eq=False)
class Booster:
    """A checked booster: its spec and trees (iteration after iteration, one tree per output)."""

    spec: BoosterSpec
    trees: tuple[Tree, ...] = ()

    @property
    def iterations(self) -> int:
        return len(self.trees) // self.spec.outputs

    def plus(self, added: Iterable[Booster]) -> Booster:
        """This booster with the trees of ``added`` appended in order (bagging: each node's
        new trees, all grown on this booster)."""
        return Booster(self.spec, self.trees + tuple(t for b in added for t in b.trees))

    def check_prefix_of(self, other: Booster, new_iterations: int) -> None:
        """``DecodeError`` unless ``other`` is this booster's trees, unchanged, followed by
        exactly ``new_iterations`` more iterations (cyclic: the node boosts on top of it)."""
        expected = self.iterations + new_iterations
        if other.iterations != expected:
            raise DecodeError(
                f"holds {other.iterations} iterations, expected {expected} (the "
                f"global booster's {self.iterations} and {new_iterations} new)"
            )
        for i, (held, sent) in enumerate(zip(self.trees, other.trees)):
            if not held.same_as(sent):
                raise DecodeError(
                    f"tree {i} differs from the global booster's tree {i} (a "
                    "reply may only add trees)"
                )


def class_margins(spec: BoosterSpec, outputs: np.ndarray) -> np.ndarray:
    """A booster's raw outputs (n, outputs) as the margins its loss is scored on: the logistic's
    one margin m becomes the two-class softmax's (0, m); others are unchanged."""
    if spec.binary:
        return np.hstack([np.zeros_like(outputs), outputs])
    return outputs


# -- encoding ---------------------------------------------------------------------------------
def _floats(array: np.ndarray) -> list[float]:
    """float32 values as the shortest decimals that read back to them exactly."""
    return [float(text) for text in array.astype(str)]


def _tree_json(tree: Tree, index: int, num_feature: int) -> dict[str, Any]:
    n = tree.num_nodes
    return {
        "base_weights": _floats(tree.base_weight),
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "default_left": tree.default_left.tolist(),
        "id": index,
        "left_children": tree.left.tolist(),
        "loss_changes": _floats(tree.loss_change),
        "parents": tree.parents().tolist(),
        "right_children": tree.right.tolist(),
        "split_conditions": _floats(tree.split_condition),
        "split_indices": tree.split_index.tolist(),
        "split_type": [0] * n,
        "sum_hessian": _floats(tree.sum_hessian),
        "tree_param": {
            "num_deleted": "0",
            "num_feature": str(num_feature),
            "num_nodes": str(n),
            "size_leaf_vector": "1",
        },
    }


def encode_booster(booster: Booster) -> bytes:
    """The canonical JSON of ``booster`` (XGBoost loads it; ``decode_booster`` reads it back)."""
    spec = booster.spec
    learner = spec.header(len(booster.trees))
    learner["gradient_booster"]["model"]["trees"] = [
        _tree_json(tree, i, spec.num_feature) for i, tree in enumerate(booster.trees)
    ]
    return json.dumps(
        {"learner": learner, "version": list(FORMAT_VERSION)}, separators=(",", ":")
    ).encode()


def raw_record(raw: bytes) -> ArrayRecord:
    """Model bytes as Flower's xgboost strategies carry them: one uint8 array at ``"0"``."""
    return arrays_to_record({KEY: np.frombuffer(raw, dtype=np.uint8)})


def booster_record(booster: Booster) -> ArrayRecord:
    return raw_record(encode_booster(booster))


# -- decoding ---------------------------------------------------------------------------------
def record_raw(record: object, max_bytes: int) -> bytes:
    """The model bytes of a received record: exactly one 1-D uint8 array at ``"0"`` of at most
    ``max_bytes`` (read from the array's header before it is loaded)."""
    if not isinstance(record, ArrayRecord) or set(record) != {KEY}:
        found = sorted(record)[:5] if isinstance(record, ArrayRecord) else type(record).__name__
        raise DecodeError(f"expected an ArrayRecord of one array {KEY!r}, got {found}")
    size = npy_data_bytes(record[KEY], KEY)
    if size > max_bytes:
        raise DecodeError(
            f"the booster takes {size} bytes, more than fedxgb.max-booster-bytes={max_bytes}"
        )
    array = array_to_numpy(record[KEY], KEY)
    if array.dtype != np.uint8 or array.ndim != 1:
        raise DecodeError(f"the booster must be 1-D uint8 bytes, got {array.dtype} {array.shape}")
    return array.tobytes()


def read_booster(record: object, spec: BoosterSpec) -> tuple[Booster, bytes]:
    """The checked booster of a received record, and its bytes."""
    raw = record_raw(record, spec.max_bytes)
    return decode_booster(raw, spec), raw


def _refuse_constant(name: str) -> None:
    raise DecodeError(f"not a finite number: {name}")


def decode_booster(raw: bytes, spec: BoosterSpec) -> Booster:
    """The booster in XGBoost JSON ``raw``, checked against ``spec``; ``DecodeError`` naming
    the first fault."""
    if len(raw) > spec.max_bytes:
        raise DecodeError(
            f"the booster takes {len(raw)} bytes, more than "
            f"fedxgb.max-booster-bytes={spec.max_bytes}"
        )
    try:
        model = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        if isinstance(err, DecodeError):
            raise
        raise DecodeError(f"not XGBoost JSON ({type(err).__name__}: {str(err)[:80]})") from None
    _keys(model, {"learner", "version"}, "the model")
    version = model["version"]
    if not (
        isinstance(version, list)
        and len(version) == 3
        and all(type(v) is int and 0 <= v < 1000 for v in version)
    ):
        raise DecodeError(f"version: expected three small integers, got {_shown(version)}")
    learner = model["learner"]
    _keys(
        learner,
        {
            "attributes",
            "feature_names",
            "feature_types",
            "gradient_booster",
            "learner_model_param",
            "objective",
        },
        "learner",
    )
    booster = _dict(learner["gradient_booster"], "gradient_booster")
    _keys(booster, {"model", "name"}, "gradient_booster")
    trees = _dict(booster["model"], "gradient_booster.model").get("trees")
    if not isinstance(trees, list):
        raise DecodeError("gradient_booster.model.trees: expected a list")
    _check_header(learner, spec, len(trees))
    return Booster(spec, tuple(_tree(t, i, spec) for i, t in enumerate(trees)))


def _shown(value: object, limit: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dict(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise DecodeError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _keys(value: object, keys: set[str], where: str) -> None:
    found = set(_dict(value, where))
    if found != keys:
        raise DecodeError(
            f"{where}: unexpected keys {sorted(found - keys)[:5]}, missing "
            f"{sorted(keys - found)[:5]}"
        )


def _check_header(learner: Mapping[str, Any], spec: BoosterSpec, num_trees: int) -> None:
    """Everything beside the trees must be what ``spec`` agrees (the base score compared by
    value: XGBoost writes it in its own notation)."""
    expected = spec.header(num_trees)
    for name in ("attributes", "feature_names", "feature_types", "objective"):
        if learner[name] != expected[name]:
            raise DecodeError(
                f"{name}: expected {_shown(expected[name])}, got {_shown(learner[name])}"
            )
    if num_trees % spec.outputs:
        raise DecodeError(
            f"{num_trees} trees are not whole iterations of {spec.outputs} "
            f"(one tree per {'class' if spec.num_class else 'output'})"
        )
    params = dict(_dict(learner["learner_model_param"], "learner_model_param"))
    _base_score(params.pop("base_score", None), spec)
    wanted = dict(expected["learner_model_param"])
    del wanted["base_score"]
    if params != wanted:
        raise DecodeError(
            f"learner_model_param: expected {_shown(wanted)}, got {_shown(params)} "
            f"(num_class {spec.num_class}, num_feature {spec.num_feature})"
        )
    model = dict(learner["gradient_booster"]["model"])
    del model["trees"]
    want_model = {k: v for k, v in expected["gradient_booster"]["model"].items() if k != "trees"}
    for name, value in want_model.items():
        if model.get(name) != value:
            raise DecodeError(
                f"gradient_booster.model.{name}: expected {_shown(value)}, got "
                f"{_shown(model.get(name))}"
            )
    if set(model) != set(want_model) or learner["gradient_booster"]["name"] != "gbtree":
        raise DecodeError("gradient_booster: not a gbtree model of the expected fields")


def _base_score(text: object, spec: BoosterSpec) -> None:
    values = None
    if isinstance(text, str) and text.startswith("[") and text.endswith("]") and len(text) < 4096:
        try:
            values = [float(v) for v in text[1:-1].split(",")]
        except ValueError:
            values = None
    if (
        values is None
        or len(values) != spec.outputs
        or any(np.float32(v) != np.float32(spec.base_score) for v in values)
    ):
        raise DecodeError(
            f"base_score: expected {spec.outputs} x {spec.base_score}, got {_shown(text)}"
        )


_INTS = {
    "left_children": "left",
    "right_children": "right",
    "split_indices": "split_index",
    "default_left": "default_left",
    "parents": "",
}
_FLOATS = {
    "split_conditions": "split_condition",
    "base_weights": "base_weight",
    "loss_changes": "loss_change",
    "sum_hessian": "sum_hessian",
}
_TREE_KEYS = {
    *_INTS,
    *_FLOATS,
    "categories",
    "categories_nodes",
    "categories_segments",
    "categories_sizes",
    "id",
    "split_type",
    "tree_param",
}


def _int_array(value: object, n: int, where: str) -> np.ndarray:
    if not (isinstance(value, list) and len(value) == n and set(map(type, value)) <= {int}):
        raise DecodeError(f"{where}: expected {n} integers")
    try:
        array = np.array(value, dtype=np.int64)
    except OverflowError:
        array = None
    if array is None or array.min() < -ROOT_PARENT or array.max() > ROOT_PARENT:
        raise DecodeError(f"{where}: expected {n} integers")
    return array


def _float_array(value: object, n: int, where: str) -> np.ndarray:
    if not (isinstance(value, list) and len(value) == n and set(map(type, value)) <= {int, float}):
        raise DecodeError(f"{where}: expected {n} numbers")
    with np.errstate(over="ignore"):
        array = np.array(value, dtype=np.float64).astype(np.float32)
    if not np.all(np.isfinite(array)):
        raise NonFiniteError(f"{where}: a value is not a finite float32")
    return array


def _tree(value: object, index: int, spec: BoosterSpec) -> Tree:
    where = f"tree {index}"
    _keys(value, _TREE_KEYS, where)
    param = value["tree_param"]
    n = _dict(param, f"{where}.tree_param").get("num_nodes")
    if not (isinstance(n, str) and n.isdigit() and 1 <= int(n) <= spec.max_nodes):
        raise DecodeError(
            f"{where}: {_shown(n)} nodes; a tree of depth <= "
            f"{spec.max_depth} has 1 to {spec.max_nodes}"
        )
    n = int(n)
    expected_param = {
        "num_deleted": "0",
        "num_feature": str(spec.num_feature),
        "num_nodes": str(n),
        "size_leaf_vector": "1",
    }
    if param != expected_param:
        raise DecodeError(f"{where}.tree_param: expected {expected_param}, got {_shown(param)}")
    if value["id"] != index or type(value["id"]) is not int:
        raise DecodeError(f"{where}: id {_shown(value['id'])}, expected {index}")
    if (
        any(
            value[k] != []
            for k in ("categories", "categories_nodes", "categories_segments", "categories_sizes")
        )
        or value["split_type"] != [0] * n
    ):
        raise DecodeError(f"{where}: categorical splits are not used")
    ints = {key: _int_array(value[key], n, f"{where}.{key}") for key in _INTS}
    floats = {name: _float_array(value[key], n, f"{where}.{key}") for key, name in _FLOATS.items()}
    tree = Tree(
        **{name: ints[key].astype(np.int32) for key, name in _INTS.items() if name}, **floats
    )
    _check_structure(tree, ints["parents"], spec, where)
    return tree


def _check_structure(tree: Tree, parents: np.ndarray, spec: BoosterSpec, where: str) -> None:
    """A binary tree rooted at node 0: each inner node has two children of higher index, each
    other node is the child of exactly one, the parents agree, depth <= ``max_depth``; splits on
    features of the spec; ``default_left`` 0 or 1."""
    n, left, right = tree.num_nodes, tree.left, tree.right
    leaf = left == -1
    inner = np.flatnonzero(~leaf)
    if (
        np.any((right == -1) != leaf)
        or np.any(left[inner] <= inner)
        or np.any(right[inner] <= inner)
        or np.any(left[inner] >= n)
        or np.any(right[inner] >= n)
    ):
        raise DecodeError(f"{where}: children are not two later nodes of the tree")
    children = np.sort(np.concatenate([left[inner], right[inner]]))
    if not np.array_equal(children, np.arange(1, n)):
        raise DecodeError(f"{where}: not a tree (a node has no parent or two)")
    if not np.array_equal(parents, tree.parents()):
        raise DecodeError(f"{where}: parents do not match the children")
    level, depth = np.array([0]), 0
    while True:
        level = np.concatenate([left[level][~leaf[level]], right[level][~leaf[level]]])
        if not len(level):
            break
        depth += 1
        if depth > spec.max_depth:
            raise DecodeError(f"{where}: deeper than fedxgb.max-depth={spec.max_depth}")
    if np.any(tree.split_index < 0) or np.any(tree.split_index >= spec.num_feature):
        raise DecodeError(f"{where}: a split on a feature outside 0..{spec.num_feature - 1}")
    if np.any((tree.default_left != 0) & (tree.default_left != 1)):
        raise DecodeError(f"{where}: default_left is not 0 or 1")
