"""The server's global ensemble and every node's copy of it, kept current with deltas.

Each message to a node carries what that node lacks since the version it holds (different for
every node): learners it has not seen, the common rescaling, and, instead of the node's own
learners of its last accepted round, the factor with which they entered the average (the FFGB
paper's (N - 1) K learners down, not N K). A node that holds nothing, or whose last reply was an
error, gets the whole ensemble. Each learner is packed for the wire once (``PackCache``), however
many nodes receive it.

A shared downlink (``records_for(..., share=True)``) gives every node at the same version the
same delta, its own learners included (N K down: 1/N more bytes), packed once and handed out as
the same record objects: N messages then cost the server one delta, not N of (N - 1) K learners
each, and Flower's grid, which addresses objects by content, uploads it once.

Used by FFGB (its boosting rounds, its distillation and its one-shot FFGB.L) and by the frame
tests' boosted trees: the sync is written once.

In a checkpoint (``StoredEnsemble``) the ensemble's base, weights and update history are part of
every round's state (8 bytes a learner), and its learners are *segments*, one per update, which
the checkpoint writer appends once (``server_app.segment_log``): a round's checkpoint cost does
not grow with the ensemble.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from functions.ensembles import (
    Delta,
    Ensemble,
    Limits,
    PackCache,
    average,
    pack_delta,
    unpack_delta,
)
from functions.errors import DecodeError
from functions.learners import Learner
from functions.params import arrays_to_record, record_to_arrays
from strategies.node_book import NodeSlot
from strategies.state_codec import LIMITS, SEGMENTS

Records = tuple[ConfigRecord, ArrayRecord, int]  # a delta's config, arrays and learner count
_SEGMENT = re.compile(r"learners-([1-9][0-9]{0,9})-([1-9][0-9]{0,9})")
_LEARNERS, _LEARNER_ARRAYS = "learners", "learners-arrays"


@dataclass
class SyncSlot(NodeSlot):
    """What a node holds: the ensemble's version (None: nothing), and its own learners of its
    last accepted round, which its next delta leaves out: appended at the update starting at
    ``own_version``, sequence numbers ``own_first`` .. + ``own_count`` - 1 (0: none), averaged
    with ``own_fraction``."""

    version: int | None = None
    own_version: int = 0
    own_first: int = 0
    own_count: int = 0
    own_fraction: float = 0.0

    def lose(self) -> None:
        super().lose()
        self.version = None
        self.forget_own()

    def forget_own(self) -> None:
        self.own_version = self.own_first = self.own_count = 0
        self.own_fraction = 0.0


class EnsembleSync:
    """The global ensemble, and the delta each node's slot says it lacks."""

    def __init__(self, ensemble: Ensemble) -> None:
        self.ensemble = ensemble
        self.packs = PackCache()
        # shared deltas of one ensemble: (ensemble, {since or None (whole): records})
        self._shared: tuple[Ensemble | None, dict[int | None, Records]] = (None, {})

    def _since(self, slot: SyncSlot) -> int | None:
        """The version the node's delta starts from; None: it gets the whole ensemble."""
        since = slot.version
        if slot.needs_sync or since is None or since < self.ensemble.offset:
            return None
        return since

    def delta_for(self, slot: SyncSlot) -> Delta:
        """What the node lacks: everything after a failure, else since the version it holds,
        without its own learners of its last accepted round."""
        own = (slot.own_version, slot.own_first, slot.own_count, slot.own_fraction)
        slot.forget_own()  # sent now, or never again
        since = self._since(slot)
        if since is None:
            return self.ensemble.snapshot()
        version, first, count, fraction = own
        if count and since <= version:
            factor = fraction * self.ensemble.scales_after(version)
            return self.ensemble.delta(since, omit=(first, count), own_factor=factor)
        return self.ensemble.delta(since)

    def records_for(self, slot: SyncSlot, share: bool = False) -> Records:
        """The node's delta as records, and its number of learners; from now on the slot says
        the node holds the current version (an error reply sets ``needs_sync`` again). With
        ``share``, the delta of every node at the slot's version, own learners included: the
        same record objects for all of them (treat them as read-only)."""
        if share:
            slot.forget_own()
            owner, shared = self._shared
            if owner is not self.ensemble:
                shared = {}
                self._shared = (self.ensemble, shared)
            since = self._since(slot)
            if since not in shared:
                shared[since] = self._records(self.delta_for(slot))
            records = shared[since]
        else:
            records = self._records(self.delta_for(slot))
        slot.version, slot.needs_sync = self.ensemble.version, False
        return records

    def _records(self, delta: Delta) -> Records:
        config, arrays = pack_delta(delta, self.packs)
        return ConfigRecord(config), arrays_to_record(arrays), len(delta.learners)

    def average(self, pairs: Sequence[tuple[SyncSlot, Delta]], keep_own: bool = True) -> int:
        """The plain average of the contributors' functions (each an increment on the current
        version, in the given order); with ``keep_own`` each contributor's slot records where
        its learners went, so its next delta leaves them out. Returns the version before."""
        before, fraction = self.ensemble.version, 1.0 / len(pairs)
        first = before + 1
        for slot, delta in pairs:
            count = len(delta.learners)
            if keep_own:
                slot.own_version, slot.own_first, slot.own_count = before, first, count
                slot.own_fraction = fraction
            first += count
        self.ensemble = average(self.ensemble, [d for _, d in pairs], [fraction] * len(pairs))
        return before

    def replace(self, learner: Learner, slots: Sequence[SyncSlot]) -> int:
        """The function becomes ``learner`` alone (scale 0: a distilled ensemble); no node
        holds own learners of it any more. Returns the version before."""
        before = self.ensemble.version
        self.ensemble = self.ensemble.extend([learner], [1.0], scale=0.0)
        for slot in slots:
            slot.forget_own()
        self.packs.keep(self.ensemble.learners)
        return before

    def rebuild(self, learners: Sequence[Learner], weights: Sequence[float]) -> None:
        """The function becomes base + sum_k weights[k] learners[k], a new version with no
        history (a node at any earlier version gets it whole); learners keep their packs."""
        old = self.ensemble
        self.ensemble = Ensemble(
            old.base,
            old.n_features,
            tuple(learners),
            tuple(float(w) for w in weights),
            offset=old.version,
        )
        self.packs.keep(self.ensemble.learners)

    def restore(self, ensemble: Ensemble) -> None:
        """Continue from a checkpoint's ensemble."""
        self.ensemble, self.packs = ensemble, PackCache()

    def segment_names(self) -> list[str]:
        """The live segments: the ensemble's learners cut at its updates (``segment_names``)."""
        return segment_names(self.ensemble)

    def segment_record(self, name: str) -> RecordDict:
        """Segment ``name``'s learners as records (packed from the cache)."""
        first, last = segment_range(name)
        e = self.ensemble
        learners = e.learners[first - 1 - e.offset : last - e.offset]
        config, arrays = pack_delta(
            Delta(first - 1, 1.0, learners, (1.0,) * len(learners), e.n_features, e.n_outputs),
            self.packs,
        )
        return RecordDict(
            {_LEARNERS: ConfigRecord(config), _LEARNER_ARRAYS: arrays_to_record(arrays)}
        )


