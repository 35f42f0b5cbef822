"""How a run ended, in one line: every run's last log line, kept in config.json (``outcome``)
and printed by ``python -m server_app.run_status``.

A run ends ``completed`` or ``failed`` (quorum lost, diverged), never a meaningless success; the
line says which and why, how many rounds completed, the nodes or sites that took part and
those left out with their reasons, the warnings raised, whether it diverged, and the final and
best value of its headline metric (and the round of the best).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from server_app.results import LABEL_KEYS, LABEL_UNITS, METRIC_KEYS
from strategies.roster import partitions_named

COMPLETED, FAILED = "completed", "failed"


def in_label_units(row: dict[str, Any], scale: float) -> dict[str, float]:
    """For a regression label standardised by ``scale`` (its standard deviation in its own
    units), each MSE column of ``row`` as a root mean squared error in the label's own units:
    ``test_mse`` -> ``test_rmse_label``, ``site0_test_mse`` -> ``site0_test_rmse_label``; none
    when the label was not standardised (``scale`` 1)."""
    if scale == 1.0:
        return {}
    return {
        key.replace("mse", LABEL_UNITS): math.sqrt(value) * scale if value >= 0 else value
        for key, value in row.items()
        if "mse" in key and isinstance(value, float) and not math.isnan(value)
    }


def nonfinite(row: dict[str, Any]) -> list[str]:
    """The columns of ``row`` whose value is a NaN or an infinity."""
    return [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]


@dataclass
class Outcome:
    """The run's end: its status and cause, and what the health line says."""

    status: str
    cause: str  # one sentence; empty when completed
    rounds: int  # rounds completed
    planned: int
    nodes: int
    diverged: bool = False
    sites: list[int] | None = None  # sites' own data: the partitions that took part
    left_out: dict[str, str] = field(default_factory=dict)  # node id -> reason
    warnings: list[str] = field(default_factory=list)
    metric: str = ""  # the headline metric, and its final and best values
    final: float | None = None
    best: float | None = None
    best_round: int | None = None
    vacant: list[int] = field(default_factory=list)  # partitions no node of the run served
    privacy: dict[str, Any] | None = None  # the differential-privacy budget spent

    def line(self) -> str:
        """The health line."""
        head = f"Run {self.status}" + (f": {self.cause}" if self.cause else "")
        parts = [f"{self.rounds}/{self.planned} rounds"]
        if self.sites is None:
            parts.append(f"{self.nodes} nodes")
        else:
            parts.append(
                f"{len(self.sites)} sites took part (partitions "
                f"{', '.join(map(str, self.sites)) or 'none'})"
            )
        parts.append(
            f"{len(self.left_out)} left out"
            + (
                ": " + "; ".join(f"node {n}: {r}" for n, r in self.left_out.items())
                if self.left_out
                else ""
            )
        )
        if self.vacant:
            parts.append(
                f"no node for partition{'s' * (len(self.vacant) != 1)} "
                + partitions_named(self.vacant)
            )
        parts.append(f"{len(self.warnings)} warning{'s' * (len(self.warnings) != 1)}")
        parts.append("diverged" if self.diverged else "not diverged")
        if self.privacy is not None:
            parts.append(
                f"differential privacy epsilon {self.privacy['epsilon']:.4g} at delta "
                f"{self.privacy['delta']:g} ({self.privacy['releases']} releases)"
            )
        if self.metric:
            parts.append(
                f"{self.metric} final {_figure(self.final)}, best "
                f"{_figure(self.best)} (round {self.best_round})"
            )
        return f"{head}; " + ", ".join(parts)

    def record(self) -> dict[str, Any]:
        """What config.json keeps (``outcome``), the line included."""
        return {**asdict(self), "line": self.line()}


def _figure(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def headline(rows: list[dict[str, Any]]) -> tuple[str, float | None, float | None, int | None]:
    """The run's headline metric (in the label's units where it has them), its final value,
    and its best finite value with that value's round."""
    metric = next(
        (k for k in (*LABEL_KEYS, *METRIC_KEYS) if any(r.get(k) is not None for r in rows)), ""
    )
    if not metric:
        return "", None, None, None
    scored = [
        (r[metric], r["round"])
        for r in rows
        if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])
    ]
    lowest = "mse" in metric
    best = (min if lowest else max)(scored, default=(None, None))
    return metric, rows[-1].get(metric), best[0], best[1]


def outcome(
    rows: list[dict[str, Any]],
    planned: int,
    nodes: int,
    cause: str = "",
    diverged: bool = False,
    sites: dict[str, Any] | None = None,
    left_out: dict[str, str] | None = None,
    vacant: list[int] | None = None,
    privacy: dict[str, Any] | None = None,
    raised: Sequence[str] = (),
) -> Outcome:
    """The outcome of a run whose results are ``rows`` (round 0 first), ``cause`` the one
    sentence of a failure (empty: completed); ``sites``: config.json's record of the sites'
    agreement; ``left_out`` (node id -> reason) and ``vacant``: the nodes the roster left out
    and the partitions no node served; ``privacy``: the differential-privacy budget spent;
    ``raised``: the strategy's own warnings (``FederatedStrategy.warn``)."""
    metric, final, best, best_round = headline(rows)
    completed = max((r["round"] for r in rows if not nonfinite(r)), default=0)
    return Outcome(
        FAILED if cause else COMPLETED,
        cause,
        completed,
        planned,
        nodes,
        diverged,
        None if sites is None else list(sites["partitions"]),
        {**(sites["left-out"] if sites else {}), **(left_out or {})},
        [*(sites["warnings"] if sites else []), *raised],
        metric,
        final,
        best,
        best_round,
        list(vacant or []),
        privacy,
    )
