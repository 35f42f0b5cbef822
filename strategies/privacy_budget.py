"""A run's differential-privacy budget: every Gaussian release it made and the (epsilon, delta)
they spend together, from Flower's Renyi-DP accountant (``flwr.supercore.privacy_accounting``,
which wraps Google's dp-accounting), as a strategy's state, a round's metric and the run's
record.

A release is one Gaussian mechanism: noise of ``multiplier`` times the sensitivity of what is
released. No amplification by sampling is claimed (Flower's ``no-amplification`` accounting):
the epsilon is the one of every round releasing, whoever was sampled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

from functions.errors import DecodeError
from strategies.state_codec import checks


@dataclass
class Releases:
    """The state of a budget: each release's noise multiplier and how many nodes it covered."""

    multipliers: np.ndarray = field(metadata=checks(shape=(None,)))
    sizes: np.ndarray = field(metadata=checks("int64", shape=(None,)))


class PrivacyBudget:
    """The releases of a run whose neighbouring datasets differ in one ``unit`` (a node's
    data, or one row), and their epsilon at ``delta``."""

    def __init__(self, delta: float, unit: str) -> None:
        self.delta, self.unit = delta, unit
        self.multipliers: list[float] = []
        self.sizes: list[int] = []

    def release(self, multiplier: float, size: int, count: int = 1) -> float:
        """Count ``count`` Gaussian releases of noise ``multiplier`` over ``size`` nodes; the
        epsilon spent so far."""
        self.multipliers += [float(multiplier)] * count
        self.sizes += [int(size)] * count
        return self.epsilon()

    def epsilon(self) -> float:
        """The epsilon at ``delta`` of every release so far (0 before the first)."""
        if not self.multipliers:
            return 0.0
        population = max(self.sizes)
        accountant = RdpAccountant(
            PrivacyConfig(
                self.delta,
                population,
                NeighboringRelation.ADD_OR_REMOVE_ONE,
                SamplingMethod.NO_AMPLIFICATION,
            )
        )
        events = Counter(zip(self.multipliers, self.sizes))
        for (multiplier, size), count in events.items():
            accountant.compose(GaussianPrivacyEvent(multiplier, size, population), count)
        return float(accountant.get_epsilon(self.delta))

    def record(self) -> dict[str, Any]:
        """What config.json and the health line say of it."""
        return {
            "mechanism": "Gaussian, Renyi-DP accounting (Flower's, on dp-accounting)",
            "unit": self.unit,
            "epsilon": self.epsilon(),
            "delta": self.delta,
            "releases": len(self.multipliers),
        }

    def state(self) -> Releases:
        return Releases(np.array(self.multipliers, np.float64), np.array(self.sizes, np.int64))

    def load(self, releases: Releases) -> None:
        if len(releases.multipliers) != len(releases.sizes):
            raise DecodeError("privacy budget: one size per release")
        if np.any(releases.multipliers <= 0) or np.any(releases.sizes < 1):
            raise DecodeError("privacy budget: a release without noise or nodes")
        self.multipliers = releases.multipliers.tolist()
        self.sizes = releases.sizes.tolist()