def segment_names(ensemble: Ensemble) -> list[str]:
    """``learners-<first>-<last>`` for each update's learners (the first: from the offset)."""
    e = ensemble
    bounds = sorted({e.offset, e.version, *(v for v, _ in e.updates if e.offset <= v)})
    return [f"learners-{a + 1}-{b}" for a, b in pairwise(bounds)]


def segment_range(name: str) -> tuple[int, int]:
    """(first, last) sequence numbers of a segment name; DecodeError for anything else."""
    match = _SEGMENT.fullmatch(name) if isinstance(name, str) else None
    if match is None or int(match.group(1)) > int(match.group(2)):
        raise DecodeError(f"segment name {name!r}: expected learners-<first>-<last>")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class StoredEnsemble:
    """An ensemble as strategy state (``strategies.state_codec``'s Wire form): offset, sizes,
    update history and segment names in a ConfigRecord, base and weights in an ArrayRecord, the
    learners read from the checkpoint's segments (context ``SEGMENTS``) under the decoder's
    ``LIMITS``."""

    ensemble: Ensemble
    RECORDS: ClassVar[Mapping[str, type]] = {"": ConfigRecord, "arrays": ArrayRecord}

    def to_records(self) -> dict[str, ConfigRecord | ArrayRecord]:
        e = self.ensemble
        versions, scales = zip(*e.updates) if e.updates else ((), ())
        return {
            "": ConfigRecord(
                {
                    "offset": e.offset,
                    "n-features": e.n_features,
                    "n-outputs": e.n_outputs,
                    "versions": list(versions),
                    "scales": [float(x) for x in scales],
                    "segments": segment_names(e),
                }
            ),
            "arrays": arrays_to_record(
                {"base": e.base, "weights": np.array(e.weights, dtype=np.float64)}
            ),
        }

    @classmethod
    def from_records(cls, records: Mapping[str, Any], context: Mapping[str, Any]) -> StoredEnsemble:
        config, limits = records[""], context.get(LIMITS, Limits())
        offset, n_features, n_outputs = (
            _int(config, key, 0, top)
            for key, top in (
                ("offset", limits.max_learners),
                ("n-features", limits.max_features),
                ("n-outputs", limits.max_outputs),
            )
        )
        arrays = record_to_arrays(records["arrays"])
        if set(arrays) != {"base", "weights"}:
            raise DecodeError(f"expected arrays base and weights, got {sorted(arrays)}")
        base, weights = arrays["base"], arrays["weights"]
        for name, array, shape in (
            ("base", base, (n_outputs,)),
            ("weights", weights, (len(weights),)),
        ):
            if array.dtype != np.float64 or array.shape != shape or not np.all(np.isfinite(array)):
                raise DecodeError(f"{name}: expected finite float64 of shape {shape}")
        version = offset + len(weights)
        learners = _segments_learners(
            config.get("segments"),
            context.get(SEGMENTS, {}),
            (offset, version),
            (n_features, n_outputs),
            limits,
        )
        updates = _history(config.get("versions"), config.get("scales"), offset, version)
        return cls(
            Ensemble(
                base, n_features, tuple(learners), tuple(float(w) for w in weights), updates, offset
            )
        )


