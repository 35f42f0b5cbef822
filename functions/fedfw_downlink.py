"""What FedFW's compact downlink carries (``fedfw.downlink``): the rounds' accepted extreme points
instead of the dense x-bar, or, once, the whole mirror a node replicates.

- updates: for each round after the node's version, eta_t and the accepted points in the order
  the server applied them, each as the compact arrays its node sent (``functions.extreme_points``)
  with the node's index in the roster. Config: ``since``, ``rounds``, ``etas``, ``counts`` (points
  per round); arrays ``nodes`` (roster indices, all rounds in a row, the smallest unsigned
  dtype) and ``{u}.{j}.{name}`` (update u, point j).
- replica: every node's x_i and their running sum (float64), the version, the roster's D_i
  (``kinds``, ``radii``). Arrays ``x.{i}.{k}`` (node i, tensor k) and ``sum.{k}``.

Decoders validate everything and raise ``DecodeError``; no pickle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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


def pack_updates(since: int, updates: Sequence[RoundPoints]) -> tuple[dict, Arrays]:
    config = {"since": since, "rounds": [u.round for u in updates],
              "etas": [float(u.eta) for u in updates],
              "counts": [len(u.points) for u in updates]}
    nodes = [i for u in updates for i, _ in u.points]
    dtype = np.uint8 if max(nodes, default=0) < 256 else np.uint32
    arrays = {"nodes": np.array(nodes, dtype=dtype)}
    arrays |= {f"{u}.{j}.{name}": value for u, update in enumerate(updates)
               for j, (_, point) in enumerate(update.points) for name, value in point.items()}
    return config, arrays


def unpack_updates(config: Mapping[str, object], arrays: Mapping[str, np.ndarray],
                   num_nodes: int) -> tuple[int, list[RoundPoints]]:
    """(since, updates); ``DecodeError`` unless rounds increase after ``since``, each eta is in
    (0, 1], counts match, every node index is in the roster and every point has arrays."""
    try:
        since, rounds = int(config["since"]), [int(r) for r in config["rounds"]]
        etas, counts = [float(e) for e in config["etas"]], [int(c) for c in config["counts"]]
        node_array = arrays["nodes"]
    except (KeyError, TypeError, ValueError) as err:
        raise DecodeError(f"bad FedFW update header: {err}") from None
    if node_array.ndim != 1 or node_array.dtype not in (np.uint8, np.uint32):
        raise DecodeError("FedFW update node indices must be a 1-D uint8 or uint32 array")
    nodes = [int(n) for n in node_array]
    if not (len(rounds) == len(etas) == len(counts) <= _MAX_UPDATES):
        raise DecodeError("FedFW update header lists differ in length")
    if any(b <= a for a, b in zip([since, *rounds], rounds)):
        raise DecodeError(f"FedFW update rounds {rounds} do not increase after {since}")
    if not all(np.isfinite(e) and 0 < e <= 1 for e in etas):
        raise DecodeError(f"FedFW step sizes {etas} are not in (0, 1]")
    if any(c < 0 for c in counts) or sum(counts) != len(nodes):
        raise DecodeError("FedFW update counts do not match the node list")
    if not all(0 <= n < num_nodes for n in nodes):
        raise DecodeError(f"a FedFW update names a node outside the roster of {num_nodes}")
    grouped: dict[tuple[int, int], Arrays] = {}
    for key, value in arrays.items():
        if key == "nodes":
            continue
        match = _POINT_KEY.match(key)
        if match is None:
            raise DecodeError(f"unexpected array {key!r} in a FedFW update")
        grouped.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
    updates, at = [], 0
    for u, (round_, eta, count) in enumerate(zip(rounds, etas, counts)):
        points = []
        for j in range(count):
            if (u, j) not in grouped:
                raise DecodeError(f"point {j} of update {u} has no arrays")
            points.append((nodes[at + j], grouped.pop((u, j))))
        at += count
        updates.append(RoundPoints(round_, eta, tuple(points)))
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
