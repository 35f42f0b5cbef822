"""Model parameters as a list of numpy arrays ("Params") <-> Flower ArrayRecords, validated."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.lib import format as npy_format

from functions.errors import DecodeError, NonFiniteError

Params = list[np.ndarray]


@dataclass(frozen=True)
class ParamLayout:
    """Names and shapes of a model's tensors, in the order they travel."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of_state_dict(cls, state: Mapping[str, object]) -> ParamLayout:
        """The layout of a torch state_dict (or any name -> array mapping)."""
        return cls(tuple(state), tuple(tuple(np.shape(v)) for v in state.values()))

    @property
    def size(self) -> int:
        return int(sum(np.prod(s, dtype=np.int64) for s in self.shapes))


def params_to_record(
    layout: ParamLayout, params: Sequence[np.ndarray], dtype: type = np.float32
) -> ArrayRecord:
    """An ArrayRecord holding ``params`` under the layout's names (float32 on the wire)."""
    if len(params) != len(layout.names):
        raise ValueError(f"expected {len(layout.names)} tensors, got {len(params)}")
    return ArrayRecord({n: Array(np.asarray(p, dtype=dtype)) for n, p in zip(layout.names, params)})


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (e.g. an encoded extreme point)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def array_to_numpy(array: object, name: str) -> np.ndarray:
    """The numpy array inside a received ``Array``; ``DecodeError`` on any fault.

    Nothing is allocated before the bytes are bounded (``npy_data_bytes``: the .npy header must
    describe exactly the bytes that follow it, so the decoded array is never larger than what was
    received; numpy's loader would otherwise allocate whatever size a header declares before it
    reads). Then Flower reads the bytes with ``np.load(allow_pickle=False)``, unless they are
    numpy's own encoding of the dtype and shape the ``Array`` declares (``_plain``), read
    directly. Callers check the decoded array.
    """
    plain = _plain(array)
    if plain is not None:
        return _from_plain(array, plain)
    npy_data_bytes(array, name)
    return _load(array, name)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy header (format 1.0) numpy's writer puts before a C-ordered array of ``dtype``
    and ``shape``: what Flower's ``Array`` holds for every numpy array it is given."""
    stream = io.BytesIO()
    header = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    npy_format.write_array_header_1_0(stream, header)
    return stream.getvalue()


def _plain(array: object) -> tuple[np.dtype, tuple[int, ...], int] | None:
    """(dtype, shape, header length) when ``array``'s bytes are exactly the header numpy writes
    for the numeric dtype and shape it declares, then that many bytes of data; None for
    anything else, which the full reader handles (and refuses when malformed).

    numpy's reader parses every header as Python literals (``ast.literal_eval``), most of the
    time a small array takes to decode, and messages carry many small arrays; comparing the
    bytes with the header numpy would write gives the same array without that parse."""
    if not isinstance(array, Array) or array.stype != "numpy.ndarray":
        return None
    data, declared = array.data, array.shape
    try:
        dtype = np.dtype(array.dtype)
        shape = tuple(int(d) for d in declared)
    except Exception:  # a declared dtype or shape numpy does not know: the full reader decides
        return None
    if (
        not isinstance(data, bytes)
        or dtype.kind not in "biufc"
        or dtype.fields is not None
        or dtype.subdtype is not None
        or any(type(d) is not int or d < 0 for d in declared)
    ):
        return None
    header = _npy_header(dtype, shape)
    if len(data) != len(header) + math.prod(shape) * dtype.itemsize or not data.startswith(header):
        return None
    return dtype, shape, len(header)


def _from_plain(array: Array, plain: tuple[np.dtype, tuple[int, ...], int]) -> np.ndarray:
    """A writable copy of the data of an array ``_plain`` accepted."""
    dtype, shape, offset = plain
    return np.frombuffer(array.data, dtype, offset=offset).reshape(shape).copy()


def _load(array: Array, name: str) -> np.ndarray:
    try:
        value = array.numpy()
    except Exception as err:  # any parse failure of received bytes
        raise DecodeError(f"{name}: unreadable array ({type(err).__name__}: {err})") from None
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        raise DecodeError(f"{name}: not a plain numpy array")
    return value


