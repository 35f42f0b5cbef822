"""What FedFW's compact downlink carries (``fedfw.downlink``): the rounds' accepted extreme points
instead of the dense x-bar, or, once, the whole mirror a node replicates.

- updates: for each round after the node's version, the accepted points in roster order (the
  order the server applies them), each as the compact arrays its node sent
  (``functions.extreme_points``: one 1-D array per field). Config: ``since``, ``rounds`` (left
  out when they are the rounds just before the message's own: ``header_through``); arrays
  ``accepted`` (per round, a bitmap over the roster, ``np.packbits``, ceil(N / 8) bytes: who sent
  the points), and per round u and field f the round's points' values one after another
  (``{u}.{f}``) with the points' lengths (``{u}.{f}.len``, the smallest unsigned dtype: one
  length when every point has the field with that length, else one per point, 0 where a point
  has no such field): two arrays a field and round, however many nodes sent points (one array
  per point made a message's encoding, and a node's decoding, grow with N). eta_t does not
  travel: both sides take it from the run's schedule, with the same code.
- replica: every node's x_i and their running sum (float64), the version, the roster's D_i
  (``kinds``, ``radii``). Arrays ``x.{i}.{k}`` (node i, tensor k) and ``sum.{k}``.
- mean (full participation, ``MEAN`` set in the replica's header): x-bar alone, float64
  (``xbar.{k}``), for a node that follows x-bar's recursion from each round's points instead of
  replicating every x_i; none at round 0, where the dense x-bar^1 is exact in float32.

Decoders validate everything and raise ``DecodeError``; no pickle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from functions.errors import DecodeError
from functions.extreme_points import INDEX_FIELDS, Ball, sum_index_points, sum_model_points
from functions.protocol import TRAIN

Arrays = dict[str, np.ndarray]
_FIELD_KEY = re.compile(r"^(\d{1,7})\.([a-z]+)(\.len)?$")
_MAX_UPDATES = 1_000_000
MEAN = "mean"  # header flag: the node follows x-bar's recursion (full participation), no replica


@dataclass(frozen=True)
class RoundPoints:
    """One round's accepted points: (roster index, compact arrays) in the order applied."""

    round: int
    eta: float
    points: tuple[tuple[int, Arrays], ...]


def pack_updates(
    since: int, updates: Sequence[RoundPoints], num_nodes: int, through: int | None = None
) -> tuple[dict, Arrays]:
    """The header and arrays of ``updates``; ``ValueError`` unless each round's points are in
    increasing roster order (the order the server applies them). The header is left out (an
    empty config) when the updates are every round after ``since`` up to ``through``, the round
    the message brings the node to (``header_through``): the node derives it from their count."""
    masks = []
    for update in updates:
        nodes = [i for i, _ in update.points]
        if nodes != sorted(set(nodes)) or not all(0 <= i < num_nodes for i in nodes):
            raise ValueError(f"round {update.round}: points not in roster order: {nodes}")
        mask = np.zeros(num_nodes, dtype=bool)
        mask[nodes] = True
        masks.append(np.packbits(mask))
    rounds = [u.round for u in updates]
    implied = through is not None and rounds == list(range(since + 1, through + 1))
    config = {} if implied else {"since": since, "rounds": rounds}
    arrays = {"accepted": np.concatenate(masks) if masks else np.zeros(0, np.uint8)}
    for u, update in enumerate(updates):
        arrays |= _packed_fields(u, [point for _, point in update.points])
    return config, arrays


def _packed_fields(u: int, points: Sequence[Arrays]) -> Arrays:
    """Round ``u``'s points field by field: values one after another, and each point's length."""
    fields = sorted({name for point in points for name in point})
    packed: Arrays = {}
    for name in fields:
        parts = [np.asarray(point[name]) for point in points if name in point]
        if any(part.ndim != 1 or part.size == 0 for part in parts):
            raise ValueError(f"round {u}: field {name!r} of a point is not a non-empty 1-D array")
        lengths = np.array([point[name].size if name in point else 0 for point in points])
        if (lengths == lengths[0]).all():
            lengths = lengths[:1]  # every point has the field, with one length
        packed[f"{u}.{name}"] = np.concatenate(parts)
        packed[f"{u}.{name}.len"] = lengths.astype(np.min_scalar_type(int(lengths.max())))
    return packed


