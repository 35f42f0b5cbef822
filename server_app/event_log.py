"""A run's TensorBoard event files, beside its metrics: ``<results folder>/tensorboard/``.

Every numeric value of every round row becomes a scalar under its column name at step = round,
and the run config is logged once as text, so ``tensorboard --logdir ~/flower-results`` shows
every run side by side with the tools experimenters already use. Written with torch's
``SummaryWriter`` (the ``tensorboard`` package does the encoding); a resumed run adds a new event
file to the same folder, which TensorBoard reads as one run. Off with ``tensorboard=false``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FOLDER = "tensorboard"


class EventLog:
    """The event writer of one results folder."""

    def __init__(
        self, directory: Path, run_config: dict[str, Any], earlier: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Events of the run in ``directory``; ``earlier`` rows (a resumed run's) are logged
        too when the folder holds no events yet (a resumed run writing to a new folder)."""
        from torch.utils.tensorboard import SummaryWriter  # imported only when events are on

        folder = Path(directory) / FOLDER
        fresh = not folder.is_dir() or not any(folder.iterdir())
        self.writer = SummaryWriter(log_dir=str(folder))
        text = json.dumps(run_config, indent=1, sort_keys=True, default=str)
        self.writer.add_text("run_config", f"```\n{text}\n```", len(earlier))
        for row in earlier if fresh else ():
            self.add_round(row)
        self.writer.flush()

    def add_round(self, row: dict[str, Any]) -> None:
        """Every finite number of ``row`` as a scalar at step ``row['round']``, flushed."""
        step = int(row.get("round", 0))
        for key, value in row.items():
            if (
                key != "round"
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
