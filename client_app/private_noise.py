"""The Gaussian noise a node adds to what it sends under differential privacy, drawn from the
OS's randomness: the server knows the run's seed, so noise drawn from it could be drawn again
and taken off."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np


def with_noise(arrays: Sequence[np.ndarray], std: float) -> list[np.ndarray]:
    """``arrays`` in float64, each with Gaussian noise of standard deviation ``std``."""
    rng = np.random.default_rng(secrets.randbits(128))
    return [np.asarray(a, np.float64) + rng.normal(0.0, std, np.shape(a)) for a in arrays]
