"""The one error type raised by every decoder of data that crossed the network, and the array
check decoders share."""

import numpy as np


class DecodeError(ValueError):
    """A received record is malformed, inconsistent, non-finite or too large."""


def check_float32(array: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` if it is a finite float32 array of ``shape``; ``DecodeError`` otherwise."""
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise DecodeError(f"{name}: expected float32, got "
                          f"{getattr(array, 'dtype', type(array).__name__)}")
    if array.shape != shape:
        raise DecodeError(f"{name}: expected shape {shape}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise DecodeError(f"{name}: contains NaN or inf")
    return array
