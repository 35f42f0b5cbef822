"""The Lipschitz extension u_i of a node's data (FFGB paper, eq. 17), used by FFGB.L.

u_i(x) = min_j (y_j + L ||x - x_j||) is L-Lipschitz and interpolates the data when the labels are
L-Lipschitz in the inputs (eq. 16). With several outputs (one-hot classes) the extension is taken
per output; each output is then L-Lipschitz (the paper points to Kirszbraun's theorem for a
vector-valued extension; the per-output one is what can be written down and evaluated).
Its input gradient, needed by the Sobolev oracle, is L (x - x_j*) / ||x - x_j*|| for the minimising
point x_j* (defined wherever x is not a data point).

Eq. 17 is the largest L-Lipschitz interpolant (McShane's): away from the node's points it grows
like L times the distance, so the average of the nodes' extensions, which FFGB.L converges to,
is biased upwards wherever a node has no data (measured in benchmarks/README.md, case
`ffgb_heterogeneous`).
``kind='midpoint'`` takes the mean of the largest and the smallest (Whitney's,
max_j (y_j - L ||x - x_j||)) L-Lipschitz interpolants instead: also L-Lipschitz and
interpolating, so Algorithm 4 and Theorem 3.3 apply unchanged; it is an option, not the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_CHUNK = 256  # rows of pairwise distances computed at once
UPPER, MIDPOINT = "upper", "midpoint"
KINDS = (UPPER, MIDPOINT)


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """||a_i - b_j|| for all pairs, (len(a), len(b))."""
    squared = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.maximum(squared, 0.0))


def data_lipschitz_constant(x: np.ndarray, y: np.ndarray) -> float:
    """The smallest L for which eq. 16 holds on (x, y): max |y_i - y_j| / ||x_i - x_j|| over
    pairs of distinct inputs and over outputs (pairs of equal inputs are left out)."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    best = 0.0
    for start in range(0, len(x), _CHUNK):
        rows = slice(start, start + _CHUNK)
        dist = _distances(x[rows], x)
        gap = np.abs(y[rows][:, None, :] - y[None, :, :]).max(axis=2)
        distinct = dist > 1e-12 * max(1.0, float(np.abs(x).max()))
        if distinct.any():
            best = max(best, float((gap[distinct] / dist[distinct]).max()))
    return best


@dataclass(frozen=True, eq=False)
class LipschitzExtension:
    """u(z) = min_j (y_j + L ||z - x_j||) (``upper``, eq. 17), or its mean with
    max_j (y_j - L ||z - x_j||) (``midpoint``), per output, over the node's points (x, y)."""

    x: np.ndarray  # (n, d)
    y: np.ndarray  # (n, c)
    lipschitz: float
    kind: str = UPPER

    @classmethod
    def of(
        cls, x: np.ndarray, y: np.ndarray, lipschitz: float, kind: str = UPPER
    ) -> LipschitzExtension:
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if not (np.isfinite(lipschitz) and lipschitz >= 0):
            raise ValueError(f"the Lipschitz constant must be finite and >= 0, got {lipschitz}")
        if kind not in KINDS:
            raise ValueError(f"unknown extension {kind!r}; expected one of {KINDS}")
        return cls(x, y, float(lipschitz), kind)

    def _extreme(self, z: np.ndarray, sign: float) -> tuple[np.ndarray, np.ndarray]:
        """Per point and output: min_j (y_j + L d_j) (sign +1) or max_j (y_j - L d_j) (sign -1),
        and the index of the data point that attains it."""
        dist = _distances(z, self.x)
        candidates = sign * self.y[None, :, :] + self.lipschitz * dist[:, :, None]  # (m, n, c)
        best = candidates.argmin(axis=1)  # (m, c)
        value = np.take_along_axis(candidates, best[:, None, :], axis=1)[:, 0, :]
        return sign * value, best

    def _sides(self) -> tuple[float, ...]:
        return (1.0,) if self.kind == UPPER else (1.0, -1.0)

    def values(self, z: np.ndarray) -> np.ndarray:
        """u at the points z: (m, c)."""
        z = np.asarray(z, dtype=np.float64).reshape(len(z), -1)
        sides = [self._extreme(z, sign)[0] for sign in self._sides()]
        return sum(sides) / len(sides)

    def jacobian(self, z: np.ndarray) -> np.ndarray:
        """du/dz at the points z: (m, c, d) (zero where z is a data point)."""
        z = np.asarray(z, dtype=np.float64).reshape(len(z), -1)
        sides = []
        for sign in self._sides():
            _, best = self._extreme(z, sign)
            offset = z[:, None, :] - self.x[best]  # (m, c, d)
            norm = np.linalg.norm(offset, axis=2, keepdims=True)
            sides.append(
                sign
                * self.lipschitz
                * np.divide(offset, norm, out=np.zeros_like(offset), where=norm > 0)
            )
        return sum(sides) / len(sides)
