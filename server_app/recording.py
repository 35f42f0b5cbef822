"""Turns each round of a strategy into one results row, one log line and one checkpoint."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from server_app.checkpoint import Checkpoint, write_checkpoint
from server_app.metered_grid import MeteredGrid
from server_app.outcome import in_label_units, nonfinite
from server_app.results import ResultsWriter
from server_app.segment_log import SegmentLog
from strategies.base import Diverged, FederatedStrategy

_CLIENT_BOOKKEEPING = ("num-examples",)


class BelowQuorum(RuntimeError):
    """Fewer nodes answered a round's training than ``min-replies`` asks for."""


class RecordedStrategy(Strategy):
    """Delegates to ``inner`` and keeps the metrics it aggregated in the current round.

    Same decorator pattern as Flower's DP wrappers: the inner strategy is unchanged, and Flower's
    own ``Strategy.start`` drives the rounds. ``done`` rounds already ran before this start (a
    resumed run): Flower's round r is the run's round r + done.
    """

    def __init__(self, inner: FederatedStrategy, done: int = 0, min_replies: int = 0) -> None:
        self.inner, self.done, self.min_replies = inner, done, min_replies
        self.round_metrics: dict[str, Any] = {}
        self.asked = 0  # train messages sent this round

    def summary(self) -> None:
        self.inner.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.round_metrics = {}
        messages = list(self.inner.configure_train(server_round + self.done, arrays, config, grid))
        self.asked = len(messages)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        """The inner aggregation; ``BelowQuorum`` first if fewer than ``min_replies`` of the
        nodes asked (or all of them, if fewer were asked) answered without an error (or, for a
        family that exchanges itself, ``own_exchange``'s count); the strategy then keeps its
        state of the last round."""
        replies = list(replies)
        asked, answered = self.inner.own_exchange() or (
            self.asked,
            sum(not r.has_error() for r in replies),
        )
        if answered < min(self.min_replies, asked):
            raise BelowQuorum(
                f"round {server_round + self.done}: {answered} of {asked} "
                f"nodes asked answered, min-replies={self.min_replies}"
            )
        arrays, metrics = self.inner.aggregate_train(server_round + self.done, replies)
        self._keep(metrics)
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round + self.done, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        metrics = self.inner.aggregate_evaluate(server_round + self.done, replies)
        self._keep(metrics)
        return metrics

    def _keep(self, metrics: MetricRecord | None) -> None:
        """Later metrics replace earlier ones, except ``failures``, which add up."""
        if metrics is None:
            return
        failures = self.round_metrics.get("failures", 0) + metrics.get("failures", 0)
        self.round_metrics.update(
            {k: v for k, v in metrics.items() if k not in _CLIENT_BOOKKEEPING}
        )
        self.round_metrics["failures"] = failures


