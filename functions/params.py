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


def record_to_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The record's arrays as numpy (Flower deserialises without pickle)."""
    return {k: v.numpy() for k, v in record.items()}


def record_to_params(record: ArrayRecord, layout: ParamLayout) -> Params:
    """Decode a dense parameter record: exact names, shapes, float dtype, finite values."""
    if not isinstance(record, ArrayRecord):
        raise DecodeError(f"expected an ArrayRecord, got {type(record).__name__}")
    if tuple(record.keys()) != layout.names:
        raise DecodeError(f"tensor names {list(record.keys())[:5]}... do not match the model's")
    params = []
    for name, shape in zip(layout.names, layout.shapes):
        array = record[name]
        if tuple(array.shape) != shape:
            raise DecodeError(f"{name}: shape {tuple(array.shape)} != expected {shape}")
        if np.dtype(array.dtype).kind != "f":
            raise DecodeError(f"{name}: dtype {array.dtype} is not floating point")
        value = array.numpy().astype(np.float64)
        if not np.all(np.isfinite(value)):
            raise DecodeError(f"{name}: contains NaN or inf")
        params.append(value)
    return params