@dataclass(frozen=True)
class PackedRound:
    """One round's accepted points as they travel: the roster positions (increasing) and, per
    field, the values one after another with each point's length (0 where a point has no such
    field), checked to cover the values."""

    round: int
    eta: float
    nodes: np.ndarray
    fields: dict[str, tuple[np.ndarray, np.ndarray]]

    def points(self) -> tuple[tuple[int, Arrays], ...]:
        """(roster position, the point's arrays) for each point, in roster order."""
        points: list[Arrays] = [{} for _ in self.nodes]
        for name, (values, lengths) in self.fields.items():
            ends = np.cumsum(lengths)
            for j, (end, length) in enumerate(zip(ends.tolist(), lengths.tolist())):
                if length:
                    points[j][name] = values[end - length : end]
        return tuple((int(node), point) for node, point in zip(self.nodes, points))


def _checked_fields(
    u: int, count: int, fields: Mapping[str, dict[str, np.ndarray]]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Round ``u``'s packed fields (name -> values, one length a point); ``DecodeError`` unless
    the lengths cover the values and every one of the ``count`` points has a field."""
    checked, covered = {}, np.zeros(count, dtype=bool)
    for name, packed in fields.items():
        values, lengths = packed.get("values"), packed.get("len")
        if values is None or lengths is None:
            raise DecodeError(f"update {u}: field {name!r} needs its values and lengths")
        if (
            lengths.dtype.kind != "u"
            or lengths.itemsize > 4
            or lengths.shape not in ((1,), (count,))
        ):
            raise DecodeError(
                f"update {u}: the lengths of field {name!r} must be one or "
                f"{count} unsigned ints of at most 32 bits"
            )
        lengths = np.broadcast_to(lengths.astype(np.int64), (count,))
        if values.ndim != 1 or int(lengths.sum()) != len(values):
            raise DecodeError(
                f"update {u}: the lengths of field {name!r} do not cover its "
                f"{len(values)} values for {count} points"
            )
        checked[name] = (values, lengths)
        covered |= lengths > 0
    if not covered.all():
        raise DecodeError(f"point {int(np.argmin(covered))} of update {u} has no arrays")
    return checked


def header_through(message_type: str, server_round: int) -> int:
    """The round whose x-bar a message of ``message_type`` brings: round t's train message
    x-bar^(t-1), its evaluate message x-bar^t. Both halves use it for ``pack_updates``' header."""
    return server_round - 1 if message_type == TRAIN else server_round


def unpack_rounds(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    num_nodes: int,
    eta: Callable[[int], float],
    through: int | None = None,
) -> tuple[int, list[PackedRound]]:
    """(since, rounds) still packed, each round's step size ``eta(round)``; ``DecodeError``
    unless rounds increase after ``since``, the bitmaps cover the roster with zero padding and
    every accepted node's point has arrays. An empty header means the rounds up to ``through``,
    as many as the bitmaps."""
    width = -(-num_nodes // 8)
    try:
        bitmaps = arrays["accepted"]
        if config or through is None:
            since, rounds = int(config["since"]), [int(r) for r in config["rounds"]]
        else:
            count = len(bitmaps) // max(width, 1)
            since, rounds = through - count, list(range(through - count + 1, through + 1))
    except (KeyError, TypeError, ValueError) as err:
        raise DecodeError(f"bad FedFW update header: {err}") from None
    if len(rounds) > _MAX_UPDATES or num_nodes < 1:
        raise DecodeError("a FedFW update lists too many rounds, or the roster is empty")
    if bitmaps.dtype != np.uint8 or bitmaps.shape != (width * len(rounds),):
        raise DecodeError(f"FedFW update bitmaps must be uint8 of shape ({width * len(rounds)},)")
    if any(b <= a for a, b in zip([since, *rounds], rounds)):
        raise DecodeError(f"FedFW update rounds {rounds} do not increase after {since}")
    masks = np.unpackbits(bitmaps).reshape(len(rounds), 8 * width).astype(bool)
    if masks[:, num_nodes:].any():
        raise DecodeError("a FedFW update bitmap names a node outside the roster")
    grouped: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    for key, value in arrays.items():
        if key == "accepted":
            continue
        match = _FIELD_KEY.match(key)
        if match is None or int(match[1]) >= len(rounds):
            raise DecodeError(f"unexpected array {key!r} in a FedFW update")
        part = "len" if match[3] else "values"
        grouped.setdefault(int(match[1]), {}).setdefault(match[2], {})[part] = value
    packed = []
    for u, round_ in enumerate(rounds):
        nodes = np.flatnonzero(masks[u])
        packed.append(
            PackedRound(
                round_, eta(round_), nodes, _checked_fields(u, len(nodes), grouped.get(u, {}))
            )
        )
    return since, packed


def unpack_updates(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    num_nodes: int,
    eta: Callable[[int], float],
    through: int | None = None,
) -> tuple[int, list[RoundPoints]]:
    """``unpack_rounds`` with each round's points split one by one."""
    since, rounds = unpack_rounds(config, arrays, num_nodes, eta, through)
    return since, [RoundPoints(r.round, r.eta, r.points()) for r in rounds]


@dataclass(frozen=True)
class RosterSets:
    """The roster's D_i by position as the distinct sets and, when there are several, each
    position's index into them: what a node following x-bar keeps, whatever N is."""

    distinct: tuple[Ball, ...]
    members: np.ndarray | None  # int64, one a position; None: every node has distinct[0]
    size: int

    @classmethod
    def of(cls, sets: Sequence[Ball]) -> RosterSets:
        index: dict[tuple[str, float], int] = {}
        distinct: list[Ball] = []
        members = []
        for ball in sets:
            key = (ball.kind, float(ball.radius))
            if key not in index:
                index[key] = len(distinct)
                distinct.append(ball)
            members.append(index[key])
        if not distinct:
            raise DecodeError("a roster needs at least one D_i")
        return cls(
            tuple(distinct),
            np.array(members, np.int64) if len(distinct) > 1 else None,
            len(members),
        )

    def __getitem__(self, position: int) -> Ball:
        return self.distinct[0 if self.members is None else int(self.members[position])]

    def radii(self) -> np.ndarray:
        """Each position's radius (float64)."""
        radii = np.array([float(ball.radius) for ball in self.distinct])
        return np.full(self.size, radii[0]) if self.members is None else radii[self.members]


def sum_round(
    sets: RosterSets, update: PackedRound, shapes: Sequence[tuple[int, ...]], scope: str
) -> list[np.ndarray]:
    """sum_i s_i of a round in which every node of the roster sent its point, in roster order:
    the input of x-bar's full-participation recursion, taken by this one function on the server
    and on every node from the same packed arrays, so both hold the same bits. l1 (or simplex)
    points of one field width are decoded all at once; others one by one."""
    if len(update.nodes) != sets.size:
        raise DecodeError(
            f"round {update.round} has {len(update.nodes)} of {sets.size} points; "
            "x-bar's recursion needs every node's"
        )
    kinds = {ball.kind for ball in sets.distinct}
    kind = next(iter(kinds))
    key = INDEX_FIELDS.get(kind) if len(kinds) == 1 else None
    if key is not None and set(update.fields) == {key}:
        values, lengths = update.fields[key]
        if (lengths == lengths[0]).all():
            return sum_index_points(
                kind, sets.radii(), values.reshape(sets.size, -1), shapes, scope
            )
    points = update.points()
    return sum_model_points([sets[i] for i, _ in points], [p for _, p in points], shapes, scope)


@dataclass(frozen=True)
class Replica:
    """The whole mirror, as a node receives it to start replicating."""

    version: int
    kinds: tuple[str, ...]
    radii: tuple[float, ...]
    points: tuple[list[np.ndarray], ...]  # x_i in roster order
    total: list[np.ndarray]


def pack_replica(replica: Replica) -> tuple[dict, Arrays]:
    config = {
        "version": replica.version,
        "kinds": list(replica.kinds),
        "radii": [float(r) for r in replica.radii],
    }
    arrays = {
        f"x.{i}.{k}": np.asarray(a, np.float64)
        for i, x in enumerate(replica.points)
        for k, a in enumerate(x)
    }
    arrays |= {f"sum.{k}": np.asarray(a, np.float64) for k, a in enumerate(replica.total)}
    return config, arrays


def pack_mean(
    version: int, kinds: Sequence[str], radii: Sequence[float], xbar: Sequence[np.ndarray] | None
) -> tuple[dict, Arrays]:
    """The header (``MEAN`` set) and x-bar (float64; None at round 0) a node following x-bar's
    recursion starts from."""
    config, _ = pack_replica(Replica(version, tuple(kinds), tuple(radii), (), []))
    arrays = (
        {} if xbar is None else {f"xbar.{k}": np.asarray(a, np.float64) for k, a in enumerate(xbar)}
    )
    return {**config, MEAN: True}, arrays


def unpack_mean(
    arrays: Mapping[str, np.ndarray], shapes: Sequence[tuple[int, ...]]
) -> list[np.ndarray]:
    """x-bar from ``pack_mean``'s arrays; ``DecodeError`` unless one finite float64 array a
    tensor."""
    if set(arrays) != {f"xbar.{k}" for k in range(len(shapes))}:
        raise DecodeError("a FedFW x-bar re-sync's arrays are not one per tensor")
    return [_finite64(arrays, f"xbar.{k}", shape) for k, shape in enumerate(shapes)]


def _finite64(arrays: Mapping[str, np.ndarray], key: str, shape: Sequence[int]) -> np.ndarray:
    """A copy of ``arrays[key]``; ``DecodeError`` unless finite float64 of ``shape``."""
    value = arrays[key]
    if value.dtype != np.float64 or value.shape != tuple(shape) or not np.isfinite(value).all():
        raise DecodeError(f"{key} is not a finite float64 array of shape {tuple(shape)}")
    return np.array(value)


def replica_header(config: Mapping[str, object]) -> tuple[int, tuple[str, ...], tuple[float, ...]]:
    """(version, kinds, radii) of a replica header; ``DecodeError`` if malformed."""
    try:
        version = int(config["version"])
        kinds = tuple(str(k) for k in config["kinds"])
        radii = tuple(float(r) for r in config["radii"])
    except (KeyError, TypeError, ValueError) as err:
        raise DecodeError(f"bad FedFW replica header: {err}") from None
    if not kinds or len(kinds) != len(radii) or version < 0:
        raise DecodeError("a FedFW replica header needs a version and one D_i per node")
    return version, kinds, radii


def unpack_replica(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    shapes: Sequence[tuple[int, ...]],
) -> Replica:
    """``DecodeError`` unless it holds one finite float64 point of ``shapes`` per node."""
    version, kinds, radii = replica_header(config)
    num_nodes = len(kinds)
    expected = {f"x.{i}.{k}" for i in range(num_nodes) for k in range(len(shapes))}
    expected |= {f"sum.{k}" for k in range(len(shapes))}
    if set(arrays) != expected:
        raise DecodeError("a FedFW replica's arrays are not one point per node and a sum")
    points = tuple(
        [_finite64(arrays, f"x.{i}.{k}", s) for k, s in enumerate(shapes)] for i in range(num_nodes)
    )
    total = [_finite64(arrays, f"sum.{k}", s) for k, s in enumerate(shapes)]
    return Replica(version, kinds, radii, points, total)
