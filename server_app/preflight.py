"""Check a run config before any engine starts: ``make run`` calls this first.

    python -m server_app.preflight --nodes 10 "algorithm='fedfw' task='synthetic'"

Parses the overrides as ``flwr run --run-config`` does, refuses an undeclared key naming the
closest declared one, then validates exactly what the ServerApp validates before training
(common keys, the algorithm and its keys, task, model, partitioning for that many nodes). Prints
one line and exits 0, or prints ``Invalid run config: ...`` and exits 2, in seconds.
"""

from __future__ import annotations

import argparse
import sys

from run_config.declared import parse_overrides, with_overrides
from server_app.app import check_settings, plan_run
from tasks.errors import ConfigError
from tasks.federation import check_partitioning

EXIT_INVALID = 2


def check(run_config_text: str, num_nodes: int) -> str:
    """A one-line summary of the valid run; ConfigError otherwise."""
    run_config = with_overrides(parse_overrides(run_config_text))
    s = check_settings(run_config)
    if s.sites:
        return (
            f"run config OK: algorithm={s.algorithm} task=site label={s.data_label} "
            f"rounds={s.num_rounds} nodes={num_nodes}; the schema and the model's widths "
            "are agreed with the nodes when the run starts"
        )
    plan = plan_run(s)
    check_partitioning(plan.settings.data, num_nodes)
    plan.strategy.check_federation(num_nodes)
    return (
        f"run config OK: algorithm={s.algorithm} task={s.task} partitioning={s.partitioning} "
        f"rounds={s.num_rounds} nodes={num_nodes}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10, help="simulated SuperNodes (default 10)")
    parser.add_argument("run_config", nargs="*", help="key=value overrides, as for flwr run")
    args = parser.parse_args(argv)
    try:
        print(check(" ".join(args.run_config), args.nodes))
    except ConfigError as err:
        print(f"Invalid run config: {err}", file=sys.stderr)
        return EXIT_INVALID
    return 0


if __name__ == "__main__":
    sys.exit(main())