def npy_data_bytes(array: object, name: str) -> int:
    """The data bytes of a received ``Array``, read from its .npy header alone (numpy's own
    header reader, which bounds the header); ``DecodeError`` unless it is an ``Array`` of
    Flower's numpy ``stype`` whose header names a plain dtype and a shape that account for
    exactly the bytes after it."""
    if not isinstance(array, Array):
        raise DecodeError(f"{name}: expected an Array, got {type(array).__name__}")
    if array.stype != "numpy.ndarray" or not isinstance(array.data, bytes):
        raise DecodeError(f"{name}: unreadable array (stype {str(array.stype)[:40]!r})")
    stream = io.BytesIO(array.data)
    try:
        version = npy_format.read_magic(stream)
        read_header = (
            npy_format.read_array_header_1_0
            if version == (1, 0)
            else npy_format.read_array_header_2_0
        )
        shape, _, dtype = read_header(stream)
    except Exception as err:  # any fault of the received header
        raise DecodeError(f"{name}: unreadable array ({type(err).__name__}: {err})") from None
    if dtype.hasobject:
        raise DecodeError(f"{name}: not a plain numpy array (dtype {dtype})")
    if not _declares(array, dtype, shape):
        raise DecodeError(
            f"{name}: declared as {str(array.dtype)[:20]!r} "
            f"{str(array.shape)[:40]}, but its bytes hold {dtype} {shape}"
        )
    declared, carried = math.prod(shape) * dtype.itemsize, len(array.data) - stream.tell()
    if declared != carried:
        raise DecodeError(
            f"{name}: unreadable array (its header declares {declared} bytes, {carried} follow)"
        )
    return declared


def _declares(array: Array, dtype: np.dtype, shape: tuple[int, ...]) -> bool:
    """Whether the dtype and shape ``array`` declares are those of its bytes (a mismatch is a
    malformed reply, refused whole, never half-read)."""
    try:
        return np.dtype(array.dtype) == dtype and tuple(array.shape) == tuple(shape)
    except Exception:  # a declared dtype numpy does not know
        return False


def record_to_arrays(record: object, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """A received ArrayRecord's arrays as numpy, each read safely (``array_to_numpy``).

    ``max_bytes``: what the run allows this record to hold; every array's size is read from its
    header first, and a record whose arrays add up to more is refused before any is decoded."""
    if not isinstance(record, ArrayRecord):
        raise DecodeError(f"expected an ArrayRecord, got {type(record).__name__}")
    plain = {k: _plain(v) for k, v in record.items()}
    sizes = {
        k: npy_data_bytes(v, k) if plain[k] is None else len(v.data) - plain[k][2]
        for k, v in record.items()
    }
    if max_bytes is not None and sum(sizes.values()) > max_bytes:
        raise DecodeError(
            f"its arrays hold {sum(sizes.values())} bytes, more than the {max_bytes} the run allows"
        )
    return {
        k: _load(v, k) if plain[k] is None else _from_plain(v, plain[k]) for k, v in record.items()
    }


def record_to_params(record: object, layout: ParamLayout, dtype: type | None = None) -> Params:
    """Decode a dense parameter record: exact names, shapes, float dtype (exactly ``dtype`` when
    given), finite values; float64 out."""
    if not isinstance(record, ArrayRecord) or tuple(record) != layout.names:
        names = list(record)[:5] if isinstance(record, ArrayRecord) else type(record).__name__
        raise DecodeError(f"tensor names {names}... do not match the model's")
    arrays = record_to_arrays(record, max_bytes=8 * layout.size)
    params = []
    for name, shape in zip(layout.names, layout.shapes):
        array = arrays[name]
        if array.shape != shape:
            raise DecodeError(f"{name}: shape {array.shape} != expected {shape}")
        if array.dtype.kind != "f" or (dtype is not None and array.dtype != np.dtype(dtype)):
            expected = np.dtype(dtype) if dtype is not None else "floating point"
            raise DecodeError(f"{name}: dtype {array.dtype} is not {expected}")
        value = array.astype(np.float64)
        if not np.all(np.isfinite(value)):
            raise NonFiniteError(f"{name}: contains NaN or inf")
        params.append(value)
    return params
