"""Turns each round of any Strategy into one results row and one log line."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from server_app.metered_grid import MeteredGrid
from server_app.results import ResultsWriter

CentralEvaluator = Callable[[ArrayRecord], dict[str, float]]
_CLIENT_BOOKKEEPING = ("num-examples",)


class RecordedStrategy(Strategy):
    """Delegates to ``inner`` and keeps the metrics it aggregated in the current round.

    Same decorator pattern as Flower's DP wrappers: the inner strategy is unchanged,
    and Flower's own ``Strategy.start`` drives the rounds.
    """

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        self.round_metrics: dict[str, Any] = {}

    def summary(self) -> None:
        self.inner.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        self.round_metrics = {}
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):  # noqa: ANN201
        arrays, metrics = self.inner.aggregate_train(server_round, replies)
        self._keep(metrics)
        return arrays, metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        metrics = self.inner.aggregate_evaluate(server_round, replies)
        self._keep(metrics)
        return metrics

    def _keep(self, metrics: MetricRecord | None) -> None:
        if metrics is not None:
            self.round_metrics.update(
                {k: v for k, v in metrics.items() if k not in _CLIENT_BOOKKEEPING}
            )


class RoundRecorder:
    """Flower's ``evaluate_fn``: central evaluation, then the round's row and log line."""

    def __init__(self, strategy: RecordedStrategy, grid: MeteredGrid, writer: ResultsWriter,
                 num_rounds: int, central: CentralEvaluator | None) -> None:
        self.strategy, self.grid, self.writer = strategy, grid, writer
        self.num_rounds, self.central = num_rounds, central
        self.start = time.monotonic()

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        traffic = self.grid.take()
        row: dict[str, Any] = {"round": server_round}
        if server_round > 0:
            row.update(self.strategy.round_metrics)
        if self.central is not None:
            row.update(self.central(arrays))
        row.update(
            bytes_up=traffic.bytes_up,
            bytes_down=traffic.bytes_down,
            bytes_up_train=traffic.bytes_up_train,
            bytes_down_train=traffic.bytes_down_train,
            wire_bytes_up=traffic.wire_bytes_up,
            wire_bytes_down=traffic.wire_bytes_down,
            failures=traffic.failures + int(row.get("failures", 0)),
            wall_time_s=round(time.monotonic() - self.start, 3),
        )
        self.writer.add_round(row)
        log(INFO, "%s", format_row(row, self.num_rounds))
        return MetricRecord({k: v for k, v in row.items() if isinstance(v, (int, float))})


def format_row(row: dict[str, Any], num_rounds: int) -> str:
    """One line per round: accuracy or MSE, losses, bytes, time."""
    parts = [f"round {row['round']}/{num_rounds}"]
    for key in ("test_accuracy", "test_mse", "test_loss", "train_loss"):
        if row.get(key) is not None:
            parts.append(f"{key}={row[key]:.4f}")
    parts.append(f"up={row['bytes_up'] / 1e3:.1f}kB down={row['bytes_down'] / 1e3:.1f}kB")
    if row.get("failures"):
        parts.append(f"failures={row['failures']}")
    parts.append(f"t={row['wall_time_s']:.1f}s")
    return "[results] " + " | ".join(parts)
