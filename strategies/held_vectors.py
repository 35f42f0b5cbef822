"""What FedFW's and FedDR's server halves share: their nodes each hold a vector (FedFW's x_i,
FedDR's x_hat_i) whose mean over all nodes the server needs. Without secure aggregation the
family keeps every node's vector itself; with it, their running sum (``strategies.held_sum``),
advanced by a secure sum of the round's changes, and a restart at consensus when a node lost
its vector, joined or left (the server cannot take one node's vector out of the sum, nor knows
it to put in a new node's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid

from functions.params import Params
from functions.protocol import SYNC_NONE
from strategies.held_sum import HeldSum, change_fields
from strategies.node_book import dense_restart
from strategies.torch_model import TorchModelStrategy


class HeldVectorStrategy(TorchModelStrategy):
    """A torch-model strategy whose nodes hold the vectors it averages; ``held`` is their
    running sum with secure aggregation (None without)."""

    held: HeldSum | None = None
    held_name: str = "vector"  # what a node holds, for the warning of a restart
    xbar: Params

    def restart(
        self, node: int, xbar: Params, kept: Callable[[int], Params], key: str
    ) -> tuple[str, dict]:
        """The sync instruction of a node that may hold nothing: its vector as the family
        keeps it (``kept(position)``), or with secure aggregation the restart point while it
        has not stepped from it (else it steps from its own)."""
        position = self.book.position(node)
        point = kept(position) if self.held is None else self.held.restart_of(position)
        if point is None:
            return SYNC_NONE, {}
        return dense_restart(self.layout, xbar, point, key)

    def as_secure_sum(
        self, grid: Grid, server_round: int, messages: Sequence[Message], bound: float
    ) -> Sequence[Message]:
        """``messages`` as they go: themselves, or with secure aggregation sent now as one
        secure sum of the nodes' changes (each element at most ``bound``), leaving none."""
        if self.secure_training is None:
            return messages
        fields = change_fields(self.layout, bound)
        self.secure_training.run(grid, server_round, messages, fields, self.check_evaluation_record)
        return []

    def add_secure_round(self, server_round: int) -> int:
        """The round's secure sum of changes added to the running sum, its nodes' steps
        accepted; how many nodes it holds (0: none, the sum stays)."""
        outcome = self.secure_outcome(server_round)
        contributors = [] if outcome is None else outcome.contributors
        if contributors:
            self.held.add(outcome.sums, self.layout, map(self.book.position, contributors))
        self.book.accept(server_round, contributors)
        return len(contributors)

    def hold(self, point: Params) -> HeldSum:
        """With secure aggregation: the running sum of the run's nodes, all at ``point``."""
        return HeldSum(point, self.book.active_positions)

    def on_rebind(self, old: int, new: int, server_round: int) -> None:
        """With secure aggregation a node that lost its vector cannot get it back (the server
        never held it): every node restarts at x-bar, and the node is set up again for the
        secure sums."""
        if self.held is not None:
            self.secure_training.forget(old)
            self._restart_held(server_round, f"node {old} lost its {self.held_name}")

    def _restart_held(self, server_round: int, why: str) -> None:
        """With secure aggregation, every node of the run restarts at x-bar (``why``): the
        steps of their own each took since the last restart are lost, a warning of the run."""
        self.held = self.hold(self.xbar)
        self.book.lost(self.book.node_ids)
        self.warn(server_round, f"{why}; every node restarts at x-bar")

    def on_join(self, node: int, grid: Grid, server_round: int) -> None:
        """With secure aggregation every node restarts at x-bar, the new one with them (the
        family keeps each node's vector itself otherwise, and adds the new one's there)."""
        if self.held is not None:
            self._restart_held(server_round, f"node {node} joined")

    def on_leave(self, node: int, position: int, server_round: int) -> None:
        """With secure aggregation every node restarts at x-bar (the sum cannot lose one
        node's vector); the family drops the node's vector itself otherwise."""
        if self.held is not None:
            self.secure_training.forget(node)
            self._restart_held(server_round, f"node {node} left")
