"""A family's training round as one secure sum: the reusable exchange a strategy calls in one line.

A family whose server needs only the sum of its nodes' replies (FedAvg's sample-weighted models,
FedFW's and FedDR's changes of what each node holds) builds its train messages as always and
hands them to ``SecureTraining.run`` instead of returning them; the base strategy then takes the
round's replies from the sum (``FederatedStrategy.aggregate_train``) and counts its nodes for
``min-replies`` (``own_exchange``). A reply may carry the last round's evaluation that its message
asked for (``evaluate-first``): it is checked before the masked vector is taken, and a bad one
drops the reply whole, as a plain reply would be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flwr.app import ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid

from functions.protocol import CONFIG, EVALUATE_FIRST, EVALUATION
from functions.secure_sum import SumField
from strategies.screening import exact_records
from strategies.secure_sum import SecureAggregator, SecureOutcome


class SecureTraining:
    """Runs a strategy's training rounds as secure sums and holds the round's outcome until the
    strategy takes it (``take``)."""

    def __init__(self, label: str, seed: int) -> None:
        self.aggregator = SecureAggregator(label, seed)
        self.outcome: SecureOutcome | None = None
        self.asked = 0
        self.evaluating: frozenset[int] = frozenset()  # nodes asked for the last evaluation

    def run(
        self,
        grid: Grid,
        server_round: int,
        messages: Sequence[Message],
        fields: Sequence[SumField],
        check_evaluation: Callable[[Any, int], Any],
        weight: str = "",
    ) -> None:
        """Send ``messages`` as one secure sum of ``fields`` (weighted by the field ``weight``);
        ``check_evaluation(record, node)`` judges an evaluation riding on a reply."""
        self.asked = len(messages)
        self.evaluating = frozenset(
            m.metadata.dst_node_id
            for m in messages
            if EVALUATE_FIRST in m.content.config_records.get(CONFIG, ConfigRecord())
        )

        def riding_only(reply: Message) -> None:
            node = reply.metadata.src_node_id
            kinds = {EVALUATION: MetricRecord} if node in self.evaluating else {}
            record = exact_records(reply.content, kinds).get(EVALUATION)
            if record is not None:
                check_evaluation(record, node)

        self.outcome = self.aggregator.exchange(
            grid, server_round, messages, fields, weight, riding_only
        )

    def counts(self) -> tuple[int, int] | None:
        """(nodes asked, nodes in the sum) of the round's sum; None before one ran."""
        if self.outcome is None:
            return None
        return self.asked, len(self.outcome.contributors)

    def take(self) -> SecureOutcome:
        """The round's outcome, handed over once."""
        outcome, self.outcome = self.outcome, None
        return outcome

    def forget(self, node: int) -> None:
        """``node`` lost its state: it is set up again for the next sum."""
        self.aggregator.forget(node)
