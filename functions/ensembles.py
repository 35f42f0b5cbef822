"""Weighted ensembles of learners (FFGB's functions) and the versioned deltas that carry them.

An ensemble is f(x) = base + sum_k w_k h_k(x); learner h_k has sequence number k (1-based, its
position), so the ensemble's version is its length. An update appends learners and may first
multiply the whole old function by one scale (FFGB with mu > 0 and FFGB.L shrink f before adding:
g <- (1 - eta mu) g - eta h). A delta "since s" is what a node at version s lacks: the product of
the scales of all later updates and learners s+1..version with their current weights; the node
computes f_new = scale * f_old + sum of the new weighted learners. A delta since 0 is the whole
function (it alone carries ``base``).

Wire format (config values, arrays), learner k's keys under ``l{k}.``. Config: ``format`` (1),
``since``, ``count``, ``scale``, ``n_features``, ``n_outputs``, and per learner ``l{k}.weight``
(float), ``l{k}.kind`` ("tree" or "mlp") plus a network's spec (functions.networks). Arrays:
``base`` (float64, n_outputs; only when since is 0) and per learner its tree or network arrays
(functions.trees, functions.networks).

A node need not keep the ensemble at all: ``PredictionCache`` keeps f on the node's own inputs and
its version, evaluates each delta's learners once and drops them (DESIGN section 4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from functions.errors import DecodeError
from functions.networks import Network, decode_network, decode_spec, encode_network
from functions.params import arrays_to_record
from functions.records import payload_bytes
from functions.trees import TreeArrays, decode_tree, encode_tree

FORMAT = 1
HEADER = ("format", "since", "count", "scale", "n_features", "n_outputs")
_LEARNER_KEY = re.compile(r"l([1-9][0-9]*)\.(.+)")

Config = dict[str, int | float | str | list[int]]


class Learner(Protocol):
    """Anything that maps inputs (n, n_features) to outputs (n, n_outputs)."""

    def predict(self, x: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Limits:
    """Bounds a decoder enforces on what it accepts."""

    max_learners: int = 10_000  # ensemble size after the delta (since + count)
    max_nodes: int = 100_000  # per tree
    max_params: int = 1_000_000  # per network
    max_features: int = 1_000_000
    max_outputs: int = 10_000


@dataclass(frozen=True, eq=False)
class Delta:
    """f_new = scale * f_old + sum_k weights[k] * learners[k]; since 0: f_new = base + sum."""

    since: int
    scale: float
    learners: tuple[Learner, ...]
    weights: tuple[float, ...]
    n_features: int
    n_outputs: int
    base: np.ndarray | None = None  # exactly when since == 0

    def __post_init__(self) -> None:
        if (self.base is None) != (self.since != 0) or len(self.learners) != len(self.weights):
            raise ValueError("a delta has a base exactly when since is 0, and one weight a learner")

    @property
    def version(self) -> int:
        """The receiver's version after applying the delta."""
        return self.since + len(self.learners)


