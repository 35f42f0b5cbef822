"""The results folder of DESIGN.md section 3: config.json, metrics.json/.csv and PNG plots."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# the headline metric of a row: a global function's, else the mean over nodes' own models
METRIC_KEYS = ("test_accuracy", "test_mse", "test_accuracy_mean", "test_mse_mean")


class ResultsWriter:
    """Writes every round as it arrives, so a crashed run still leaves its rounds on disk."""

    def __init__(self, directory: Path, config: dict[str, Any],
                 rounds: Sequence[dict[str, Any]] = (), title: str = "") -> None:
        self.directory, self.title = directory, title
        self.rounds: list[dict[str, Any]] = list(rounds)
        directory.mkdir(parents=True, exist_ok=True)
        self._write_json("config.json", config)

    def _write_json(self, name: str, payload: Any) -> None:
        tmp = self.directory / (name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str))
        os.replace(tmp, self.directory / name)

    def add_round(self, row: dict[str, Any]) -> None:
        """Append one round row and rewrite metrics.json and metrics.csv."""
        self.rounds.append(row)
        self._write_json("metrics.json", {"rounds": self.rounds, "summary": {}})
        self._write_csv()

    def _write_csv(self) -> None:
        columns: list[str] = []
        for row in self.rounds:
            columns.extend(k for k in row if k not in columns)
        with open(self.directory / "metrics.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(self.rounds)

    def finish(self, summary: dict[str, Any]) -> list[Path]:
        """Write the summary and the plots; return the plot paths."""
        self._write_json("metrics.json", {"rounds": self.rounds, "summary": summary})
        return write_plots(self.directory, self.rounds, self.title)


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
    for key in METRIC_KEYS:
        values = [r[key] for r in rounds if r.get(key) is not None]
        if values:
            lowest = "mse" in key
            summary[f"final_{key}"] = last.get(key)
            summary[f"best_{key}"] = min(values) if lowest else max(values)
    return summary


def write_plots(directory: Path, rounds: list[dict[str, Any]], title: str = "") -> list[Path]:
    """The headline metric vs round and vs cumulative training bytes, and the bytes per round.

    Training traffic (the algorithm's own messages) is kept apart from evaluation traffic
    (diagnostics such as FedFW's dense gradients for ``fw_gap``), on a log scale so that a few
    bytes per upload stay visible next to dense models.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    paths = []

    def save(fig, name: str) -> None:  # noqa: ANN001
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        path = directory / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)

    metric = next((k for k in METRIC_KEYS if any(r.get(k) is not None for r in rounds)), None)
    if metric is not None:
        rows = [r for r in rounds if r.get(metric) is not None]
        y = [r[metric] for r in rows]
        cumulative, total = [], 0
        for r in rounds:
            total += r.get("bytes_up_train", 0) + r.get("bytes_down_train", 0)
            if r.get(metric) is not None:
                cumulative.append(total / 1e6)
        for name, xs, label in (
            (f"{metric}_vs_round.png", [r["round"] for r in rows], "round"),
            (f"{metric}_vs_bytes.png", cumulative,
             "cumulative training payload, up + down (MB)"),
        ):
            fig, ax = plt.subplots(figsize=(5, 3.8))
            ax.plot(xs, y, marker="o", markersize=3)
            ax.set_xlabel(label)
            ax.set_ylabel(metric.replace("_", " "))
            if label == "round":
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            save(fig, name)
    trained = [r for r in rounds if r.get("round", 0) > 0]
    if trained:
        fig, ax = plt.subplots(figsize=(5, 3.8))
        x = [r["round"] for r in trained]
        for key, label, style in (
            ("bytes_up_train", "train, up", "-o"), ("bytes_down_train", "train, down", "-s"),
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
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
        save(fig, "bytes_vs_round.png")
    return paths
