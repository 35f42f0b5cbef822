"""What FedFW's compact downlink carries (``fedfw.downlink``): the rounds' accepted extreme points
instead of the dense x-bar, or, once, the whole mirror a node replicates.

- updates: for each round after the node's version, the accepted points in roster order (the
  order the server applies them), each as the compact arrays its node sent
  (``functions.extreme_points``). Config: ``since``, ``rounds``; arrays ``accepted`` (per round, a
  bitmap over the roster, ``np.packbits``, ceil(N / 8) bytes: who sent the points) and
  ``{u}.{j}.{name}`` (update u, point j). eta_t does not travel: both sides take it from the
  run's schedule, with the same code.
- replica: every node's x_i and their running sum (float64), the version, the roster's D_i
  (``kinds``, ``radii``). Arrays ``x.{i}.{k}`` (node i, tensor k) and ``sum.{k}``.

Decoders validate everything and raise ``DecodeError``; no pickle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from functions.errors import DecodeError

Arrays = dict[str, np.ndarray]
_POINT_KEY = re.compile(r"^(\d+)\.(\d+)\.(.+)$")
_MAX_UPDATES = 1_000_000


@dataclass(frozen=True)
class RoundPoints:
    """One round's accepted points: (roster index, compact arrays) in the order applied."""

    round: int
    eta: float
    points: tuple[tuple[int, Arrays], ...]


def pack_updates(since: int, updates: Sequence[RoundPoints], num_nodes: int
                 ) -> tuple[dict, Arrays]:
    """The header and arrays of ``updates``; ``ValueError`` unless each round's points are in
    increasing roster order (the order the server applies them)."""
    masks = []
    for update in updates:
        nodes = [i for i, _ in update.points]
        if nodes != sorted(set(nodes)) or not all(0 <= i < num_nodes for i in nodes):
            raise ValueError(f"round {update.round}: points not in roster order: {nodes}")
        mask = np.zeros(num_nodes, dtype=bool)
        mask[nodes] = True
        masks.append(np.packbits(mask))
    config = {"since": since, "rounds": [u.round for u in updates]}
    arrays = {"accepted": np.concatenate(masks) if masks else np.zeros(0, np.uint8)}
    arrays |= {f"{u}.{j}.{name}": value for u, update in enumerate(updates)
               for j, (_, point) in enumerate(update.points) for name, value in point.items()}
    return config, arrays


def unpack_updates(config: Mapping[str, object], arrays: Mapping[str, np.ndarray],
                   num_nodes: int, eta: Callable[[int], float]) -> tuple[int, list[RoundPoints]]:
    """(since, updates), each round's step size ``eta(round)``; ``DecodeError`` unless rounds
    increase after ``since``, the bitmaps cover the roster with zero padding and every accepted
    node's point has arrays."""
    try:
        since, rounds = int(config["since"]), [int(r) for r in config["rounds"]]
        bitmaps = arrays["accepted"]
    except (KeyError, TypeError, ValueError) as err:
        raise DecodeError(f"bad FedFW update header: {err}") from None
    width = -(-num_nodes // 8)
    if len(rounds) > _MAX_UPDATES or num_nodes < 1:
        raise DecodeError("a FedFW update lists too many rounds, or the roster is empty")
    if (bitmaps.dtype != np.uint8 or bitmaps.shape != (width * len(rounds),)):
        raise DecodeError(f"FedFW update bitmaps must be uint8 of shape ({width * len(rounds)},)")
    if any(b <= a for a, b in zip([since, *rounds], rounds)):
        raise DecodeError(f"FedFW update rounds {rounds} do not increase after {since}")
    masks = np.unpackbits(bitmaps).reshape(len(rounds), 8 * width).astype(bool)
    if masks[:, num_nodes:].any():
        raise DecodeError("a FedFW update bitmap names a node outside the roster")
    grouped: dict[tuple[int, int], Arrays] = {}
    for key, value in arrays.items():
        if key == "accepted":
            continue
        match = _POINT_KEY.match(key)
        if match is None:
            raise DecodeError(f"unexpected array {key!r} in a FedFW update")
        grouped.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
    updates = []
    for u, round_ in enumerate(rounds):
        points = []
        for j, node in enumerate(np.flatnonzero(masks[u])):
            if (u, j) not in grouped:
                raise DecodeError(f"point {j} of update {u} has no arrays")
            points.append((int(node), grouped.pop((u, j))))
        updates.append(RoundPoints(round_, eta(round_), tuple(points)))
    if grouped:
        raise DecodeError(f"arrays of unknown points {sorted(grouped)} in a FedFW update")
    return since, updates


@dataclass(frozen=True)
class Replica:
    """The whole mirror, as a node receives it to start replicating."""

    version: int
    kinds: tuple[str, ...]
    radii: tuple[float, ...]
    points: tuple[list[np.ndarray], ...]  # x_i in roster order
    total: list[np.ndarray]


def pack_replica(replica: Replica) -> tuple[dict, Arrays]:
    config = {"version": replica.version, "kinds": list(replica.kinds),
              "radii": [float(r) for r in replica.radii]}
    arrays = {f"x.{i}.{k}": np.asarray(a, np.float64) for i, x in enumerate(replica.points)
              for k, a in enumerate(x)}
    arrays |= {f"sum.{k}": np.asarray(a, np.float64) for k, a in enumerate(replica.total)}
    return config, arrays


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


def unpack_replica(config: Mapping[str, object], arrays: Mapping[str, np.ndarray],
                   shapes: Sequence[tuple[int, ...]]) -> Replica:
    """``DecodeError`` unless it holds one finite float64 point of ``shapes`` per node."""
    version, kinds, radii = replica_header(config)
    num_nodes = len(kinds)
    expected = {f"x.{i}.{k}" for i in range(num_nodes) for k in range(len(shapes))}
    expected |= {f"sum.{k}" for k in range(len(shapes))}
    if set(arrays) != expected:
        raise DecodeError("a FedFW replica's arrays are not one point per node and a sum")

    def tensor(key: str, shape: tuple[int, ...]) -> np.ndarray:
        value = arrays[key]
        if value.dtype != np.float64 or value.shape != tuple(shape) or not np.isfinite(value).all():
            raise DecodeError(f"{key} is not a finite float64 array of shape {tuple(shape)}")
        return np.array(value)

    points = tuple([tensor(f"x.{i}.{k}", s) for k, s in enumerate(shapes)]
                   for i in range(num_nodes))
    total = [tensor(f"sum.{k}", s) for k, s in enumerate(shapes)]
    return Replica(version, kinds, radii, points, total)