class RoundRecorder:
    """Flower's ``evaluate_fn``: central evaluation, then the round's row, log line, checkpoint."""

    def __init__(
        self,
        strategy: RecordedStrategy,
        grid: MeteredGrid,
        writer: ResultsWriter,
        num_rounds: int,
        algorithm: str,
        run_config: Mapping[str, Any],
        site_schema: str = "",
        label_scale: float = 1.0,
    ) -> None:
        """``label_scale``: a standardised regression label's standard deviation in its own
        units (its MSE columns are also written as RMSE in those units; 1: not standardised)."""
        self.strategy, self.grid, self.writer = strategy, grid, writer
        self.num_rounds, self.algorithm, self.label_scale = num_rounds, algorithm, label_scale
        self.run_config = dict(run_config)  # stored in every checkpoint (server_app.resume)
        self.site_schema = site_schema  # likewise: the sites' schema a resumed run keeps
        self.segments = SegmentLog(writer.directory)  # the checkpoint's append-only part
        already = writer.rounds[-1]["wall_time_s"] if writer.rounds else 0.0
        self.start = time.monotonic() - already

    def __call__(self, flower_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        server_round = flower_round + self.strategy.done
        if flower_round == 0 and self.strategy.done > 0:
            return None  # a resumed run: this round's row is already on disk
        traffic = self.grid.take()
        row: dict[str, Any] = {"round": server_round}
        inner = self.strategy.inner
        central = inner.evaluate_global(server_round, arrays)
        if server_round > 0:  # the nodes' evaluation keeps its figures beside the central ones
            row.update(
                {
                    f"federated_{k}" if k in central else k: v
                    for k, v in self.strategy.round_metrics.items()
                }
            )
        row.update(central)
        late, inner.late_evaluation = inner.late_evaluation, None
        if late is not None:
            self._amend(*late, central)
        row.update(
            bytes_up=traffic.bytes_up,
            bytes_down=traffic.bytes_down,
            bytes_up_train=traffic.bytes_up_train,
            bytes_down_train=traffic.bytes_down_train,
            wire_bytes_up=traffic.wire_bytes_up,
            wire_bytes_down=traffic.wire_bytes_down,
            failures=traffic.failures + int(row.get("failures", 0)),
            exchanges=traffic.exchanges,
            exchange_time_s=round(traffic.exchange_seconds, 3),
            wall_time_s=round(time.monotonic() - self.start, 3),
        )
        bad = nonfinite(row)
        row.update(in_label_units(row, self.label_scale))
        self.writer.add_round(row)
        log(INFO, "%s", format_row(row, self.num_rounds))
        if bad:  # no checkpoint of a diverged state: resuming would resume the divergence
            raise Diverged(server_round, ", ".join(f"{k}={row[k]}" for k in bad))
        segments = self.segments.store(inner.segment_names(), inner.segment_record)
        write_checkpoint(
            self.writer.directory,
            Checkpoint(
                self.algorithm,
                server_round,
                arrays,
                self.writer.rounds,
                inner.state_record(),
                self.run_config,
                self.segments.path.name,
                segments,
                site_schema=self.site_schema,
            ),
        )
        self.segments.retire()
        return MetricRecord({k: v for k, v in row.items() if isinstance(v, (int, float))})

    def _amend(self, server_round: int, metrics: MetricRecord, central: Mapping[str, Any]) -> None:
        """Round ``server_round``'s evaluation by its nodes, which came with the next round's
        train replies (``eval-with-train``), joins its row as in ``__call__``: named
        ``federated_*`` beside central figures, its failures added; what the row holds already
        (its training figures and traffic) stays. One more log line; ``Diverged`` when a figure
        is not finite (the round's checkpoint is on disk: a resumed run evaluates it again)."""
        row = next(r for r in self.writer.rounds if r["round"] == server_round)
        figures: dict[str, Any] = {}
        for key, value in metrics.items():
            name = f"federated_{key}" if key in central else key
            if key == "failures":
                if value:  # an unchanged total is not written (or logged) again
                    figures[key] = row.get(key, 0) + value
            elif key not in _CLIENT_BOOKKEEPING and name not in row:
                figures[name] = value
        bad = nonfinite(figures)
        figures.update(in_label_units(figures, self.label_scale))
        self.writer.amend_round(server_round, figures)
        log(INFO, "%s", format_late(server_round, self.num_rounds, figures))
        if bad:
            raise Diverged(server_round, ", ".join(f"{k}={figures[k]}" for k in bad))


_SHOWN = (
    "test_accuracy",
    "test_mse",
    "test_rmse_label",
    "test_accuracy_mean",
    "test_loss",
    "train_loss",
)


def _shown(figures: dict[str, Any], prefix: str = "") -> list[str]:
    return [
        f"{prefix}{key}={figures[prefix + key]:.4f}"
        for key in _SHOWN
        if figures.get(prefix + key) is not None
    ]


def format_late(server_round: int, num_rounds: int, figures: dict[str, Any]) -> str:
    """The line of a round's nodes' evaluation that came with the next round's replies."""
    parts = _shown(figures) + _shown(figures, "federated_")
    if figures.get("failures"):
        parts.append(f"failures={figures['failures']}")
    return (
        f"[results] round {server_round}/{num_rounds}, its nodes' evaluation (with round "
        f"{server_round + 1}'s replies): " + " | ".join(parts)
    )


def format_row(row: dict[str, Any], num_rounds: int) -> str:
    """One line per round: accuracy or MSE, losses, bytes, time."""
    parts = [f"round {row['round']}/{num_rounds}", *_shown(row)]
    parts.append(f"up={row['bytes_up'] / 1e3:.1f}kB down={row['bytes_down'] / 1e3:.1f}kB")
    if row.get("failures"):
        parts.append(f"failures={row['failures']}")
    parts.append(f"t={row['wall_time_s']:.1f}s")
    return "[results] " + " | ".join(parts)
