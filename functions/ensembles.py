"""Weighted ensembles of learners (FFGB's functions) and the versioned deltas that carry them.

An ensemble is f(x) = base + sum_k w_k h_k(x); learner h_k has sequence number k (1-based). An
update appends learners and may first multiply the whole old function by one scale (FFGB with
mu > 0 and FFGB.L shrink f before adding: g <- (1 - eta mu) g - eta h); scale 0 replaces the
function (a distilled ensemble), after which learners 1..offset are gone and the version is
``offset + len(learners)``. A delta "since s" is what a node at version s lacks: the product of
the scales of all later updates and the later learners with their current weights, so that
f_new = scale * f_old + sum of the new weighted learners. A node's own learners of its last
round may be left out (``own_count``); the node adds ``own_factor`` times their values, which it
kept. A full delta carries ``base`` and every learner of the ensemble.

Wire format 2 (config values, arrays). Config: ``format``, ``full`` (bool), ``since``,
``count`` (learners carried), ``own_count``, ``own_factor``, ``scale``, ``n_features``,
``n_outputs``, ``groups``; then per group i (a maximal run of learners with one spec)
``g{i}.count`` and the spec under ``g{i}.`` (``kind`` "tree", or an MLP's or CNN's spec,
``functions.networks`` / ``functions.convnets``). Arrays: ``weights`` (float64, count),
``base`` (float64, n_outputs; only when full) and each group's learners packed field by field
under ``g{i}.`` (trees: ``functions.forest``; networks: one stacked array per parameter). A delta
of 50 trees is 5 arrays, not 250.

A node need not keep the ensemble at all: ``PredictionCache`` keeps f on the node's own inputs and
its version, evaluates each delta's learners once (batched, ``functions.batched``) and drops them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch

from functions import convnets, networks
from functions.batched import CPU, weighted_sum
from functions.convnets import ConvNetSpec
from functions.errors import DecodeError, NonFiniteError
from functions.forest import FIELDS as TREE_FIELDS
from functions.forest import join_packed_trees, pack_trees, unpack_trees
from functions.learners import Learner, learner_spec, same_spec_runs
from functions.limits import Limits
from functions.networks import NetworkSpec, pack_modules, unpack_modules
from functions.sealed_learners import (
    SEALED_KIND,
    SealedSpec,
    join_packed_sealed,
    pack_sealed,
    unpack_sealed,
)
from functions.trees import TreeSpec

FORMAT = 2
HEADER = (
    "format",
    "full",
    "since",
    "count",
    "own_count",
    "own_factor",
    "scale",
    "n_features",
    "n_outputs",
    "groups",
)
_GROUP_KEY = re.compile(r"g(0|[1-9][0-9]*)\.(.+)")

Config = dict[str, int | float | str | bool | list[int]]


@dataclass(frozen=True, eq=False)
class Delta:
    """f_new = scale * f_old + own_factor * (own learners) + sum_k weights[k] * learners[k];
    when full, f_new = base + sum_k weights[k] * learners[k] (learners since+1 .. version)."""

    since: int
    scale: float
    learners: tuple[Learner, ...]
    weights: tuple[float, ...]
    n_features: int
    n_outputs: int
    base: np.ndarray | None = None  # exactly when the delta is full
    own_count: int = 0
    own_factor: float = 0.0

    def __post_init__(self) -> None:
        if len(self.learners) != len(self.weights):
            raise ValueError("need one weight per learner")
        if self.full and (self.scale != 1.0 or self.own_count):
            raise ValueError("a full delta has scale 1 and no own learners")
        if self.own_count < 0 or (self.own_count == 0 and self.own_factor != 0.0):
            raise ValueError("own_factor needs own learners")

    @property
    def full(self) -> bool:
        return self.base is not None

    @property
    def version(self) -> int:
        """The receiver's version after applying the delta."""
        return self.since + self.own_count + len(self.learners)


