"""Extreme-point encodings round-trip, are as small as promised, and decoders refuse bad input."""

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from functions.errors import DecodeError
from functions.extreme_points import (
    decode_extreme_point,
    decode_point_list,
    encode_extreme_point,
    encode_point_list,
)
from oracles.lmo import CONSTRAINT_NAMES, Constraint, lmo_per_tensor


def dense_nbytes(shapes: Sequence[tuple[int, ...]], dtype: np.dtype = np.float32) -> int:
    """Bytes of the same tensors sent densely, the baseline for compression ratios."""
    return sum(int(np.prod(shape, dtype=np.int64)) for shape in shapes) * np.dtype(dtype).itemsize


def encoded_nbytes(arrays: Mapping[str, np.ndarray]) -> int:
    """Payload bytes of an encoding (array data only, no container overhead)."""
    return sum(arr.nbytes for arr in arrays.values())


R = 10.0
MCLR = [(10, 60), (10,)]
EXACT = ("l1", "box", "simplex")


def mclr_points(kind: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return lmo_per_tensor(Constraint(kind, R), [rng.standard_normal(s) for s in MCLR])


def via_flower(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the server reads after the arrays crossed a Flower ArrayRecord."""
    record = ArrayRecord({key: Array(arr) for key, arr in arrays.items()})
    return {key: arr.numpy() for key, arr in record.items()}


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_point_list_round_trips(kind, seed):
    c = Constraint(kind, R)
    points = mclr_points(kind, seed)
    decoded = decode_point_list(c, via_flower(encode_point_list(c, points)), MCLR)
    for p, d in zip(points, decoded):
        assert d.shape == p.shape and d.dtype == np.float64 and c.contains(d)
        if kind in EXACT:
            np.testing.assert_array_equal(d, p)
        else:
            np.testing.assert_allclose(d, p, atol=1e-6 * R)


@pytest.mark.parametrize("kind", CONSTRAINT_NAMES)
def test_zero_gradient_points_round_trip(kind):
    c = Constraint(kind, R)
    s = c.lmo(np.zeros((4, 5), dtype=np.float32))
    np.testing.assert_array_equal(decode_extreme_point(c, encode_extreme_point(c, s), (4, 5)), s)


def test_mclr_encoded_sizes():
    dense = dense_nbytes(MCLR)
    assert dense == 4 * (600 + 10) == 2440
    sizes = {
        kind: encoded_nbytes(encode_point_list(Constraint(kind, R), mclr_points(kind)))
        for kind in CONSTRAINT_NAMES
    }
    # packed across tensors: indices in the largest tensor's dtype (uint16 for 600 entries; an
    # l1 vertex code 2 j + sign bit < 1200 too)
    assert sizes == {
        "l1": 2 * 2,
        "simplex": 2 * 2,
        "box": 75 + 2,
        "nuclear": 4 * (10 + 60) + 4 * (1 + 10),
        "l2": dense,
    }
    assert sizes["l1"] <= 2 * (4 + 1)
    weight_only = {
        kind: encoded_nbytes(encode_extreme_point(Constraint(kind, R), mclr_points(kind)[0]))
        / dense_nbytes(MCLR[:1])
        for kind in CONSTRAINT_NAMES
    }
    assert weight_only["l1"] < 0.01 and weight_only["simplex"] < 0.01
    assert weight_only["box"] == 1 / 32
    assert weight_only["nuclear"] < 0.12


@pytest.mark.parametrize(
    ("n", "dtype"),
    [(1, np.uint8), (128, np.uint8), (129, np.uint16), (32_768, np.uint16), (32_769, np.uint32)],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_vertex_dtype_is_the_smallest_that_fits(n, dtype, sign):
    c = Constraint("l1", R)
    s = np.zeros(n)
    s[-1] = sign * R
    encoded = encode_extreme_point(c, s)
    assert encoded["vertex"].dtype == dtype
    assert encoded["vertex"].tolist() == [2 * (n - 1) + (sign < 0)]
    np.testing.assert_array_equal(decode_extreme_point(c, encoded, (n,)), s)


@pytest.mark.parametrize(("n", "dtype"), [(256, np.uint8), (257, np.uint16)])
def test_simplex_index_dtype_is_the_smallest_that_fits(n, dtype):
    c = Constraint("simplex", R)
    s = np.zeros(n)
    s[-1] = R
    encoded = encode_extreme_point(c, s)
    assert encoded["index"].dtype == dtype
    np.testing.assert_array_equal(decode_extreme_point(c, encoded, (n,)), s)


def test_nuclear_bias_is_a_single_row():
    c = Constraint("nuclear", R)
    encoded = encode_extreme_point(c, mclr_points("nuclear")[1])
    assert encoded["u"].shape == (1,) and encoded["v"].shape == (10,)


def test_global_scope_point_encodes_as_one_flat_tensor():
    """A global-scope l1 point is 1-sparse over the model: encode the concatenation as one."""
    c = Constraint("l1", R)
    rng = np.random.default_rng(0)
    points = lmo_per_tensor(c, [rng.standard_normal(s) for s in MCLR], scope="global")
    flat = np.concatenate([p.ravel() for p in points])
    encoded = encode_extreme_point(c, flat)
    assert encoded_nbytes(encoded) == 2
    np.testing.assert_array_equal(decode_extreme_point(c, encoded, flat.shape), flat)


@pytest.mark.parametrize(
    ("kind", "point"),
    [
        ("l1", np.array([R, R, 0.0])),
        ("l1", np.array([5.0, 0.0])),
        ("simplex", np.array([-R, 0.0])),
        ("box", np.array([R, 0.5])),
        ("nuclear", R / 2 * np.eye(2)),
        ("nuclear", R / 4 * np.ones((2, 2))),
        ("l2", np.array([np.nan, 1.0])),
    ],
)
def test_encoder_refuses_non_extreme_points(kind, point):
    with pytest.raises(ValueError):
        encode_extreme_point(Constraint(kind, R), point)


def good(kind: str) -> dict[str, np.ndarray]:
    """A valid encoding of a (4, 5) extreme point, to be corrupted by one rejection test."""
    g = np.random.default_rng(7).standard_normal((4, 5))
    return dict(encode_extreme_point(Constraint(kind, R), Constraint(kind, R).lmo(g)))


def _with(kind: str, **changes) -> dict[str, np.ndarray]:
    arrays = good(kind)
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    return arrays


BAD = {
    "missing key": ("l1", _with("l1", vertex=None)),
    "extra key": ("simplex", _with("simplex", sign=np.array([1], dtype=np.int8))),
    "old index-and-sign form": (
        "l1",
        _with("l1", vertex=None, index=np.array([3], np.uint8), sign=np.array([1], np.int8)),
    ),
    "wrong index dtype": ("l1", _with("l1", vertex=np.array([3], dtype=np.int64))),
    "wrong float dtype": ("nuclear", _with("nuclear", u=good("nuclear")["u"].astype(np.float64))),
    "index out of range": ("simplex", _with("simplex", index=np.array([20], dtype=np.uint8))),
    "vertex out of range": ("l1", _with("l1", vertex=np.array([40], dtype=np.uint8))),
    "two vertices": ("l1", _with("l1", vertex=np.array([1, 1], dtype=np.uint8))),
    "NaN in dense": ("l2", _with("l2", x=np.full(20, np.nan, dtype=np.float32))),
    "non-unit u": ("nuclear", _with("nuclear", u=2 * good("nuclear")["u"])),
    "NaN in v": ("nuclear", _with("nuclear", v=np.full(5, np.nan, dtype=np.float32))),
    "wrong u length": ("nuclear", _with("nuclear", u=np.array([1, 0, 0], dtype=np.float32))),
    "wrong bits length": ("box", _with("box", bits=np.zeros(4, dtype=np.uint8))),
    "nonzero padding bits": (
        "box",
        _with("box", bits=good("box")["bits"] | np.array([0, 0, 1], np.uint8)),
    ),
    "wrong dense length": ("l2", _with("l2", x=np.zeros(19, dtype=np.float32))),
    "2-D dense": ("l2", _with("l2", x=np.zeros((4, 5), dtype=np.float32))),
    "point outside D": ("l2", _with("l2", x=np.full(20, R, dtype=np.float32))),
    "not an array": ("l2", _with("l2", x=[0.0] * 20)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_decoder_rejects(case):
    kind, arrays = BAD[case]
    with pytest.raises(DecodeError, match="^t3"):
        decode_extreme_point(Constraint(kind, R), arrays, (4, 5), name="t3")


def test_decoder_rejects_bad_sizes_and_shapes():
    c = Constraint("l1", R)
    with pytest.raises(DecodeError, match="outside"):
        decode_extreme_point(c, good("l1"), (4, 5), max_elements=19)
    with pytest.raises(DecodeError, match="outside"):
        decode_extreme_point(c, good("l1"), (0, 5))
    with pytest.raises(DecodeError, match="2 dimensions"):
        decode_extreme_point(Constraint("nuclear", R), good("nuclear"), (4, 5, 1))
    with pytest.raises(DecodeError, match="mapping"):
        decode_extreme_point(c, [good("l1")], (4, 5))


def test_point_list_decoder_rejects_bad_keys_lengths_and_ranges():
    c = Constraint("l1", R)
    arrays = encode_point_list(c, mclr_points("l1"))
    assert sorted(arrays) == ["vertex"] and arrays["vertex"].dtype == np.uint16
    for key in ("t2.vertex", "t0.vertex", "x", "sign"):
        with pytest.raises(DecodeError, match="expected keys"):
            decode_point_list(c, {**arrays, key: np.array([0], dtype=np.uint8)}, MCLR)
    with pytest.raises(DecodeError, match=r"expected shape \(2,\)"):
        decode_point_list(c, {"vertex": arrays["vertex"][:1]}, MCLR)
    # the bias has 10 entries (vertex codes 0..19): 20 is out of its range although it fits the
    # packed uint16; a range check after narrowing to the bias's uint8 would let 276 wrap to 20
    # and 261 to 5
    for bad in (20, 261, 1200):
        with pytest.raises(DecodeError, match="^t1: vertex"):
            decode_point_list(c, {"vertex": np.array([3, bad], dtype=np.uint16)}, MCLR)
    with pytest.raises(DecodeError, match="dtype uint16"):
        decode_point_list(c, {"vertex": np.array([3, 5], dtype=np.uint32)}, MCLR)
