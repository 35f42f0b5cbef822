"""Compact wire encodings of LMO outputs (extreme points of D).

What travels per tensor (the radius and the shape never travel; both sides know them); a model's
tensors are packed field by field into one array each (``encode_point_list``):

- l1:      ``vertex`` = 2 * index + (1 if the sign is negative else 0), the smallest unsigned int
           dtype holding ``2 n - 1``, shape (1,): s = -+ r * e_index (2 bytes for up to 32,768
           coordinates, where an index and a separate sign byte took 3).
- simplex: ``index`` (smallest unsigned int dtype holding ``n - 1``, shape (1,)): s = r * e_index.
- box:     ``bits`` = ``np.packbits(s > 0)`` (uint8, ceil(n/8) bytes, padding bits zero):
           s = +r where the bit is set, -r elsewhere.
- nuclear: ``u`` (float32, m) and ``v`` (float32, n), unit vectors with s = r * u v^T (the sign of
           the LMO is folded into u); 0-D/1-D tensors are 1 x n matrices, so ``u`` has length 1.
- l2:      ``x`` = s flattened, float32 (a sphere point has no shorter exact form).

Decoders trust nothing: exact key sets, dtypes, shapes, ranges, finiteness and unit norms are
checked, and any violation raises ``DecodeError`` naming the tensor. Membership in D then holds by
construction for l1, simplex, box and nuclear (renormalised u, v give nuclear norm exactly r, with
no SVD of a possibly large matrix); the dense l2 point's norm is checked and the point projected
onto the ball to undo float32 rounding. Decoders return float64, so the server averages exactly.

A codec needs only the set's ``kind`` and ``radius`` (``Ball``); ``oracles.lmo.Constraint`` is one.
"""

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from functions.errors import DecodeError, NonFiniteError


class Ball(Protocol):
    """The constraint set an extreme point belongs to: its kind ("l1", "l2", ...) and radius."""

    @property
    def kind(self) -> str: ...

    @property
    def radius(self) -> float: ...


# Encoders accept a point as an extreme point of D up to this relative error (float32 rounding).
_ENCODE_RTOL = 1e-5
# Decoders accept |‖u‖ - 1| and |‖v‖ - 1| up to this, then renormalise.
_UNIT_TOL = 1e-3
# float32 rounding can push a dense l2 point just outside the ball; accept that much, then project.
_DENSE_RTOL = 1e-5
# integer fields and the codes per coordinate they carry (an l1 vertex: index and sign)
_CODES = {"index": 1, "vertex": 2}
INDEX_FIELDS = {"l1": "vertex", "simplex": "index"}  # the kinds whose point is one code a ball


def encode_extreme_point(constraint: Ball, s: np.ndarray) -> dict[str, np.ndarray]:
    """The fewest bytes that reconstruct the extreme point ``s`` of D (see the module docstring).

    Raises ``ValueError`` when ``s`` is not an extreme point of the kind the encoding assumes.
    """
    s = np.asarray(s, dtype=np.float64)
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise ValueError(f"cannot encode an empty or non-finite point of shape {s.shape}")
    r = constraint.radius
    flat = s.ravel()
    if constraint.kind == "box":
        if not np.allclose(np.abs(flat), r, rtol=_ENCODE_RTOL, atol=0):
            raise ValueError("not a box vertex: some |s_j| differs from the radius")
        return {"bits": np.packbits(flat > 0)}
    if constraint.kind == "l2":
        return {"x": flat.astype(np.float32)}
    if constraint.kind == "nuclear":
        return _encode_rank_one(s.reshape(1, -1) if s.ndim < 2 else s, r)
    j = int(np.argmax(np.abs(flat)))
    rest = np.delete(flat, j)
    if not (np.isclose(abs(flat[j]), r, rtol=_ENCODE_RTOL, atol=0) and not np.any(rest)):
        raise ValueError(f"not a {constraint.kind} vertex: expected one nonzero entry of size {r}")
    if constraint.kind == "simplex":
        if flat[j] < 0:
            raise ValueError("not a simplex vertex: the nonzero entry is negative")
        return {"index": np.array([j], dtype=_index_dtype(flat.size))}
    return {"vertex": np.array([2 * j + int(flat[j] < 0)], dtype=_index_dtype(2 * flat.size))}


