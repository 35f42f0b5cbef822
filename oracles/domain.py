"""FedFun's domain: the agreed data box, widened by the kernel radius, mapped onto [0, 1]^p.

Appendix B scales the data "such that its bounding box, including smoothing, is [0, 1]^p", which
keeps m(X) = 1 (so the disagreement penalty has no extreme scale) and makes lambda and delta
comparable across data sets. ``fedfun.delta`` is the box kernel's radius as a fraction of the
data box per side: the data box maps to [delta, 1 + delta] / (1 + 2 delta), and the kernel's
radius in the unit cube is delta / (1 + 2 delta), so every smoothed point stays in the cube for
every delta in [0, 1] (a radius taken in cube units would collapse the data at delta = 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UnitCube:
    """The map from raw features to the unit cube, and the kernel radius there."""

    lower: np.ndarray
    upper: np.ndarray
    delta: float

    @property
    def radius(self) -> float:
        """The box kernel's radius in cube units."""
        return self.delta / (1.0 + 2.0 * self.delta)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``x`` (n, p) in cube coordinates, float32; a constant feature maps to the middle."""
        width = self.upper - self.lower
        scaled = np.where(width > 0, (x - self.lower) / np.where(width > 0, width, 1.0), 0.5)
        return ((scaled + self.delta) / (1.0 + 2.0 * self.delta)).astype(np.float32)