def _int(config: Mapping[str, object], key: str, low: int, high: int) -> int:
    value = config.get(key)
    if type(value) is not int or not low <= value <= high:
        raise DecodeError(f"{key}: expected an int in [{low}, {high}], got {value!r}")
    return value


def _segments_learners(
    names: object,
    segments: Mapping[str, RecordDict],
    span: tuple[int, int],
    sizes: tuple[int, int],
    limits: Limits,
) -> list[Learner]:
    """The learners offset+1 .. version (``span``) of (inputs, outputs) ``sizes``, from
    consecutive segments."""
    offset, version = span
    if not isinstance(names, list):
        raise DecodeError("segments: expected a list of names")
    learners: list[Learner] = []
    for name in names:
        first, last = segment_range(name)
        if first != offset + len(learners) + 1 or last > version:
            raise DecodeError(
                f"segment {name!r} does not continue learner {offset + len(learners)}"
            )
        if name not in segments:
            raise DecodeError(f"segment {name!r} is not in the checkpoint's segments file")
        record = segments[name]
        if not isinstance(record, RecordDict) or set(record) != {_LEARNERS, _LEARNER_ARRAYS}:
            raise DecodeError(f"segment {name!r}: expected records {_LEARNERS}, {_LEARNER_ARRAYS}")
        delta = unpack_delta(
            dict(record[_LEARNERS]), record_to_arrays(record[_LEARNER_ARRAYS]), limits
        )
        if (
            delta.full
            or delta.since != first - 1
            or len(delta.learners) != last - first + 1
            or (delta.n_features, delta.n_outputs) != sizes
        ):
            raise DecodeError(f"segment {name!r} holds other learners")
        learners += delta.learners
    if offset + len(learners) != version:
        raise DecodeError(
            f"the segments hold {len(learners)} learners, the weights {version - offset}"
        )
    return learners


def _history(
    versions: object, scales: object, offset: int, version: int
) -> tuple[tuple[int, float], ...]:
    """The (version before, scale) of each update, increasing within [offset, version)."""
    if not (
        isinstance(versions, list)
        and isinstance(scales, list)
        and len(versions) == len(scales)
        and all(type(v) is int for v in versions)
        and all(type(x) in (int, float) and math.isfinite(x) for x in scales)
    ):
        raise DecodeError(
            "versions and scales: expected lists of ints and finite numbers of one length"
        )
    if any(not b < a for a, b in zip(versions[1:], versions)) or any(
        not offset <= v < version for v in versions
    ):
        raise DecodeError(f"versions: expected increasing versions in [{offset}, {version})")
    return tuple((int(v), float(x)) for v, x in zip(versions, scales))
