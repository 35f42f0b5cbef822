"""What a decoder of ensembles accepts: the bounds of one run (no Flower here, so the solvers'
model description, ``oracles.boosting_model``, can hold them)."""

from __future__ import annotations

from dataclasses import dataclass

CONFIG_BYTES = 1 << 12  # a learner's config values and record framing, beyond any spec's


@dataclass(frozen=True)
class Limits:
    """Bounds a decoder enforces on what it accepts."""

    max_learners: int = 10_000  # ensemble version after the delta
    max_nodes: int = 100_000  # per tree
    max_params: int = 1_000_000  # per network
    max_features: int = 1_000_000
    max_outputs: int = 10_000

    def delta_bytes(self, count: int) -> int:
        """An upper bound on the array bytes of a delta of ``count`` learners within these
        limits, at 8 bytes a number: weights, base, and each learner's parameters or its tree's
        nodes (feature, threshold, size and values)."""
        per_learner = 1 + max(self.max_params, self.max_nodes * (3 + self.max_outputs))
        return 8 * (count * per_learner + self.max_outputs)

    def sealed_bytes(self, count: int) -> int:
        """An upper bound on a sealed box of ``count`` learners: their wire form within these
        limits (arrays, config values and framing) and AES-GCM's nonce and tag."""
        return self.delta_bytes(count) + CONFIG_BYTES + 64
