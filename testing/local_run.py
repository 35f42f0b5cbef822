"""Run a job on the in-process engine: every node in this one process, no Ray, no SuperLink.

    python -m testing.local_run --nodes 10 "algorithm='ffgb' task='mnist-5k'"
    python -m testing.local_run --nodes 10 --node-config "device='cuda'" "task='mnist-5k'"

The real ServerApp and ClientApp exchange Flower messages through ``LocalGrid``
(``testing/inprocess_grid.py``, the engine of the tests and benchmarks); the run writes the
results folder a ``flwr run`` writes (under the run config's ``output-dir``). By default the
nodes of a round run in lockstep (``--together``, ``oracles.lockstep``): their MLP weak-learner
fits are made as one batched fit, which on one GPU is what fills it (benchmarks/README.md,
case `devices`); ``--together 1`` runs them one after another, as ``flwr run`` does on one core.
What a node computes does not depend on that, to float rounding.

For a GPU workstation simulating many nodes; ``flwr run .`` remains the simulation of record
(Ray: nodes in separate processes, as in a deployment). Prints the run's folder and health line;
exits 0 when the run completed, 1 when it failed, 2 for a run config it refuses before starting.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client_app.app import app as client_app
from run_config.declared import parse_overrides
from server_app.app import main as server_main
from server_app.preflight import EXIT_INVALID, check
from server_app.run_info import DEFAULT_OUTPUT_DIR
from server_app.run_status import report, results_of
from tasks.errors import ConfigError
from testing.inprocess_grid import RUN_ID, LocalGrid, run_config, server_context

EXIT_FAILED = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10, help="simulated nodes (default 10)")
    parser.add_argument(
        "--together",
        type=int,
        default=0,
        help="nodes run in lockstep, their fits made together (default 0: all; 1: none)",
    )
    parser.add_argument(
        "--node-config", default="", help="key=value pairs given to every node, e.g. device='cuda'"
    )
    parser.add_argument("run_config", nargs="*", help="key=value overrides, as for flwr run")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.together < 0:
        parser.error("--nodes must be at least 1 and --together at least 0")
    text = " ".join(args.run_config)
    try:
        print(check(text, args.nodes), flush=True)
        config = run_config(**parse_overrides(text))
        node_config = parse_overrides(args.node_config)
    except ConfigError as err:
        print(f"Invalid run config: {err}", file=sys.stderr)
        return EXIT_INVALID
    grid = LocalGrid(
        client_app,
        config,
        args.nodes,
        [dict(node_config) for _ in range(args.nodes)],
        keep_messages=False,
        together=args.together or args.nodes,
    )
    failure = None
    try:
        server_main(grid, server_context(config))
    except Exception as err:  # the ServerApp's own reason, as Flower would record it
        failure = f"{type(err).__name__}: {err}"
    output_dir = Path(str(config.get("output-dir") or DEFAULT_OUTPUT_DIR)).expanduser()
    for line in report(*(results_of(str(RUN_ID), output_dir) or (None, None))):
        print(line)
    if failure is not None:
        print(f"the run failed: {failure}", file=sys.stderr)
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
