"""Which nodes take part in a round: one seeded sampler for the two rules the papers use.

``FRACTION`` (FedAvg's appendix rule, FedDR, FFGB): max(1, int(p n)) nodes drawn without
replacement, kept in partition order. ``BERNOULLI`` (FedFW, section 4.2): each node on its own
with probability p. Nodes are drawn by position in the roster's partition order (node ids are
uint64 and would lose digits in a float array), so the same seed picks the same partitions on
every engine; a draw that would take every node costs no random number, and the generator's
state is part of the strategy's checkpoint.
"""

from __future__ import annotations

import numpy as np

FRACTION, BERNOULLI = "fraction", "bernoulli"


class Sampler:
    """Seeded participation: ``draw(nodes)`` for each round, in the nodes' order."""

    def __init__(self, fraction: float, seed: int, rule: str = FRACTION) -> None:
        if rule not in (FRACTION, BERNOULLI):
            raise ValueError(f"unknown sampling rule {rule!r}")
        self.fraction, self.rule = fraction, rule
        self.rng = np.random.default_rng(seed)  # the strategy's only generator

    def draw(self, nodes: list[int]) -> list[int]:
        """The round's participants among ``nodes`` (in their order)."""
        if self.rule == BERNOULLI:
            return [n for n in nodes if self.rng.random() < self.fraction]
        size = min(len(nodes), max(int(len(nodes) * self.fraction), 1))
        if size == len(nodes):
            return list(nodes)
        return [nodes[i] for i in sorted(self.rng.choice(len(nodes), size, replace=False))]