@dataclass(frozen=True, eq=False)
class Ensemble:
    """base + sum_k weights[k] * learners[k], with the history needed to encode deltas.

    ``updates`` holds (version before, scale) of every update made here; a delta can start at
    those versions, at the current one and at 0 (a node that received learners s+1..v in one
    delta knows no finer history, so it cannot encode a delta starting inside that range).
    """

    base: np.ndarray
    n_features: int
    learners: tuple[Learner, ...] = ()
    weights: tuple[float, ...] = ()
    updates: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.base.dtype != np.float64 or self.base.ndim != 1:
            raise ValueError(f"base must be 1-D float64, got {self.base.dtype} {self.base.shape}")
        if len(self.learners) != len(self.weights):
            raise ValueError("need one weight per learner")

    @classmethod
    def constant(cls, base: Sequence[float] | np.ndarray, n_features: int) -> Ensemble:
        """The constant function ``base`` (version 0), where boosting starts."""
        return cls(np.array(base, dtype=np.float64).reshape(-1), n_features)

    @property
    def version(self) -> int:
        return len(self.learners)

    @property
    def n_outputs(self) -> int:
        return len(self.base)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """f(x) as float64 (n, n_outputs), summed in learner order."""
        out = np.tile(self.base, (len(x), 1))
        for weight, learner in zip(self.weights, self.learners):
            out += weight * _evaluate(learner, x, self.n_outputs)
        return out

    def extend(
        self, learners: Sequence[Learner], weights: Sequence[float], scale: float = 1.0
    ) -> Ensemble:
        """scale * self + sum_k weights[k] * learners[k], as a new ensemble (one update)."""
        if len(learners) != len(weights):
            raise ValueError(f"{len(learners)} learners but {len(weights)} weights")
        if not np.all(np.isfinite([scale, *weights])):
            raise ValueError("scale and weights must be finite")
        if not learners:
            if scale != 1.0:
                raise ValueError("an update that rescales must add a learner (it marks a version)")
            return self
        return replace(
            self,
            base=self.base * scale,
            learners=self.learners + tuple(learners),
            weights=tuple(w * scale for w in self.weights) + tuple(float(w) for w in weights),
            updates=self.updates + ((self.version, float(scale)),),
        )

    def delta(self, since: int) -> Delta:
        """What a node at version ``since`` lacks (``ValueError`` if this history cannot tell)."""
        if since == 0:
            return Delta(0, 1.0, self.learners, self.weights, self.n_features, self.n_outputs,
                         self.base)
        if since != self.version and since not in {v for v, _ in self.updates}:
            raise ValueError(f"version {since} is not an update boundary of this ensemble")
        scale = math.prod(s for v, s in self.updates if v >= since)
        return Delta(since, scale, self.learners[since:], self.weights[since:], self.n_features,
                     self.n_outputs)

    def apply(self, delta: Delta) -> Ensemble:
        """The ensemble after ``delta``; ``DecodeError`` if it does not continue this one."""
        if (delta.n_features, delta.n_outputs) != (self.n_features, self.n_outputs):
            raise DecodeError(f"delta maps {delta.n_features} -> {delta.n_outputs}, ensemble "
                              f"{self.n_features} -> {self.n_outputs}")
        if delta.since == 0:
            return Ensemble(delta.base, delta.n_features, delta.learners, delta.weights)
        if delta.since != self.version:
            raise DecodeError(f"delta continues version {delta.since}, node is at {self.version}")
        return self.extend(delta.learners, delta.weights, delta.scale)


def average(ensemble: Ensemble, deltas: Sequence[Delta], fractions: Sequence[float]) -> Ensemble:
    """sum_i fractions[i] * g_i, where g_i is ``ensemble`` after ``deltas[i]`` (FFGB's server step).

    The result is one update: old learners scaled by sum_i p_i scale_i, each client's learners
    appended with weights multiplied by its fraction (1/n for FFGB's plain average).
    """
    if len(deltas) != len(fractions) or any(d.since != ensemble.version for d in deltas):
        raise ValueError(f"need one fraction per delta, each delta since {ensemble.version}")
    learners = [h for d in deltas for h in d.learners]
    weights = [p * w for d, p in zip(deltas, fractions) for w in d.weights]
    if ensemble.version == 0:
        base = sum(p * d.base for d, p in zip(deltas, fractions))
        return replace(ensemble, base=np.asarray(base, dtype=np.float64)).extend(learners, weights)
    scale = sum(p * d.scale for d, p in zip(deltas, fractions))
    return ensemble.extend(learners, weights, scale)