def decode_extreme_point(
    constraint: Ball,
    arrays: Mapping[str, np.ndarray],
    shape: tuple[int, ...],
    max_elements: int = 50_000_000,
    *,
    name: str = "tensor",
) -> np.ndarray:
    """Rebuild a point of D (float64, ``shape``) from its encoding; ``DecodeError`` on any fault."""
    n = int(np.prod(shape, dtype=np.int64))
    if not 1 <= n <= max_elements:
        raise DecodeError(f"{name}: {n} elements is outside [1, {max_elements}]")
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"{name}: expected a mapping of arrays, got {type(arrays).__name__}")
    kind, r = constraint.kind, constraint.radius
    if kind == "nuclear":
        if len(shape) > 2:
            raise DecodeError(f"{name}: nuclear points need at most 2 dimensions, got {shape}")
        m, k = (1, n) if len(shape) < 2 else shape
        fields = _fields(arrays, {"u": (np.float32, m), "v": (np.float32, k)}, name)
        u, v = (_unit(fields[key], key, name) for key in ("u", "v"))
        return (r * np.outer(u, v)).reshape(shape)
    if kind == "box":
        bits = _fields(arrays, {"bits": (np.uint8, -(-n // 8))}, name)["bits"]
        set_bits = np.unpackbits(bits)
        if np.any(set_bits[n:]):
            raise DecodeError(f"{name}: nonzero padding bits after the {n} coordinates")
        return np.where(set_bits[:n] == 1, r, -r).reshape(shape)
    if kind == "l2":
        x = _fields(arrays, {"x": (np.float32, n)}, name)["x"].astype(np.float64)
        if not np.all(np.isfinite(x)):
            raise NonFiniteError(f"{name}: dense point contains NaN or inf")
        norm = float(np.linalg.norm(x))
        if not norm <= r * (1.0 + _DENSE_RTOL):
            raise DecodeError(f"{name}: point of l2 norm {norm:.6g} is outside D (r={r})")
        return (x * (r / norm) if norm > r else x).reshape(shape)
    key = "vertex" if kind == "l1" else "index"
    code = int(_fields(arrays, {key: (_index_dtype(_CODES[key] * n), 1)}, name)[key][0])
    if code >= _CODES[key] * n:
        raise DecodeError(f"{name}: {key} {code} out of range for {n} coordinates")
    j, negative = divmod(code, _CODES[key]) if kind == "l1" else (code, 0)
    s = np.zeros(n)
    s[j] = -r if negative else r
    return s.reshape(shape)


def encode_point_list(constraint: Ball, points: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Encode one extreme point per model tensor, each field packed across tensors.

    ``vertex`` / ``index`` hold one entry per tensor (in the dtype of the largest tensor),
    ``bits``, ``u``, ``v``, ``x`` the tensors' fields one after another. Shapes are not sent: the
    receiver splits by the model's known shapes. One array per field instead of one per field and
    tensor saves the key, dtype, shape and ~128-byte header Flower serialises with every array.
    """
    if not points:
        raise ValueError("cannot encode an empty list of points")
    per_tensor = [encode_extreme_point(constraint, point) for point in points]
    return {
        key: np.concatenate(
            [
                fields[key].astype(np.result_type(*(f[key] for f in per_tensor)))
                for fields in per_tensor
            ]
        )
        for key in per_tensor[0]
    }


def decode_point_list(
    constraint: Ball,
    arrays: Mapping[str, np.ndarray],
    shapes: Sequence[tuple[int, ...]],
    max_elements: int = 50_000_000,
) -> list[np.ndarray]:
    """Decode ``encode_point_list`` output against the model's known ``shapes`` (float64).

    ``max_elements`` bounds each tensor. Each packed field must have exactly the dtype and total
    length the shapes imply; indices are range-checked per tensor before any narrowing cast.
    """
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"expected a mapping of arrays, got {type(arrays).__name__}")
    if not shapes:
        raise DecodeError("no tensor shapes to decode against")
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    for k, n in enumerate(sizes):
        if not 1 <= n <= max_elements:
            raise DecodeError(f"t{k}: {n} elements is outside [1, {max_elements}]")
    lengths = [_field_lengths(constraint.kind, shape, n) for shape, n in zip(shapes, sizes)]
    spec = {
        key: (_packed_dtype(key, max(sizes)), sum(length[key] for length in lengths))
        for key in lengths[0]
    }
    packed = _fields(arrays, spec, "point")
    pieces: list[dict[str, np.ndarray]] = [{} for _ in shapes]
    for key, arr in packed.items():
        bounds = np.cumsum([0] + [length[key] for length in lengths])
        for k, n in enumerate(sizes):
            piece = arr[bounds[k] : bounds[k + 1]]
            if key in _CODES:
                if int(piece[0]) >= _CODES[key] * n:
                    raise DecodeError(
                        f"t{k}: {key} {int(piece[0])} out of range for {n} coordinates"
                    )
                piece = piece.astype(_index_dtype(_CODES[key] * n))
            pieces[k][key] = piece
    return [
        decode_extreme_point(constraint, piece, tuple(shape), max_elements, name=f"t{k}")
        for k, (piece, shape) in enumerate(zip(pieces, shapes))
    ]


def _field_lengths(kind: str, shape: tuple[int, ...], n: int) -> dict[str, int]:
    """Length of each encoded field of one tensor of ``shape`` (``n`` elements)."""
    if kind == "nuclear":
        if len(shape) > 2:
            raise DecodeError(f"nuclear points need at most 2 dimensions, got {shape}")
        m, k = (1, n) if len(shape) < 2 else shape
        return {"u": m, "v": k}
    if kind == "box":
        return {"bits": -(-n // 8)}
    if kind == "l2":
        return {"x": n}
    return {"index": 1} if kind == "simplex" else {"vertex": 1}


def _packed_dtype(key: str, largest: int) -> np.dtype:
    """The dtype a packed field must have."""
    if key in _CODES:
        return _index_dtype(_CODES[key] * largest)
    return {"bits": np.dtype(np.uint8)}.get(key, np.dtype(np.float32))


def _index_dtype(n: int) -> np.dtype:
    """The smallest unsigned integer dtype holding every index below ``n``."""
    return np.min_scalar_type(max(n - 1, 0))


def _encode_rank_one(s: np.ndarray, r: float) -> dict[str, np.ndarray]:
    """Factor a nuclear-ball extreme point s = r u v^T (unit u, v) from its largest column."""
    j = int(np.argmax(np.linalg.norm(s, axis=0)))
    u = s[:, j] / np.linalg.norm(s[:, j])
    v = s.T @ u / r
    if not (
        np.isclose(np.linalg.norm(v), 1.0, rtol=0, atol=_ENCODE_RTOL)
        and np.linalg.norm(s - r * np.outer(u, v)) <= _ENCODE_RTOL * r
    ):
        raise ValueError("not a nuclear-ball extreme point: expected rank one with nuclear norm r")
    return {"u": u.astype(np.float32), "v": (v / np.linalg.norm(v)).astype(np.float32)}


def _fields(
    arrays: Mapping[str, np.ndarray], spec: dict[str, tuple[np.dtype, int]], name: str
) -> dict[str, np.ndarray]:
    """The arrays named in ``spec``, each checked to be 1-D with the expected dtype and length."""
    if set(arrays) != set(spec):
        raise DecodeError(f"{name}: expected keys {sorted(spec)}, got {sorted(map(str, arrays))}")
    for key, (dtype, length) in spec.items():
        arr = arrays[key]
        if not isinstance(arr, np.ndarray) or arr.dtype != np.dtype(dtype):
            got = getattr(arr, "dtype", type(arr).__name__)
            expected = np.dtype(dtype)
            raise DecodeError(f"{name}.{key}: expected an array of dtype {expected}, got {got}")
        if arr.shape != (length,):
            raise DecodeError(f"{name}.{key}: expected shape ({length},), got {arr.shape}")
    return dict(arrays)


def _unit(x: np.ndarray, key: str, name: str) -> np.ndarray:
    """``x`` as a float64 unit vector, refusing non-finite values or a norm far from 1."""
    y = x.astype(np.float64)
    norm = np.linalg.norm(y) if np.all(np.isfinite(y)) else np.nan
    if not abs(norm - 1.0) <= _UNIT_TOL:
        raise DecodeError(f"{name}.{key}: expected a finite unit vector, got norm {norm}")
    return y / norm


def encode_model_point(
    constraint: Ball, points: Sequence[np.ndarray], scope: str
) -> dict[str, np.ndarray]:
    """Encode a whole model's extreme point: one ball per tensor, or one flat tensor (global)."""
    if scope == "global":
        return encode_point_list(constraint, [np.concatenate([np.ravel(p) for p in points])])
    return encode_point_list(constraint, points)


def decode_model_point(
    constraint: Ball,
    arrays: Mapping[str, np.ndarray],
    shapes: Sequence[tuple[int, ...]],
    scope: str,
) -> list[np.ndarray]:
    """Inverse of ``encode_model_point`` against the model's known tensor ``shapes``."""
    if scope != "global":
        return decode_point_list(constraint, arrays, shapes)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    (flat,) = decode_point_list(constraint, arrays, [(sum(sizes),)])
    pieces = np.split(flat, np.cumsum(sizes)[:-1])
    return [piece.reshape(shape) for piece, shape in zip(pieces, shapes)]


def join_points(encoded: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Several encoded model points in one mapping, ``{k}.{field}`` for point k (FedFW's local
    pass: one extreme point per local step, in step order)."""
    return {
        f"{k}.{name}": value for k, point in enumerate(encoded) for name, value in point.items()
    }


def decode_model_points(
    constraint: Ball,
    arrays: Mapping[str, np.ndarray],
    shapes: Sequence[tuple[int, ...]],
    scope: str,
    max_points: int,
) -> list[list[np.ndarray]]:
    """Inverse of ``join_points``: ``DecodeError`` unless the keys name points 0..K-1,
    1 <= K <= ``max_points``, and every point decodes."""
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"expected a mapping of arrays, got {type(arrays).__name__}")
    grouped: dict[int, dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        step, _, name = str(key).partition(".")
        if not (step.isdigit() and name) or len(step) > 9:
            raise DecodeError(f"unexpected array {key!r} among a local pass's points")
        grouped.setdefault(int(step), {})[name] = value
    count = len(grouped)
    if not 1 <= count <= max_points or sorted(grouped) != list(range(count)):
        raise DecodeError(
            f"a local pass's points must be numbered 0..K-1 with 1 <= K <= "
            f"{max_points}; got {sorted(grouped)[:10]}"
        )
    return [decode_model_point(constraint, grouped[k], shapes, scope) for k in range(count)]


def sum_model_points(
    sets: Sequence[Ball],
    points: Sequence[Mapping[str, np.ndarray]],
    shapes: Sequence[tuple[int, ...]],
    scope: str,
) -> list[np.ndarray]:
    """sum_i s_i (float64, one array per shape) of encoded model points, point i of ``sets[i]``,
    decoded and added one by one in the order given; ``DecodeError`` on any invalid point."""
    if len(sets) != len(points) or not points:
        raise DecodeError(f"{len(points)} points for {len(sets)} sets")
    total = [np.zeros(tuple(shape)) for shape in shapes]
    for ball, arrays in zip(sets, points):
        for t, s in zip(total, decode_model_point(ball, arrays, shapes, scope)):
            t += s
    return total


def sum_index_points(
    kind: str,
    radii: np.ndarray,
    codes: np.ndarray,
    shapes: Sequence[tuple[int, ...]],
    scope: str,
) -> list[np.ndarray]:
    """``sum_model_points`` of l1 or simplex points given as their codes, one row a point (its
    ``INDEX_FIELDS[kind]`` field), point i of radius ``radii[i]``: all decoded at once and added
    in point order (``np.add.at``), bit for bit what one by one gives; the codes are checked as
    ``decode_point_list`` checks them. At N = 1,000 points a round, decoding them one by one
    was most of a FedFW node's time."""
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    balls = [sum(sizes)] if scope == "global" else sizes
    key = INDEX_FIELDS[kind]
    if codes.dtype != _packed_dtype(key, max(balls)) or codes.shape != (len(radii), len(balls)):
        raise DecodeError(
            f"{kind} codes of dtype {codes.dtype} and shape {codes.shape}; "
            f"expected {_packed_dtype(key, max(balls))}, "
            f"({len(radii)}, {len(balls)})"
        )
    codes = codes.astype(np.int64)
    if codes.size == 0 or np.any(codes >= _CODES[key] * np.array(balls)):
        raise DecodeError(f"no points, or a {key} out of range for its tensor's coordinates")
    index, negative = np.divmod(codes, _CODES[key])
    signed = np.where(negative == 1, -radii[:, None], radii[:, None])
    flat = np.zeros(sum(sizes))
    np.add.at(flat, (index + np.cumsum([0, *balls[:-1]])).ravel(), signed.ravel())
    pieces = np.split(flat, np.cumsum(sizes)[:-1])
    return [piece.reshape(shape) for piece, shape in zip(pieces, shapes)]
