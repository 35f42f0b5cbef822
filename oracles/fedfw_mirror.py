"""FedFW's server-level aggregation (Algorithm 1) on numpy, without Flower: the server's mirror of
every x_i, and each node's replica of it under the compact downlink (``fedfw.downlink``), which
applies the same accepted points in the same order and so holds a bit-identical x-bar.

Algorithm 1 writes the aggregation as x_bar^{t+1} = (1 - eta_t) x_bar^t + eta_t mean_i s_i^t, which
holds only when every client steps. Under partial participation (section 4.2) non-participants keep
x_i^{t+1} = x_i^t, so the server mirrors every client's x_i and keeps x_bar the exact average of
them. The mirror applies the same ``apply_step`` as the clients, so a client that keeps float64
state holds bit-for-bit the x_i the server has for it.

With full participation (p = 1) a round in which every client's point was accepted advances x_bar
by that recursion itself (``mean_step``), and server and nodes take it with the same arithmetic:
a node then needs x_bar and the round's points, not every x_i.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from oracles.frank_wolfe import Params, apply_step


class ConsensusMirror:
    """Server copy of every client's x_i, so that x_bar stays the exact average of the x_i
    under partial participation."""

    def __init__(self, x0: Params, client_ids: Sequence[int]) -> None:
        ids = list(client_ids)
        if not ids:
            raise ValueError("ConsensusMirror needs at least one client")
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate client ids in {ids}")
        start = [np.array(a, dtype=np.float64) for a in x0]
        self._points = {cid: [a.copy() for a in start] for cid in ids}
        self._sum = [a * len(ids) for a in start]

    @classmethod
    def restore(cls, points: Mapping[int, Params], total: Params) -> ConsensusMirror:
        """The mirror whose ``state()`` was ``(points, total)``, bit for bit."""
        mirror = cls(next(iter(points.values())), list(points))
        mirror._points = {
            cid: [np.array(a, dtype=np.float64) for a in x] for cid, x in points.items()
        }
        mirror._sum = [np.array(a, dtype=np.float64) for a in total]
        return mirror

    def state(self) -> tuple[dict[int, Params], Params]:
        """Every x_i and the running sum (kept, not recomputed: its rounding is part of x-bar)."""
        return {cid: [a.copy() for a in x] for cid, x in self._points.items()}, [
            a.copy() for a in self._sum
        ]

    @property
    def client_ids(self) -> list[int]:
        """The clients, in the order they were given."""
        return list(self._points)

    def x_of(self, client_id: int) -> Params:
        """A copy of client ``client_id``'s mirrored x_i."""
        return [a.copy() for a in self._points[client_id]]

    def add(self, client_id: int, x: Params) -> None:
        """A client that joined, with its x_i = ``x``."""
        if client_id in self._points:
            raise KeyError(f"client {client_id} is already mirrored")
        self._points[client_id] = [np.array(a, dtype=np.float64) for a in x]
        for k, a in enumerate(self._points[client_id]):
            self._sum[k] = self._sum[k] + a

    def remove(self, client_id: int) -> None:
        """A client that left: x_bar is the mean of the others' x_i from now on."""
        if len(self._points) == 1:
            raise ValueError("ConsensusMirror keeps at least one client")
        for k, a in enumerate(self._points.pop(client_id)):
            self._sum[k] = self._sum[k] - a

    @property
    def x_bar(self) -> Params:
        """The consensus point (1/n) sum_i x_i, as fresh float64 arrays."""
        n = len(self._points)
        return [total / n for total in self._sum]

    def apply(self, points: Mapping[int, Params], eta: float) -> Params:
        """x_i <- (1 - eta) x_i + eta s_i for each client i in ``points``; others are unchanged.

        The running sum is updated by the participants' differences only, O(|points| * model size).
        Every point is checked before any is applied, so a bad one leaves the mirror untouched.
        Returns the new x_bar.
        """
        return self.apply_steps({cid: [(eta, s)] for cid, s in points.items()})

    def apply_steps(self, steps: Mapping[int, Sequence[tuple[float, Params]]]) -> Params:
        """Each client's (eta, s) steps in order, x_i <- (1 - eta) x_i + eta s each time (a
        local pass of several FW steps, as the client applied them); see ``apply``."""
        unknown = [cid for cid in steps if cid not in self._points]
        if unknown:
            raise KeyError(f"unknown client ids {unknown}")
        updated = {}
        for cid, sequence in steps.items():
            x = self._points[cid]
            for eta, s in sequence:
                x = apply_step(x, [np.asarray(a, dtype=np.float64) for a in s], eta)
            updated[cid] = x
        for cid, new in updated.items():
            old = self._points[cid]
            for k, (new_k, old_k) in enumerate(zip(new, old)):
                self._sum[k] += new_k - old_k
            self._points[cid] = new
        return self.x_bar

    def consensus_distance(self) -> float:
        """mean_i ||x_i - x_bar||_2, the norm taken over all tensors of the model together."""
        x_bar = self.x_bar
        distances = [
            np.sqrt(sum(float(np.sum((xk - bk) ** 2)) for xk, bk in zip(x, x_bar)))
            for x in self._points.values()
        ]
        return float(np.mean(distances))


def mean_step(x_bar: Params, point_sum: Params, count: int, eta: float) -> Params:
    """x_bar' = (1 - eta) x_bar + eta (point_sum / count): Algorithm 1's aggregation for a round
    in which all ``count`` clients stepped from x_bar's x_i with the same eta. One arithmetic
    order (the mean point first, then ``apply_step``) on the server and on every node."""
    if count < 1:
        raise ValueError(f"count={count} must be >= 1")
    return apply_step(x_bar, [np.asarray(t, dtype=np.float64) / count for t in point_sum], eta)