@dataclass(frozen=True, eq=False)
class Ensemble:
    """base + sum_k weights[k] * learners[k] (sequence numbers offset+1 ..), with the history
    needed to encode deltas.

    ``updates`` holds (version before, scale) of every update made here; a delta can start at
    those versions and at the current one (a node that received learners s+1..v in one delta
    knows no finer history, so it cannot encode a delta starting inside that range).
    """

    base: np.ndarray
    n_features: int
    learners: tuple[Learner, ...] = ()
    weights: tuple[float, ...] = ()
    updates: tuple[tuple[int, float], ...] = ()
    offset: int = 0
    _starts: frozenset[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.base.dtype != np.float64 or self.base.ndim != 1:
            raise ValueError(f"base must be 1-D float64, got {self.base.dtype} {self.base.shape}")
        if len(self.learners) != len(self.weights):
            raise ValueError("need one weight per learner")
        object.__setattr__(self, "_starts", frozenset(v for v, _ in self.updates))

    @classmethod
    def constant(cls, base: Sequence[float] | np.ndarray, n_features: int) -> Ensemble:
        """The constant function ``base`` (version 0), where boosting starts."""
        return cls(np.array(base, dtype=np.float64).reshape(-1), n_features)

    @property
    def version(self) -> int:
        return self.offset + len(self.learners)

    @property
    def n_outputs(self) -> int:
        return len(self.base)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """f(x) as float64 (n, n_outputs), summed in learner order."""
        return weighted_sum(
            self.learners, self.weights, x, self.n_outputs, np.tile(self.base, (len(x), 1))
        )

    def extend(
        self, learners: Sequence[Learner], weights: Sequence[float], scale: float = 1.0
    ) -> Ensemble:
        """scale * self + sum_k weights[k] * learners[k], as a new ensemble (one update).

        Scale 0 drops the old learners (they no longer count): the new offset is the old version.
        """
        if len(learners) != len(weights):
            raise ValueError(f"{len(learners)} learners but {len(weights)} weights")
        if not np.all(np.isfinite([scale, *weights])):
            raise ValueError("scale and weights must be finite")
        if not learners:
            if scale != 1.0:
                raise ValueError("an update that rescales must add a learner (it marks a version)")
            return self
        update = ((self.version, float(scale)),)
        new_weights = tuple(float(w) for w in weights)
        if scale == 0.0:
            return Ensemble(
                np.zeros_like(self.base),
                self.n_features,
                tuple(learners),
                new_weights,
                update,
                self.version,
            )
        return replace(
            self,
            base=self.base * scale,
            learners=self.learners + tuple(learners),
            weights=tuple(w * scale for w in self.weights) + new_weights,
            updates=self.updates + update,
        )

    def scales_after(self, version: int) -> float:
        """The product of the scales of the updates that started after ``version``."""
        return math.prod(s for v, s in self.updates if v > version)

    def snapshot(self) -> Delta:
        """The whole function as a full delta."""
        return Delta(
            self.offset,
            1.0,
            self.learners,
            self.weights,
            self.n_features,
            self.n_outputs,
            self.base,
        )

    def delta(
        self, since: int, omit: tuple[int, int] | None = None, own_factor: float = 0.0
    ) -> Delta:
        """What a node at version ``since`` lacks (a node that holds nothing needs ``snapshot``).

        ``omit`` = (first, count): leave out learners first .. first+count-1, which the node holds
        itself; it adds ``own_factor`` times their values. ``ValueError`` if this history cannot
        start a delta at ``since`` or the omitted learners are not all new to the node.
        """
        if since != self.version and (since < self.offset or since not in self._starts):
            raise ValueError(f"version {since} is not an update boundary of this ensemble")
        learners, weights = (
            self.learners[since - self.offset :],
            self.weights[since - self.offset :],
        )
        count = 0
        if omit is not None:
            first, count = omit
            if not (since < first and first + count - 1 <= self.version and count >= 1):
                raise ValueError(f"learners {first}..{first + count - 1} are not after {since}")
            cut = slice(first - 1 - since, first - 1 - since + count)
            learners = learners[: cut.start] + learners[cut.stop :]
            weights = weights[: cut.start] + weights[cut.stop :]
        return Delta(
            since,
            self.scales_after(since - 1),
            learners,
            weights,
            self.n_features,
            self.n_outputs,
            None,
            count,
            float(own_factor) if count else 0.0,
        )

    def apply(self, delta: Delta) -> Ensemble:
        """The ensemble after ``delta``; ``DecodeError`` if it does not continue this one."""
        if (delta.n_features, delta.n_outputs) != (self.n_features, self.n_outputs):
            raise DecodeError(
                f"delta maps {delta.n_features} -> {delta.n_outputs}, ensemble "
                f"{self.n_features} -> {self.n_outputs}"
            )
        if delta.full:
            return Ensemble(
                delta.base, delta.n_features, delta.learners, delta.weights, offset=delta.since
            )
        if delta.own_count:
            raise DecodeError("a delta without the node's own learners needs their values")
        if delta.since != self.version:
            raise DecodeError(f"delta continues version {delta.since}, node is at {self.version}")
        return self.extend(delta.learners, delta.weights, delta.scale)


def average(ensemble: Ensemble, deltas: Sequence[Delta], fractions: Sequence[float]) -> Ensemble:
    """sum_i fractions[i] * g_i, where g_i is ``ensemble`` after ``deltas[i]`` (FFGB's server step).

    Each delta is an increment on ``ensemble`` (not full, nothing omitted). The result is one
    update: old learners scaled by sum_i p_i scale_i, each client's learners appended with weights
    multiplied by its fraction (1/n for FFGB's plain average).
    """
    if len(deltas) != len(fractions) or any(
        d.since != ensemble.version or d.full or d.own_count for d in deltas
    ):
        raise ValueError(f"need one fraction per delta, each an increment on {ensemble.version}")
    learners = [h for d in deltas for h in d.learners]
    weights = [p * w for d, p in zip(deltas, fractions) for w in d.weights]
    scale = sum(p * d.scale for d, p in zip(deltas, fractions))
    return ensemble.extend(learners, weights, scale)


class PredictionCache:
    """f on a node's fixed inputs ``x``, kept current from deltas without storing learners.

    Costs n x n_outputs floats and a version number, whatever the ensemble's size; each delta's
    learners are evaluated once on ``x`` and can then be dropped.
    """

    def __init__(
        self,
        x: np.ndarray,
        version: int = 0,
        values: np.ndarray | None = None,
        device: torch.device = CPU,
    ) -> None:
        self.x = np.asarray(x)
        self.version = version
        self.values = values
        self.device = device  # where the delta's networks are evaluated

    def update(self, delta: Delta, own_values: np.ndarray | None = None) -> np.ndarray:
        """Apply ``delta`` to the cached values; ``own_values`` = the values of the learners the
        delta leaves out. ``DecodeError`` if it does not continue them."""
        if delta.n_features != self.x.shape[1]:
            raise DecodeError(f"delta expects {delta.n_features} features, x has {self.x.shape[1]}")
        if delta.full:
            values = np.tile(delta.base, (len(self.x), 1))
        elif self.values is None or delta.since != self.version:
            raise DecodeError(f"delta continues version {delta.since}, cache is at {self.version}")
        elif self.values.shape[1] != delta.n_outputs:
            raise DecodeError(f"delta has {delta.n_outputs} outputs, cache {self.values.shape[1]}")
        else:
            values = self.values * delta.scale
            if delta.own_count:
                if own_values is None or own_values.shape != values.shape:
                    raise DecodeError(
                        "the delta leaves out this node's own learners, whose "
                        "values it does not hold"
                    )
                values = values + delta.own_factor * own_values
        self.values = weighted_sum(
            delta.learners, delta.weights, self.x, delta.n_outputs, values, self.device
        )
        self.version = delta.version
        return self.values


def lone_learner(learner: Learner, n_features: int, n_outputs: int) -> Delta:
    """The function ``learner`` alone as a full delta: how a distillation student travels."""
    return Delta(0, 1.0, (learner,), (1.0,), n_features, n_outputs, np.zeros(n_outputs))


def read_lone_learner(delta: Delta) -> Learner:
    """The learner of a ``lone_learner`` delta; ``DecodeError`` for anything else."""
    if (
        not delta.full
        or delta.since != 0
        or len(delta.learners) != 1
        or delta.weights != (1.0,)
        or np.any(delta.base != 0)
    ):
        raise DecodeError("expected one learner alone, with weight 1 and base 0")
    return delta.learners[0]


class PackCache:
    """Each learner's wire arrays, packed once and reused by every delta that carries it.

    A round's learners go to every node, in a different delta each (a node's own learners are
    left out of its own): packing them once per recipient would repeat the same work N times.
    A delta packed with a cache is identical to one packed without (``pack_delta``).
    """

    def __init__(self) -> None:
        self._packs: dict[int, tuple[Learner, dict[str, np.ndarray]]] = {}

    def arrays(self, learner: Learner) -> dict[str, np.ndarray]:
        """The wire arrays of ``learner`` alone (no prefix)."""
        entry = self._packs.get(id(learner))
        if entry is None:  # the learner is kept with its pack, so its id is not reused
            entry = self._packs[id(learner)] = (learner, _pack_group([learner], ""))
        return entry[1]

    def keep(self, learners: Sequence[Learner]) -> None:
        """Forget every learner not in ``learners`` (they no longer travel)."""
        kept = {id(h) for h in learners}
        self._packs = {k: v for k, v in self._packs.items() if k in kept}


def pack_delta(
    delta: Delta, cache: PackCache | None = None
) -> tuple[Config, dict[str, np.ndarray]]:
    """Config values and arrays of a delta (see the module docstring); with a ``cache``, each
    learner is packed at most once over all the deltas that carry it."""
    runs = same_spec_runs(delta.learners)
    config: Config = {
        "format": FORMAT,
        "full": delta.full,
        "since": delta.since,
        "count": len(delta.learners),
        "own_count": delta.own_count,
        "own_factor": float(delta.own_factor),
        "scale": float(delta.scale),
        "n_features": delta.n_features,
        "n_outputs": delta.n_outputs,
        "groups": len(runs),
    }
    arrays = {"weights": np.array(delta.weights, dtype=np.float64)}
    if delta.full:
        arrays["base"] = np.asarray(delta.base, dtype=np.float64)
    for i, (start, stop) in enumerate(runs):
        prefix, group = f"g{i}.", delta.learners[start:stop]
        spec = learner_spec(group[0])
        config[prefix + "count"] = stop - start
        if isinstance(spec, (TreeSpec, SealedSpec)):
            config[prefix + "kind"] = spec.kind
        else:
            module = networks if isinstance(spec, NetworkSpec) else convnets
            config.update(module.spec_config(spec, prefix))
        if cache is None:
            arrays.update(_pack_group(group, prefix))
        else:
            arrays.update(_join_packs(spec, [cache.arrays(h) for h in group], prefix))
    return config, arrays


def _pack_group(group: Sequence[Learner], prefix: str) -> dict[str, np.ndarray]:
    """The arrays of learners of one spec: trees field by field, networks stacked."""
    spec = learner_spec(group[0])
    if isinstance(spec, TreeSpec):
        return pack_trees(group, prefix)
    if isinstance(spec, SealedSpec):
        return pack_sealed(group, prefix)
    return pack_modules(group, spec.array_shapes(), prefix)


def _join_packs(
    spec: object, packs: Sequence[Mapping[str, np.ndarray]], prefix: str
) -> dict[str, np.ndarray]:
    """``_pack_group`` of a run of learners, from each learner's own pack."""
    if isinstance(spec, TreeSpec):
        return join_packed_trees(packs, prefix)
    if isinstance(spec, SealedSpec):
        return join_packed_sealed(packs, prefix)
    return {prefix + name: np.concatenate([pack[name] for pack in packs]) for name in packs[0]}


@dataclass(frozen=True)
class DeltaHeader:
    """The header of a received delta, checked on its own (no array read yet)."""

    full: bool
    since: int
    count: int
    own_count: int
    groups: int
    n_features: int
    n_outputs: int
    scale: float
    own_factor: float


def read_header(config: Mapping[str, object], limits: Limits = Limits()) -> DeltaHeader:
    """The checked header of a delta: format, counts and sizes within ``limits``, finite scale
    and factor, scale 1 and no own learners when full; ``DecodeError`` on any fault. It costs a
    few dictionary reads, so a receiver compares it with what it expects (e.g. K learners on its
    version) before any array of the delta is decoded."""
    if not isinstance(config, Mapping):
        raise DecodeError("expected a mapping of config values")
    if type(config.get("format")) is not int or config["format"] != FORMAT:
        raise DecodeError(f"format: expected {FORMAT}, got {config.get('format')!r}")
    full = config.get("full")
    if type(full) is not bool:
        raise DecodeError(f"full: expected a bool, got {full!r}")
    top = limits.max_learners
    since, count, own_count, groups = (
        _header_int(config, key, 0, top) for key in ("since", "count", "own_count", "groups")
    )
    n_features = _header_int(config, "n_features", 1, limits.max_features)
    n_outputs = _header_int(config, "n_outputs", 1, limits.max_outputs)
    if since + own_count + count > top:
        raise DecodeError(f"{since + own_count + count} learners is more than {top}")
    if groups > count or (count > 0) != (groups > 0):
        raise DecodeError(f"groups: {groups} groups for {count} learners")
    scale = _number(config.get("scale"), "scale")
    own_factor = _number(config.get("own_factor"), "own_factor")
    if full and (scale != 1.0 or own_count):
        raise DecodeError("a full delta has scale 1.0 and own_count 0")
    if own_count == 0 and own_factor != 0.0:
        raise DecodeError("own_factor without own learners")
    return DeltaHeader(
        full, since, count, own_count, groups, n_features, n_outputs, scale, own_factor
    )


def unpack_delta(
    config: Mapping[str, object], arrays: Mapping[str, np.ndarray], limits: Limits = Limits()
) -> Delta:
    """Decode and validate a delta; ``DecodeError`` on any fault.

    Checks the header (``read_header``), that the config and array keys are exactly the header's
    and the groups', finite float64 weights and base, group counts summing to ``count``, and each
    group with its kind's decoder (specs bounded, inputs and outputs the header's).
    """
    if not isinstance(arrays, Mapping):
        raise DecodeError("expected a mapping of arrays")
    h = read_header(config, limits)
    full, count, groups, n_outputs = h.full, h.count, h.groups, h.n_outputs
    group_config = _split_groups(config, set(HEADER), groups, "config")
    group_arrays = _split_groups(
        arrays, {"weights"} | ({"base"} if full else set()), groups, "array"
    )
    weights = _finite_float64(arrays.get("weights"), "weights", (count,))
    base = _finite_float64(arrays.get("base"), "base", (n_outputs,)) if full else None
    learners: list[Learner] = []
    for i in range(groups):
        fields = group_config.get(i, {})
        size = fields.pop("count", None)
        if type(size) is not int or not 1 <= size <= count - len(learners):
            raise DecodeError(
                f"g{i}.count: expected an int in [1, {count - len(learners)}], got {size!r}"
            )
        learners += _decode_group(
            fields, group_arrays.get(i, {}), f"g{i}.", size, h.n_features, n_outputs, limits
        )
    if len(learners) != count:
        raise DecodeError(f"the groups hold {len(learners)} learners, count says {count}")
    return Delta(
        h.since,
        h.scale,
        tuple(learners),
        tuple(float(w) for w in weights),
        h.n_features,
        n_outputs,
        base,
        h.own_count,
        h.own_factor,
    )


def _decode_group(
    fields: dict[str, object],
    arrays: dict[str, object],
    prefix: str,
    count: int,
    n_features: int,
    n_outputs: int,
    limits: Limits,
) -> list[Learner]:
    """``count`` learners of one group from its config fields and arrays (prefix stripped)."""
    kind = fields.get("kind")
    try:
        if kind == TreeSpec.kind:
            if set(fields) != {"kind"} or set(arrays) != set(TREE_FIELDS):
                raise DecodeError(
                    f"tree: expected config keys ['kind'] and arrays "
                    f"{list(TREE_FIELDS)}, got {sorted(fields)} and "
                    f"{sorted(arrays)}"
                )
            return unpack_trees(arrays, "", count, n_features, n_outputs, limits.max_nodes)
        if kind == SEALED_KIND:
            if set(fields) != {"kind"}:
                raise DecodeError(f"sealed: expected config keys ['kind'], got {sorted(fields)}")
            spec = SealedSpec(n_features, n_outputs)
            return unpack_sealed(arrays, count, spec, limits.sealed_bytes)
        if kind == NetworkSpec.kind:
            spec = networks.decode_spec(fields, "", limits.max_params)
            load = partial(networks.Network, spec)
        elif kind == ConvNetSpec.kind:
            spec = convnets.decode_spec(fields, "", n_outputs, limits.max_params)
            load = partial(convnets.loaded, spec)
        else:
            raise DecodeError(f"kind: unknown or missing learner kind {kind!r}")
        if (spec.n_features, spec.n_outputs) != (n_features, n_outputs):
            raise DecodeError(
                f"network maps {spec.n_features} -> {spec.n_outputs}, expected "
                f"{n_features} -> {n_outputs}"
            )
        shapes = spec.array_shapes()
        if set(arrays) != set(shapes):
            raise DecodeError(f"expected arrays {sorted(shapes)}, got {sorted(arrays)}")
        return unpack_modules(arrays, "", shapes, count, load)
    except DecodeError as err:
        raise DecodeError(f"{prefix}{err}") from None


def _header_int(config: Mapping[str, object], key: str, low: int, high: int) -> int:
    value = config.get(key)
    if type(value) is not int or not low <= value <= high:
        raise DecodeError(f"{key}: expected an int in [{low}, {high}], got {value!r}")
    return value


def _number(value: object, name: str) -> float:
    if type(value) in (int, float) and not math.isfinite(value):
        raise NonFiniteError(f"{name}: expected a finite number, got {value!r}")
    if type(value) not in (int, float):
        raise DecodeError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _finite_float64(array: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if not (
        isinstance(array, np.ndarray)
        and array.dtype == np.float64
        and array.shape == shape
        and np.all(np.isfinite(array))
    ):
        raise DecodeError(
            f"{name}: expected finite float64 of shape {shape}, got "
            f"{getattr(array, 'dtype', type(array).__name__)} "
            f"{getattr(array, 'shape', '')}"
        )
    return array


def _split_groups(
    mapping: Mapping[str, object], header: set[str], groups: int, what: str
) -> dict[int, dict[str, object]]:
    """Split ``g{i}.field`` keys by i, refusing keys outside the header and groups 0..groups-1."""
    split: dict[int, dict[str, object]] = {}
    for key, value in mapping.items():
        if key in header:
            continue
        match = _GROUP_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None or int(match.group(1)) >= groups:
            raise DecodeError(f"unexpected {what} key {key!r} in a delta of {groups} groups")
        split.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return split
