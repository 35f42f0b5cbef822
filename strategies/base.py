"""What the ServerApp needs from a strategy beyond Flower's four hooks.

The ServerApp knows no model: the strategy owns its global function. It says where the run
starts (``initial_arrays``: a torch model's weights, an ensemble, or nothing when the nodes keep
their own models), evaluates that function centrally when the server holds one
(``evaluate_global``), and saves and restores its whole state as records, so a run can be resumed
after the ServerApp stops.

Between rounds it follows the federation (``returning_nodes``): a SuperNode that restarted under
a new node id takes its partition's place in the roster, and ``rebind`` moves the strategy's
per-node books to it, where it counts as a node that lost its state (it is re-synced).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from flwr.app import ArrayRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from strategies.roster import Roster


class FederatedStrategy(Strategy):
    """A Flower Strategy that owns its global function and can checkpoint itself."""

    label: str
    roster: Roster | None = None  # the run's nodes, once asked (round 1)
    pinned: dict[int, int] = {}  # node id -> the partition it alone may serve (node-partitions)

    def pin_partitions(self, pinned: dict[int, int]) -> None:
        """Only node ``n`` may serve partition ``pinned[n]``; with a map, a node that claims
        another partition, or is not in it, is refused (``node-partitions``, for SuperNodes with
        authentication, whose node ids are fixed at registration)."""
        self.pinned = dict(pinned)

    def query_roster(self, grid: Grid, server_round: int) -> tuple[Roster, int]:
        """Round 1's ``query.node`` (``Roster.query``) under the run's pins."""
        return Roster.query(grid, self.label, server_round, self.pinned)

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

    def returning_nodes(self, grid: Grid, server_round: int) -> int:
        """At the start of a round after the roster's first: take SuperNodes that came back
        under a new node id in (``Roster.refresh``: no message unless a new id is connected) and
        ``rebind`` each; return how many ``query.node`` answers were unusable (failures of the
        round)."""
        rebinds, rejected = self.roster.refresh(grid, self.label, server_round, self.pinned)
        for old, new in rebinds:
            self.rebind(old, new)
        return rejected

    def rebind(self, old: int, new: int) -> None:
        """Node ``new`` took the place of ``old`` in the roster (a restarted SuperNode of the same
        partition): move every per-node book kept under ``old`` to ``new``, in the same position,
        and treat ``new`` as a node that lost its state, so the next message brings it up to
        date. Nothing to do for a strategy whose nodes keep no state (FedAvg)."""

    def forget_node_states(self) -> None:
        """Every node of the roster holds nothing any more (a resumed run: Flower starts a new
        run, and a node's ``Context.state`` is per run): each is treated as a node that lost its
        state, so its next message brings it up to date (``rebind`` of a node to itself)."""
        for node in list(self.roster.node_ids if self.roster is not None else []):
            self.rebind(node, node)

    @abstractmethod
    def state_record(self) -> RecordDict:
        """Everything a fresh strategy with the same settings needs to continue exactly."""

    @abstractmethod
    def load_state_record(self, state: RecordDict) -> None:
        """Restore what ``state_record`` wrote (``DecodeError`` if it does not fit)."""