class PredictionCache:
    """f on a node's fixed inputs ``x``, kept current from deltas without storing learners.

    Costs n x n_outputs floats and a version number, whatever the ensemble's size; each delta's
    learners are evaluated once on ``x`` and can then be dropped.
    """

    def __init__(self, x: np.ndarray) -> None:
        self.x = np.asarray(x)
        self.version = 0
        self.values: np.ndarray | None = None

    def update(self, delta: Delta) -> np.ndarray:
        """Apply ``delta`` to the cached values; ``DecodeError`` if it does not continue them."""
        if delta.n_features != self.x.shape[1]:
            raise DecodeError(f"delta expects {delta.n_features} features, x has {self.x.shape[1]}")
        if delta.since == 0:
            values = np.tile(delta.base, (len(self.x), 1))
        elif self.values is None or delta.since != self.version:
            raise DecodeError(f"delta continues version {delta.since}, cache is at {self.version}")
        elif self.values.shape[1] != delta.n_outputs:
            raise DecodeError(f"delta has {delta.n_outputs} outputs, cache {self.values.shape[1]}")
        else:
            values = self.values * delta.scale
        for weight, learner in zip(delta.weights, delta.learners):
            values += weight * _evaluate(learner, self.x, delta.n_outputs)
        self.values, self.version = values, delta.version
        return values


def encode_learner(learner: Learner, prefix: str = "") -> tuple[Config, dict[str, np.ndarray]]:
    """Config (with ``kind``) and arrays of a tree or network, keys under ``prefix``."""
    if isinstance(learner, TreeArrays):
        return {prefix + "kind": "tree"}, encode_tree(learner, prefix)
    if isinstance(learner, Network):
        return encode_network(learner.spec, learner, prefix)
    raise TypeError(f"no wire format for a learner of type {type(learner).__name__}")


def decode_learner(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    prefix: str,
    n_features: int,
    n_outputs: int,
    limits: Limits = Limits(),
) -> Learner:
    """Rebuild a learner from its keys under ``prefix``; ``DecodeError`` on any fault."""
    kind = config.get(prefix + "kind")
    if kind == "tree":
        extra = sorted(k for k in config if k.startswith(prefix) and k != prefix + "kind")
        if extra:
            raise DecodeError(f"{prefix}tree: unexpected config keys {extra}")
        return decode_tree(arrays, prefix, n_features, n_outputs, limits.max_nodes)
    if kind == "mlp":
        sizes = decode_spec(config, prefix, limits.max_params).sizes
        if (sizes[0], sizes[-1]) != (n_features, n_outputs):
            raise DecodeError(f"{prefix}network maps {sizes[0]} -> {sizes[-1]}, expected "
                              f"{n_features} -> {n_outputs}")
        return decode_network(config, arrays, prefix, limits.max_params)
    raise DecodeError(f"{prefix}kind: unknown or missing learner kind {kind!r}")


def encode_delta(ensemble: Ensemble, since: int) -> tuple[Config, dict[str, np.ndarray]]:
    """The wire form of ``ensemble.delta(since)``: what a node at version ``since`` lacks."""
    return pack_delta(ensemble.delta(since))


def pack_delta(delta: Delta) -> tuple[Config, dict[str, np.ndarray]]:
    """Config values and arrays of a delta (see the module docstring)."""
    config: Config = {
        "format": FORMAT, "since": delta.since, "count": len(delta.learners),
        "scale": float(delta.scale), "n_features": delta.n_features, "n_outputs": delta.n_outputs,
    }
    arrays = {} if delta.since else {"base": np.asarray(delta.base, dtype=np.float64)}
    for seq, (weight, learner) in enumerate(zip(delta.weights, delta.learners), delta.since + 1):
        learner_config, learner_arrays = encode_learner(learner, f"l{seq}.")
        config.update(learner_config)
        config[f"l{seq}.weight"] = float(weight)
        arrays.update(learner_arrays)
    return config, arrays


