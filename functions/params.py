"""Model parameters as a list of numpy arrays ("Params") <-> Flower ArrayRecords, validated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord

from functions.errors import DecodeError

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


def params_to_record(layout: ParamLayout, params: Sequence[np.ndarray],
                     dtype: type = np.float32) -> ArrayRecord:
    """An ArrayRecord holding ``params`` under the layout's names (float32 on the wire)."""
    if len(params) != len(layout.names):
        raise ValueError(f"expected {len(layout.names)} tensors, got {len(params)}")
    return ArrayRecord({n: Array(np.asarray(p, dtype=dtype)) for n, p in zip(layout.names, params)})


def arrays_to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (e.g. an encoded extreme point)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def array_to_numpy(array: object, name: str) -> np.ndarray:
    """The numpy array inside a received ``Array``; ``DecodeError`` on any fault.

    Flower reads the bytes with ``np.load(allow_pickle=False)``; bytes that are not a .npy file, a
    non-numpy ``stype`` or an object that is not an ``Array`` raise here as ``DecodeError``. The
    dtype and shape that ``Array`` declares are not trusted: callers check the decoded array.
    """
    if not isinstance(array, Array):
        raise DecodeError(f"{name}: expected an Array, got {type(array).__name__}")
    try:
        value = array.numpy()
    except Exception as err:  # noqa: BLE001 - any parse failure of received bytes
        raise DecodeError(f"{name}: unreadable array ({type(err).__name__}: {err})") from None
    if not isinstance(value, np.ndarray) or value.dtype.hasobject:
        raise DecodeError(f"{name}: not a plain numpy array")
    return value


def record_to_arrays(record: object) -> dict[str, np.ndarray]:
    """A received ArrayRecord's arrays as numpy, each read safely (``array_to_numpy``)."""
    if not isinstance(record, ArrayRecord):
        raise DecodeError(f"expected an ArrayRecord, got {type(record).__name__}")
    return {k: array_to_numpy(v, k) for k, v in record.items()}


def record_to_params(record: object, layout: ParamLayout, dtype: type | None = None) -> Params:
    """Decode a dense parameter record: exact names, shapes, float dtype (exactly ``dtype`` when
    given), finite values; float64 out."""
    arrays = record_to_arrays(record)
    if tuple(arrays) != layout.names:
        raise DecodeError(f"tensor names {list(arrays)[:5]}... do not match the model's")
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
            raise DecodeError(f"{name}: contains NaN or inf")
        params.append(value)
    return params
