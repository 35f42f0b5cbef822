"""The results folder (docs/results.md): config.json, metrics.json/.csv and PNG plots.

Every file of a results folder (these, and the checkpoint) is written by ``write_atomic``: a
reader, or a run that crashes mid-write, sees the previous version of a file or the new one,
never a part of it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from server_app.event_log import EventLog

# the headline metric of a row: a global function's, else the mean over nodes' own models
METRIC_KEYS = ("test_accuracy", "test_mse", "test_accuracy_mean", "test_mse_mean")
# what a clock measures, so differs between two runs that compute the same
CLOCKS = ("wall_time_s", "exchange_time_s")
LABEL_UNITS = "rmse_label"  # a standardised regression label's MSE, as RMSE in its own units
LABEL_KEYS = tuple(k.replace("mse", LABEL_UNITS) for k in METRIC_KEYS if "mse" in k)


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else set and restored at once."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, content: bytes | str | Callable[[IO[bytes]], object]) -> Path:
    """Replace ``path`` by ``content`` all at once: written to a temporary file of a unique
    name in the same folder (``tempfile.mkstemp``: created mode 0600, exclusively), flushed to
    disk (fsync), given the mode a plain ``open`` would give it (0666 less the umask), then
    renamed over ``path`` (``os.replace``). ``content``: bytes, text (UTF-8), or a function that
    writes to the open binary file. If anything fails the temporary file is removed and
    ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode() if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def finite(payload: Any) -> Any:
    """``payload`` with every NaN or infinity as None (JSON's null; JSON has no ``Infinity``)
    and numpy scalars as Python numbers, through dicts and lists."""
    if isinstance(payload, dict):
        return {k: finite(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return [finite(v) for v in payload]
    if hasattr(payload, "item") and getattr(payload, "shape", None) == ():  # a numpy scalar
        payload = payload.item()
    if isinstance(payload, float) and not math.isfinite(payload):
        return None
    return payload


class ResultsWriter:
    """Writes every round as it arrives, so a crashed run still leaves its rounds on disk.
    Non-finite numbers are written as null (JSON) or an empty cell (CSV)."""

    def __init__(
        self,
        directory: Path,
        config: dict[str, Any],
        rounds: Sequence[dict[str, Any]] = (),
        title: str = "",
        events: EventLog | None = None,
        plots: bool = True,
    ) -> None:
        """``events``: TensorBoard's copy of every row (``server_app.event_log``), or none;
        ``plots``: draw the PNG plots at ``finish`` (run config ``plots``)."""
        self.directory, self.title, self.events = directory, title, events
        self.plots = plots
        self.config = config
        self.rounds: list[dict[str, Any]] = list(rounds)
        directory.mkdir(parents=True, exist_ok=True)
        self._write_json("config.json", config)

    def _write_json(self, name: str, payload: Any) -> None:
        write_atomic(
            self.directory / name,
            json.dumps(finite(payload), indent=2, sort_keys=False, default=str, allow_nan=False),
        )

    def add_round(self, row: dict[str, Any]) -> None:
        """Append one round row and rewrite metrics.json and metrics.csv."""
        self.rounds.append(row)
        self._write_json("metrics.json", {"rounds": self.rounds, "summary": {}})
        self._write_csv()
        if self.events is not None:
            self.events.add_round(row)

    def amend_round(self, server_round: int, figures: dict[str, Any]) -> dict[str, Any]:
        """Add ``figures`` to round ``server_round``'s row (its nodes' evaluation, which came
        with the next round's replies) and rewrite metrics.json and metrics.csv; the row."""
        row = next(r for r in self.rounds if r["round"] == server_round)
        row.update(figures)
        self._write_json("metrics.json", {"rounds": self.rounds, "summary": {}})
        self._write_csv()
        if self.events is not None:
            self.events.add_round({"round": server_round, **figures})
        return row

    def _write_csv(self) -> None:
        columns: list[str] = []
        for row in self.rounds:
            columns.extend(k for k in row if k not in columns)
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns)
        writer.writeheader()
        writer.writerows(finite(self.rounds))
        write_atomic(self.directory / "metrics.csv", text.getvalue())

    def finish(
        self,
        summary: dict[str, Any],
        outcome: dict[str, Any] | None = None,
        devices: dict[str, Any] | None = None,
        sites: dict[str, Any] | None = None,
        num_nodes: int | None = None,
    ) -> list[Path]:
        """Write the summary, the run's ``outcome`` (config.json keeps it whole, the summary
        its status and cause), the server's and the nodes' ``devices``, the sites' record and
        the number of nodes as the run ended (config.json: late nodes joined in round 1) and,
        unless they are off, the plots (and close the event files); return the plot paths."""
        extra = {"outcome": outcome, "devices": devices, "sites": sites, "num_nodes": num_nodes}
        if any(v is not None for v in extra.values()):
            self.config = {**self.config, **{k: v for k, v in extra.items() if v is not None}}
            self._write_json("config.json", self.config)
        if outcome is not None:
            summary = {**summary, "status": outcome["status"], "cause": outcome["cause"]}
        self._write_json("metrics.json", {"rounds": self.rounds, "summary": summary})
        if self.events is not None:
            self.events.close()
        return write_plots(self.directory, self.rounds, self.title) if self.plots else []


def summarise(rounds: list[dict]) -> dict:
    """Final and best test metric, total traffic and time."""
    last = rounds[-1] if rounds else {}
    summary = {
        "rounds": len(rounds) - 1,
        "bytes_up_total": sum(r.get("bytes_up", 0) for r in rounds),
        "bytes_down_total": sum(r.get("bytes_down", 0) for r in rounds),
        "bytes_up_train_total": sum(r.get("bytes_up_train", 0) for r in rounds),
        "bytes_down_train_total": sum(r.get("bytes_down_train", 0) for r in rounds),
        "failures_total": sum(r.get("failures", 0) for r in rounds),
        "wall_time_s": last.get("wall_time_s"),
    }
    for key in (*METRIC_KEYS, *LABEL_KEYS):
        values = [r[key] for r in rounds if r.get(key) is not None and math.isfinite(r[key])]
        if values:
            lowest = "mse" in key
            summary[f"final_{key}"] = last.get(key)
            summary[f"best_{key}"] = min(values) if lowest else max(values)
    return summary


BYTES_AXIS = "cumulative payload of every message, up + down (MB)"


def cumulative_traffic(rounds: list[dict[str, Any]], metric: str) -> list[float]:
    """The x values of the metric-vs-bytes plot: the megabytes moved up to each row that has
    ``metric``, counting every message (``bytes_up`` + ``bytes_down``: training, evaluation and
    what it carries, such as FFGB's learners that a node needs for its next round, queries).
    Training messages alone would undercount what an algorithm needs to train."""
    xs, total = [], 0
    for r in rounds:
        total += r.get("bytes_up", 0) + r.get("bytes_down", 0)
        if r.get(metric) is not None:
            xs.append(total / 1e6)
    return xs


def write_plots(directory: Path, rounds: list[dict[str, Any]], title: str = "") -> list[Path]:
    """The headline metric vs round and vs the cumulative bytes of every message
    (``cumulative_traffic``), and the bytes per round, where training traffic (the train
    messages) is kept apart from the rest (evaluation and what it carries, queries), on a log
    scale so that a few bytes per upload stay visible next to dense models.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    paths = []

    def save(fig, name: str) -> None:
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        path = directory / name
        _save_figure(fig, path)
        plt.close(fig)
        paths.append(path)

    for name, fig in _metric_figures(rounds, plt, MaxNLocator):
        save(fig, name)
    site_plot = _per_site_figure(rounds, plt, MaxNLocator)
    if site_plot is not None:
        save(site_plot, "sites_vs_round.png")
    bytes_plot = _bytes_figure(rounds, plt, MaxNLocator)
    if bytes_plot is not None:
        save(bytes_plot, "bytes_vs_round.png")
    return paths


def _metric_figures(rounds: list[dict[str, Any]], plt, locator) -> Iterator[tuple[str, Any]]:
    """The headline metric (the first of ``METRIC_KEYS`` the rows have) vs round and vs
    cumulative bytes: (file name, Figure), each made when the one before is saved; none
    without such a metric. A diverged round (a non-finite value) has no point."""
    metric = next((k for k in METRIC_KEYS if any(r.get(k) is not None for r in rounds)), None)
    if metric is None:
        return
    rows = [r for r in rounds if r.get(metric) is not None]
    y = [r[metric] for r in rows]
    shown = [math.isfinite(v) for v in y]  # a diverged round has no point
    y = [v for v, ok in zip(y, shown) if ok]
    for name, xs, label in (
        (f"{metric}_vs_round.png", [r["round"] for r in rows], "round"),
        (f"{metric}_vs_bytes.png", cumulative_traffic(rounds, metric), BYTES_AXIS),
    ):
        xs = [x for x, ok in zip(xs, shown) if ok]
        fig, ax = plt.subplots(figsize=(5, 3.8))
        ax.plot(xs, y, marker="o", markersize=3)
        ax.set_xlabel(label)
        ax.set_ylabel(metric.replace("_", " "))
        if label == "round":
            ax.xaxis.set_major_locator(locator(integer=True))
        ax.grid(alpha=0.3)
        yield name, fig


def _bytes_figure(rounds: list[dict[str, Any]], plt, locator) -> Any:  # a Figure, or None
    """The payload bytes of each round after round 0 on a log scale, training traffic up and
    down apart from the rest (evaluation and what it carries, queries); None without such
    rounds."""
    trained = [r for r in rounds if r.get("round", 0) > 0]
    if not trained:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.8))
    x = [r["round"] for r in trained]
    for key, label, style in (
        ("bytes_up_train", "train, up", "-o"),
        ("bytes_down_train", "train, down", "-s"),
        ("bytes_up", "evaluation & queries, up", "--o"),
        ("bytes_down", "evaluation & queries, down", "--s"),
    ):
        values = [r.get(key, 0) for r in trained]
        if key in ("bytes_up", "bytes_down"):  # the rest of the round's traffic
            values = [v - r.get(key + "_train", 0) for v, r in zip(values, trained)]
        if any(values):
            ax.plot(x, [max(v, 0.5) for v in values], style, markersize=3, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("payload bytes per round, all nodes")
    ax.xaxis.set_major_locator(locator(integer=True))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return fig


SITE_COLUMN = re.compile(r"^site(\d+)_(test_accuracy|test_mse|test_loss)$")


def _per_site_figure(rounds: list[dict[str, Any]], plt, locator):
    """Each site's own test metric per round (columns ``site<partition>_<metric>``, sites' own
    data), accuracy where there is one, else MSE, else loss; None without such columns."""
    found = {m.groups() for r in rounds for k in r if (m := SITE_COLUMN.match(k))}
    metric = next(
        (
            m
            for m in ("test_accuracy", "test_mse", "test_loss")
            if any(name == m for _, name in found)
        ),
        None,
    )
    if metric is None:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for site in sorted({int(p) for p, name in found if name == metric}):
        rows = [r for r in rounds if r.get(f"site{site}_{metric}") is not None]
        ax.plot(
            [r["round"] for r in rows],
            [r[f"site{site}_{metric}"] for r in rows],
            marker="o",
            markersize=3,
            label=f"site {site}",
        )
    ax.set_xlabel("round")
    ax.set_ylabel(f"{metric.replace('_', ' ')}, each site's own test rows")
    ax.xaxis.set_major_locator(locator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def _save_figure(fig, path: Path) -> None:  # a matplotlib Figure
    """``fig`` as a PNG at ``path``, written atomically."""
    write_atomic(path, lambda handle: fig.savefig(handle, format="png", dpi=100))