def unpack_delta(
    config: Mapping[str, object], arrays: Mapping[str, np.ndarray], limits: Limits = Limits()
) -> Delta:
    """Decode and validate a delta; ``DecodeError`` on any fault.

    Checks the header (format, counts, sizes within ``limits``, finite scale, scale 1 when
    nothing is added or since is 0), that the learner keys are exactly ``l{since+1}`` to
    ``l{since+count}``, finite weights, a finite float64 base exactly when since is 0, and each
    learner with its own decoder.
    """
    if not isinstance(config, Mapping) or not isinstance(arrays, Mapping):
        raise DecodeError("expected mappings of config values and of arrays")
    if type(config.get("format")) is not int or config["format"] != FORMAT:
        raise DecodeError(f"format: expected {FORMAT}, got {config.get('format')!r}")
    since, count, n_features, n_outputs = (
        _header_int(config, key, 0, limit) for key, limit in (
            ("since", limits.max_learners), ("count", limits.max_learners),
            ("n_features", limits.max_features), ("n_outputs", limits.max_outputs))
    )
    if since + count > limits.max_learners:
        raise DecodeError(f"{since + count} learners is more than {limits.max_learners}")
    if min(n_features, n_outputs) < 1:
        raise DecodeError("n_features and n_outputs must be at least 1")
    scale = _number(config.get("scale"), "scale")
    if (count == 0 or since == 0) and scale != 1.0:
        raise DecodeError(f"scale {scale} with since={since}, count={count}: expected 1.0")
    config_groups = _group(config, set(HEADER), since, count, "config")
    array_groups = _group(arrays, {"base"} if since == 0 else set(), since, count, "array")
    base = None
    if since == 0:
        base = arrays.get("base")
        if not (isinstance(base, np.ndarray) and base.dtype == np.float64
                and base.shape == (n_outputs,) and np.all(np.isfinite(base))):
            raise DecodeError(f"base: expected finite float64 of shape ({n_outputs},)")
    learners, weights = [], []
    for seq in range(since + 1, since + count + 1):
        fields = config_groups.get(seq, {})
        weights.append(_number(fields.pop("weight", None), f"l{seq}.weight"))
        try:
            learners.append(decode_learner(fields, array_groups.get(seq, {}), "", n_features,
                                           n_outputs, limits))
        except DecodeError as err:
            raise DecodeError(f"l{seq}.{err}") from None
    return Delta(since, scale, tuple(learners), tuple(weights), n_features, n_outputs, base)


def apply_delta(
    ensemble: Ensemble | None,
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    limits: Limits = Limits(),
) -> Ensemble:
    """Decode a delta and apply it to ``ensemble`` (None: a node with nothing yet, since 0)."""
    delta = unpack_delta(config, arrays, limits)
    if ensemble is None:
        ensemble = Ensemble(np.zeros(delta.n_outputs), delta.n_features)
    return ensemble.apply(delta)


def payload_nbytes(config: Mapping[str, object], arrays: Mapping[str, np.ndarray]) -> int:
    """Payload bytes of an encoding as functions.records counts them in a message.

    Array data plus config values (8 per int or float, length of str/bytes); keys not counted.
    """
    content = RecordDict({"config": ConfigRecord(dict(config)), "arrays": arrays_to_record(arrays)})
    return payload_bytes(content)


def _evaluate(learner: Learner, x: np.ndarray, n_outputs: int) -> np.ndarray:
    out = np.asarray(learner.predict(x), dtype=np.float64)
    if out.shape != (len(x), n_outputs):
        raise ValueError(f"learner output shape {out.shape} != {(len(x), n_outputs)}")
    return out


def _header_int(config: Mapping[str, object], key: str, low: int, high: int) -> int:
    value = config.get(key)
    if type(value) is not int or not low <= value <= high:
        raise DecodeError(f"{key}: expected an int in [{low}, {high}], got {value!r}")
    return value


def _number(value: object, name: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise DecodeError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _group(
    mapping: Mapping[str, object], header: set[str], since: int, count: int, what: str
) -> dict[int, dict[str, object]]:
    """Split ``l{k}.field`` keys by k, refusing keys outside the header and since+1..since+count."""
    groups: dict[int, dict[str, object]] = {}
    for key, value in mapping.items():
        if key in header:
            continue
        match = _LEARNER_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None or not since < int(match.group(1)) <= since + count:
            raise DecodeError(f"unexpected {what} key {key!r} in a delta of learners "
                              f"{since + 1}..{since + count}")
        groups.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return groups
