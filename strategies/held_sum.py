"""With secure aggregation, the server's sum of a vector every node holds: FedFW's x_i, FedDR's
x_hat_i.

Both algorithms average one vector over all n nodes, those that did not take part in the round
included (they keep theirs). Without secure aggregation the server keeps every node's vector;
with it the server never sees one, so it keeps their sum: each node sends the change of its
vector in the round into a secure sum, and the sum over the nodes in it is added (a node not in
the sum is told so by ``last-accepted`` and keeps its vector, as the sum does).

A node that lost what it held (a restarted SuperNode, a resumed run) cannot be brought back to
it: the server never knew it. The run then restarts at consensus (``restart``): every node takes
the current x-bar as its vector, which makes the sum n x-bar, and the algorithm continues from
there (its schedule too). Until a node's first change from a restart point is in a sum, each of
its train messages carries that point (``restart_of``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from functions.params import ParamLayout, Params
from functions.protocol import HELD_CHANGE
from functions.secure_sum import SumField


class HeldSum:
    """The sum over the nodes at roster ``positions`` of the vector each node holds, the
    restart point, and the positions whose node has not stepped from it yet."""

    def __init__(self, start: Params, positions: Iterable[int]) -> None:
        self.positions = frozenset(positions)
        self.count = len(self.positions)
        self.restart(start)

    def restart(self, point: Params) -> None:
        """Every node starts again from ``point``: the sum is ``count`` times it."""
        self.point = [np.array(a, dtype=np.float64) for a in point]
        self.total = [a * self.count for a in self.point]
        self.pending = set(self.positions)

    @property
    def mean(self) -> Params:
        """The mean of the nodes' vectors (float64)."""
        return [t / self.count for t in self.total]

    def restart_of(self, position: int) -> Params | None:
        """Where the node at ``position`` must start from (None: from what it holds)."""
        return self.point if position in self.pending else None

    def add(self, sums: Mapping[str, np.ndarray], layout: ParamLayout, positions: Iterable[int]):
        """Add a secure sum of the changes of the nodes at ``positions``, who hold their
        stepped vectors from now on."""
        for k, (name, shape) in enumerate(zip(layout.names, layout.shapes)):
            self.total[k] = self.total[k] + sums[f"{HELD_CHANGE}/{name}"].reshape(shape)
        self.pending -= set(positions)


def change_fields(layout: ParamLayout, bound: float) -> list[SumField]:
    """What a node sends into the round's sum: the change of its vector, tensor by tensor, each
    element at most ``bound`` in absolute value."""
    return [
        SumField(HELD_CHANGE, name, int(np.prod(shape, dtype=np.int64)), bound)
        for name, shape in zip(layout.names, layout.shapes)
    ]
