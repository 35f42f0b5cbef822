"""``functions.params``' array decoder: the direct read of numpy's own encoding gives exactly
what numpy's full reader gives, and any other bytes go to the full reader, which refuses what
is malformed; an array is never larger than the bytes received."""

from __future__ import annotations

import io

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from functions.errors import DecodeError
from functions.params import _plain, array_to_numpy, record_to_arrays

DTYPES = st.sampled_from(
    ["bool", "u1", "<u2", ">u4", "<i8", ">i2", "<f2", "<f4", ">f8", "<c8", ">c16"]
)


def _npy(array: np.ndarray) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array, allow_pickle=False)
    return stream.getvalue()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)))
def test_a_plain_array_is_read_directly_and_equals_numpys_reading(array):
    sent = Array(array)
    assert _plain(sent) is not None
    got = array_to_numpy(sent, "a")
    assert got.dtype == array.dtype and got.shape == array.shape and got.flags.writeable
    assert got.tobytes() == np.load(io.BytesIO(sent.data)).tobytes()


@pytest.mark.parametrize(
    "array",
    [np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.array(["ab", "c"]), np.zeros(2, "V3")],
    ids=["fortran", "text", "void"],
)
def test_other_encodings_go_to_numpys_reader(array):
    sent = Array(array)
    assert _plain(sent) is None
    if array.dtype.kind in "fbiuc":
        assert np.array_equal(array_to_numpy(sent, "a"), array)


def _forged(array: np.ndarray, data: bytes, **declared) -> Array:
    fields = {"dtype": str(array.dtype), "shape": tuple(array.shape), "stype": "numpy.ndarray"}
    return Array(**{**fields, **declared, "data": data})


@pytest.mark.parametrize(
    "forge",
    [
        lambda a, d: _forged(a, d + b"\x00"),  # a byte more than the header declares
        lambda a, d: _forged(a, d[:-1]),  # a byte less
        lambda a, d: _forged(a, d, shape=(9,)),  # declared larger than its bytes
        lambda a, d: _forged(a, d, dtype="float64"),  # declared another dtype
        lambda a, d: _forged(a, d.replace(b"(6,)", b"(9,)")),  # header larger than the data
        lambda a, d: _forged(a, d.replace(b"'<f4'", b"'|O' ")),  # objects
        lambda a, d: _forged(a, d.replace(b"'descr'", b"'desc' ")),  # not a header
        lambda a, d: _forged(a, d, stype="torch.Tensor"),
    ],
)
def test_forged_bytes_are_refused_whichever_path_reads_them(forge):
    array = np.arange(6, dtype=np.float32)
    with pytest.raises(DecodeError):
        array_to_numpy(forge(array, _npy(array)), "a")
    with pytest.raises(DecodeError):
        record_to_arrays(ArrayRecord({"a": forge(array, _npy(array)), "b": Array(array)}))


def test_the_bytes_a_record_may_hold_are_counted_before_any_array_is_read():
    record = ArrayRecord({"a": Array(np.zeros(100, np.float64)), "b": Array(np.zeros(3))})
    assert record_to_arrays(record, max_bytes=824)["a"].shape == (100,)
    with pytest.raises(DecodeError, match="more than the 823"):
        record_to_arrays(record, max_bytes=823)
