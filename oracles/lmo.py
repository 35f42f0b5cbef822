"""Linear minimisation oracles and Euclidean projections for the FedFW domains.

``Constraint(kind, radius).lmo(g)`` returns an exact ``argmin_{s in D} <g, s>`` (Algorithm 1 / eq. 8
of the FedFW paper). The paper's experiments apply the ball to each parameter tensor separately;
``lmo_per_tensor`` offers that ("per-tensor") and one ball over the flattened model ("global").

Conventions, chosen so every oracle is deterministic:

- Ties take the lowest index (``np.argmax`` / ``np.argmin`` order).
- A zero gradient coordinate counts as negative, so the oracle puts ``+r`` there: a zero gradient
  gives ``r*e_0`` for l1, l2 and simplex, ``+r`` everywhere for box, ``r*e_0 e_0^T`` for nuclear.
  Any point of D is an argmin of a zero gradient, so this is a valid answer.
- Nuclear works on matrices; a 0-D or 1-D tensor (a bias) is read as a ``1 x n`` matrix, whose only
  singular value is its l2 norm, so nuclear behaves as l2 on it. Three or more dimensions are
  refused with ``ConfigError``.
- Work is done in float64 and the result is cast back to the input's float dtype (float64 for
  non-float input). Non-finite or empty input raises ``ValueError``.
"""

from dataclasses import dataclass

import numpy as np
from scipy.sparse.linalg import svds

from tasks.errors import ConfigError

CONSTRAINT_NAMES = ("l1", "l2", "box", "nuclear", "simplex")
SCOPES = ("per-tensor", "global")

# A full SVD is cheaper than ARPACK for thin or small matrices, ARPACK for large ones
# (benchmarks/fedfw_wire.py times both); ARPACK also needs min(shape) > 1 for k=1.
_FULL_SVD_MAX_MIN_DIM = 32
_FULL_SVD_MAX_SIZE = 30_000


@dataclass(frozen=True)
class Constraint:
    """A compact convex domain D: a ball of ``radius`` in one gauge, or the scaled simplex.

    ``box`` is the l-infinity ball; ``simplex`` is ``{s >= 0, sum(s) = radius}``.
    """

    kind: str
    radius: float

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_NAMES:
            raise ConfigError.choice("fedfw.constraint", self.kind, CONSTRAINT_NAMES)
        if not (np.isfinite(self.radius) and self.radius > 0):
            raise ConfigError.bound("fedfw.radius", self.radius, "finite and > 0")

    def lmo(self, g: np.ndarray) -> np.ndarray:
        """An extreme point of D minimising <g, s>; same shape and float dtype as ``g``."""
        g = np.asarray(g)
        x = _checked_float64(g)
        r = self.radius
        flat = x.ravel()
        s = np.zeros_like(flat)
        if self.kind == "l1":
            j = int(np.argmax(np.abs(flat)))
            s[j] = -r if flat[j] > 0 else r
        elif self.kind == "l2":
            if np.any(flat):
                s = _scaled_unit_l2(flat, -r)
            else:
                s[0] = r
        elif self.kind == "box":
            s = np.where(flat > 0, -r, r)
        elif self.kind == "simplex":
            s[int(np.argmin(flat))] = r
        else:
            m = _as_matrix(x)
            if np.any(m):
                u, v = _top_singular_pair(m)
                s = -r * np.outer(u, v)
            else:
                s = np.zeros_like(m)
                s[0, 0] = r
        return s.reshape(g.shape).astype(_float_dtype(g), copy=False)

    def norm(self, x: np.ndarray) -> float:
        """The gauge of D: l1, l2 (Frobenius), max-abs or nuclear norm.

        For the simplex it is ``sum(x)`` when ``x >= 0`` and ``inf`` otherwise; the simplex also
        needs ``sum == radius``, which ``contains`` checks.
        """
        x = np.asarray(x, dtype=np.float64)
        flat = x.ravel()
        if self.kind == "l1":
            return float(np.abs(flat).sum())
        if self.kind == "l2":
            return _l2_norm(flat)
        if self.kind == "box":
            return float(np.abs(flat).max(initial=0.0))
        if self.kind == "simplex":
            return float(flat.sum()) if np.all(flat >= 0) else float("inf")
        return float(np.linalg.norm(_as_matrix(x), ord="nuc"))

    def contains(self, x: np.ndarray, rtol: float = 1e-6) -> bool:
        """Whether finite ``x`` lies in D up to a relative tolerance ``rtol`` of the radius."""
        x = np.asarray(x, dtype=np.float64)
        if not np.all(np.isfinite(x)):
            return False
        tol = rtol * self.radius
        if self.kind == "simplex":
            return bool(x.min(initial=0.0) >= -tol and abs(x.sum() - self.radius) <= tol)
        return self.norm(x) <= self.radius + tol

    def project(self, x: np.ndarray) -> np.ndarray:
        """The Euclidean projection of ``x`` onto D; same shape and float dtype as ``x``."""
        x = np.asarray(x)
        y = _checked_float64(x)
        r = self.radius
        if self.kind == "l1":
            p = _project_l1(y.ravel(), r)
        elif self.kind == "l2":
            norm = _l2_norm(y)
            if norm <= r:
                p = y
            else:  # y * (r / norm) unless even the scaled norm overflows
                p = y * (r / norm) if np.isfinite(norm) else _scaled_unit_l2(y, r)
        elif self.kind == "box":
            p = np.clip(y, -r, r)
        elif self.kind == "simplex":
            p = _project_simplex(y.ravel(), r)
        else:
            u, sv, vt = np.linalg.svd(_as_matrix(y), full_matrices=False)
            p = (u * _project_l1(sv, r)) @ vt
        return p.reshape(x.shape).astype(_float_dtype(x), copy=False)


