"""``flower-supernode`` with its fixed pollers shortened, to measure what they cost: a
measurement for ``benchmarks.latency``, not a deployment option.

flwr 1.41's SuperNode sleeps a fixed 3 s whenever it asks the SuperLink for a message and there
is none (``flwr/supernode/start_client_internal.py``, line 263: ``time.sleep(3)``), and 0.5 s
between its checks for a ClientApp's reply (lines 470 and 506); neither is settable. This runs
Flower's own ``flower-supernode`` entry point with those sleeps capped at
``FL_SUPERNODE_POLL`` seconds (default 0.1): the difference in round latency is what the two
pollers cost.

    python -m benchmarks.prompt_supernode <flower-supernode arguments>
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

from flwr.supernode import start_client_internal
from flwr.supernode.cli import flower_supernode

CAP = float(os.environ.get("FL_SUPERNODE_POLL", "0.1"))


def _capped_sleep(seconds: float) -> None:
    time.sleep(min(seconds, CAP))


def main() -> None:
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    start_client_internal.time = SimpleNamespace(**{**clock, "sleep": _capped_sleep})
    sys.argv = ["flower-supernode", *sys.argv[1:]]
    flower_supernode()


if __name__ == "__main__":
    main()
