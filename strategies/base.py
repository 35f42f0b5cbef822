"""What the ServerApp needs from a strategy beyond Flower's four hooks.

The ServerApp knows no model: the strategy owns its global function. It says where the run
starts (``initial_arrays``: a torch model's weights, an ensemble, or nothing when the nodes keep
their own models), evaluates that function centrally when the server holds one
(``evaluate_global``), and saves and restores its whole state as records, so a run can be resumed
after the ServerApp stops.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from flwr.app import ArrayRecord, RecordDict
from flwr.serverapp.strategy import Strategy


class FederatedStrategy(Strategy):
    """A Flower Strategy that owns its global function and can checkpoint itself."""

    def initial_arrays(self) -> ArrayRecord:
        """What Flower's ``start`` passes to round 1; empty when there is no global function."""
        return ArrayRecord()

    def evaluate_global(self, server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        """Central evaluation of the global function after ``server_round`` (0: the start);
        empty when the server holds none or central evaluation is off."""
        return {}

    def check_federation(self, num_nodes: int) -> None:
        """ConfigError if the run cannot work with ``num_nodes`` nodes (e.g. FedFun's graph);
        called before the first message and by the preflight check."""

    def description(self) -> dict[str, Any]:
        """What the global function is (model, size), for the run's config.json."""
        return {}

    @abstractmethod
    def state_record(self) -> RecordDict:
        """Everything a fresh strategy with the same settings needs to continue exactly."""

    @abstractmethod
    def load_state_record(self, state: RecordDict) -> None:
        """Restore what ``state_record`` wrote (``DecodeError`` if it does not fit)."""
