"""The benchmarks' one runner.

    python -m benchmarks list                  # every case, and the papers' tables and figures
    python -m benchmarks run NAME [--quick] [ARGS ...]

``run`` runs ``python -m benchmarks.NAME`` in a process of its own (each writes its reports
under benchmarks/results/, or results/quick/ for ``--quick``), with the case's declared
arguments (``full``: those of the run that wrote its main report; with ``--quick``, its smoke
version's after ``--quick``) and then ``ARGS``; its exit status is the benchmark's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from benchmarks.cases import CASES, PAPERS, case


def listing() -> str:
    """Every case with its summary and its smoke version, then every table and figure of the
    papers with the case that reproduces it."""
    lines = ["Benchmarks (python -m benchmarks run NAME; * has a --quick smoke version):"]
    width = max(len(c.name) for c in CASES)
    for declared in CASES:
        mark = "*" if declared.quick is not None else " "
        lines.append(f"  {mark} {declared.name:<{width}}  {declared.summary}")
    lines.append("")
    lines.append("The papers' tables and figures:")
    for item, where in PAPERS.items():
        lines.append(f"    {item:<16} {where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every case, and the papers' tables and figures")
    run = commands.add_parser("run", help="run one case")
    run.add_argument("name", nargs="?", help="the case (python -m benchmarks list)")
    run.add_argument("--list", action="store_true", help="list the cases instead")
    run.add_argument("--quick", action="store_true", help="its smoke version")
    args, rest = parser.parse_known_args(argv)
    if args.command == "list" or args.list:
        print(listing())
        return 0
    if args.name is None:
        parser.error("run needs a case's NAME (python -m benchmarks list)")
    try:
        chosen = case(args.name)
    except KeyError as err:
        parser.error(str(err.args[0]))
    extra = [*chosen.full]
    if args.quick:
        if chosen.quick is None:
            parser.error(f"{chosen.name} has no --quick smoke version")
        extra = ["--quick", *chosen.quick]
    command = [sys.executable, "-m", f"benchmarks.{chosen.name}", *extra, *rest]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    raise SystemExit(main())
