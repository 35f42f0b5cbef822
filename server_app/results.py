"""The results folder of DESIGN.md section 3: config.json, metrics.json/.csv and PNG plots."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

ACCURACY_KEYS = ("test_accuracy", "test_mse")


class ResultsWriter:
    """Writes every round as it arrives, so a crashed run still leaves its rounds on disk."""

    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        self.directory = directory
        self.rounds: list[dict[str, Any]] = []
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
        return write_plots(self.directory, self.rounds)


def write_plots(directory: Path, rounds: list[dict[str, Any]]) -> list[Path]:
    """Accuracy (or MSE) vs round and vs cumulative bytes sent both ways."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = next((k for k in ACCURACY_KEYS if any(k in r for r in rounds)), None)
    if metric is None:
        return []
    rows = [r for r in rounds if r.get(metric) is not None]
    x_round = [r["round"] for r in rows]
    y = [r[metric] for r in rows]
    cumulative, total = [], 0
    for r in rows:
        total += r.get("bytes_up", 0) + r.get("bytes_down", 0)
        cumulative.append(total / 1e6)
    paths = []
    for name, xs, label in (
        (f"{metric}_vs_round.png", x_round, "round"),
        (f"{metric}_vs_bytes.png", cumulative, "cumulative payload bytes, up + down (MB)"),
    ):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(xs, y, marker="o", markersize=3)
        ax.set_xlabel(label)
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = directory / name
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