def make_constraint(kind: str, radius: float) -> Constraint:
    """Build a validated constraint from run-config values (raises ``ConfigError``)."""
    try:
        value = float(radius)
    except (TypeError, ValueError):
        raise ConfigError.bound("fedfw.radius", radius, "finite and > 0") from None
    return Constraint(kind, value)


def lmo_per_tensor(
    constraint: Constraint, grads: list[np.ndarray], scope: str = "per-tensor"
) -> list[np.ndarray]:
    """The LMO over a model given as a list of gradient tensors.

    "per-tensor": D is a product of one ball per tensor (the paper's experiments), so the argmin
    is taken tensor by tensor. "global": one ball over the concatenated, flattened model; nuclear
    has no global form and is refused.
    """
    if scope not in SCOPES:
        raise ConfigError.choice("fedfw.scope", scope, SCOPES)
    if scope == "per-tensor":
        return [constraint.lmo(g) for g in grads]
    if constraint.kind == "nuclear":
        raise ConfigError(
            "fedfw.constraint=nuclear needs fedfw.scope=per-tensor (it acts on matrices)"
        )
    if not grads:
        return []
    arrays = [np.asarray(g) for g in grads]
    flat = constraint.lmo(np.concatenate([_checked_float64(a).ravel() for a in arrays]))
    parts = np.split(flat, np.cumsum([a.size for a in arrays])[:-1])
    return [p.reshape(a.shape).astype(_float_dtype(a)) for p, a in zip(parts, arrays)]


def smallest_set(
    sets: list[Constraint], shapes: list[tuple[int, ...]], scope: str
) -> Constraint | None:
    """The one of ``sets`` contained in all the others, i.e. their intersection, or None.

    FedFW with client sets D_i (section 4.3) solves over D = intersection of the D_i; an LMO over
    an intersection has no closed form, but when one D_i lies inside every other, D is that D_i.
    Containment is decided per tensor of ``shapes`` (one flat tensor for ``scope="global"``) from
    the largest gauge of the outer ball over the inner one's extreme points; a pair it cannot
    decide (the simplex, the nuclear norm of a box) counts as not contained.
    """
    if scope == "global":
        shapes = [(int(sum(int(np.prod(s, dtype=np.int64)) for s in shapes)),)]
    distinct = list(dict.fromkeys(sets))
    for inner in distinct:
        if all(_contains(outer, inner, shape) for outer in distinct for shape in shapes):
            return inner
    return None


def _contains(outer: Constraint, inner: Constraint, shape: tuple[int, ...]) -> bool:
    """Whether the ball ``inner`` lies inside the ball ``outer`` on a tensor of ``shape``."""
    if outer == inner:
        return True
    if "simplex" in (outer.kind, inner.kind):
        return False
    n = int(np.prod(shape, dtype=np.int64))
    m, k = (1, n) if len(shape) < 2 else shape[:2]
    # max of the outer gauge over the inner ball of radius 1 (attained at an extreme point)
    sup = {
        ("l1", "l1"): 1.0,
        ("l1", "l2"): 1.0,
        ("l1", "box"): 1.0,
        ("l1", "nuclear"): 1.0,
        ("l2", "l1"): np.sqrt(n),
        ("l2", "l2"): 1.0,
        ("l2", "box"): 1.0,
        ("l2", "nuclear"): np.sqrt(min(m, k)),
        ("box", "l1"): float(n),
        ("box", "l2"): np.sqrt(n),
        ("box", "box"): 1.0,
        ("nuclear", "l1"): np.sqrt(m * k),
        ("nuclear", "l2"): 1.0,
        ("nuclear", "box"): 1.0,
        ("nuclear", "nuclear"): 1.0,
    }.get((inner.kind, outer.kind))
    return sup is not None and sup * inner.radius <= outer.radius * (1 + 1e-12)


