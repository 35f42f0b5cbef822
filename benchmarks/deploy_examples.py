"""The deployment examples docs/deployment.md quotes, run as written: each ``python -m
deploy.local`` command with its whole output and its wall time, one after the other.

    python -m benchmarks.deploy_examples      # about 3 min on 2 cores

Writes ``results/deploy_examples.md``: the page quotes its log lines and durations from there.
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.common import RESULTS, parser, write_report

EXAMPLES = {
    "TLS and authentication": [
        "--nodes",
        "2",
        "--tls",
        "--auth",
        "algorithm='fedfw' task='synthetic' num-server-rounds=2",
    ],
    "TLS, authentication and the perimeter": [
        "--nodes",
        "2",
        "--tls",
        "--auth",
        "--perimeter",
        "algorithm='fedavg' task='synthetic' num-server-rounds=2",
    ],
}


def run_example(args: list[str]) -> tuple[int, float, str]:
    """Exit status, wall seconds and stdout of ``python -m deploy.local ARGS``."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "deploy.local", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return done.returncode, time.monotonic() - start, done.stdout


def main(argv: list[str] | None = None) -> int:
    parser(__doc__.split("\n")[0]).parse_args(argv)
    start = time.monotonic()
    sections = []
    for name, args in EXAMPLES.items():
        status, wall, out = run_example(args)
        print(f"{name}: exit {status}, {wall:.0f} s", flush=True)
        quoted = " ".join(a if " " not in a else f'"{a}"' for a in args)
        sections.append(
            f"## {name}\n\n`python -m deploy.local {quoted}`: exit {status}, {wall:.0f} s\n\n"
            f"```\n{out.rstrip()}\n```\n"
        )
    write_report(
        RESULTS / "deploy_examples.md",
        "deploy.local's documented examples, run as written",
        time.monotonic() - start,
        "\n".join(sections),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