def _l2_norm(x: np.ndarray) -> float:
    """||x||_2 without overflow or underflow of the squares (entries near 1e308 or 1e-320)."""
    with np.errstate(over="ignore", under="ignore"):
        norm = float(np.linalg.norm(x))
    if np.isfinite(norm) and (norm > 0 or not np.any(x)):
        return norm
    scale = float(np.abs(x).max())
    return scale * float(np.linalg.norm(x / scale))


def _scaled_unit_l2(x: np.ndarray, r: float) -> np.ndarray:
    """r * x / ||x||_2 for a nonzero finite x, scaled first where the plain formula over- or
    underflows (entries near 1e308 or 1e-320); elsewhere exactly the plain formula's bits."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        norm = np.linalg.norm(x)
        out = r * x / norm if np.isfinite(norm) and norm > 0 else None
    if out is not None and np.all(np.isfinite(out)):
        return out
    scaled = x / np.abs(x).max()
    return r * (scaled / np.linalg.norm(scaled))


def _checked_float64(x: np.ndarray) -> np.ndarray:
    """``x`` as float64, refusing empty or non-finite input (an argmin over NaN is meaningless)."""
    if x.size == 0:
        raise ValueError("empty tensor: the oracle needs at least one coordinate")
    y = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"tensor of shape {x.shape} contains NaN or inf")
    return y


def _float_dtype(x: np.ndarray) -> np.dtype:
    """The input's dtype when it is a float type, else float64."""
    return x.dtype if np.issubdtype(x.dtype, np.floating) else np.dtype(np.float64)


def _as_matrix(x: np.ndarray) -> np.ndarray:
    """The matrix the nuclear ball acts on: 2-D as is, 0-D/1-D as a single row."""
    if x.ndim > 2:
        raise ConfigError(
            f"fedfw.constraint=nuclear needs tensors of at most 2 dimensions, got shape {x.shape}"
        )
    return x.reshape(1, -1) if x.ndim < 2 else x


def _top_singular_pair(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit (u, v) of the largest singular value of ``m``, without a full SVD on large matrices.

    ARPACK starts from a seeded random vector, not ones: softmax gradients have rows summing to
    zero, so a constant start can be orthogonal to the answer. The seed keeps clients deterministic.
    """
    if min(m.shape) <= _FULL_SVD_MAX_MIN_DIM or m.size <= _FULL_SVD_MAX_SIZE:
        u, _, vt = np.linalg.svd(m, full_matrices=False)
    else:
        v0 = np.random.default_rng(0).standard_normal(min(m.shape))
        u, _, vt = svds(m, k=1, v0=v0, tol=0)
    return u[:, 0], vt[0]


def _project_simplex(y: np.ndarray, r: float) -> np.ndarray:
    """Projection onto {s >= 0, sum s = r}, sort-based (Held et al. 1974; Duchi et al. 2008).

    Written in differences from the sorted entries mu_0 >= mu_1 >= ..., so that entries far
    larger than r lose nothing to rounding (the textbook's theta = (sum_{j<=k} mu_j - r) / (k + 1)
    cancels to nothing there and finds no k): with S_k = sum_{j<=k} (mu_j - mu_k), which grows
    with k, rho is the last k with S_k < r (S_0 = 0, so one always is) and the answer is
    max(y - mu_rho + (r - S_rho) / (rho + 1), 0). Hand-written because neither numpy nor scipy
    provides it; O(n log n).
    """
    mu = np.sort(y)[::-1]
    steps = np.concatenate(([0.0], mu[:-1] - mu[1:]))
    with np.errstate(over="ignore"):  # an S_k past the float range is past r all the same
        below = np.cumsum(np.arange(mu.size) * steps)
    rho = int(np.searchsorted(below, r, side="left")) - 1
    return np.maximum((y - mu[rho]) + (r - below[rho]) / (rho + 1), 0.0)


def _project_l1(y: np.ndarray, r: float) -> np.ndarray:
    """Projection onto the l1 ball: identity inside, else sign(y) * simplex projection of |y|."""
    if np.abs(y).sum() <= r:
        return y
    return np.sign(y) * _project_simplex(np.abs(y), r)
