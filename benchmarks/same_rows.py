"""Behaviour kept through a refactor: every algorithm's rows, compared cell by cell.

A refactor of the strategies, the codecs or the checkpoint must not change what a run computes:
the same seed gives the same rows (accuracy, losses, bytes, failures, participants), bit for
bit. This writes the rows of 22 small configurations (every registered algorithm, plus FFGB with
trees, with distillation and in one shot, FedFW's compact downlink), in-process, 4 nodes, half of
them per round, 4 rounds, and compares two such files (the clocks left out).

    python -m benchmarks.same_rows write rows.json          # 30-50 s on 2 cores (2026-11-28)
    python -m benchmarks.same_rows compare benchmarks/results/same_rows.json rows.json

``compare`` prints each configuration as identical or not, and the first cells that differ;
exit 1 if any does. A file also records the environment that wrote it (``_environment``: Python,
the numeric packages' versions, torch's threads, the CPU's vector extensions and torch's kernel
choice): rows are bit for bit only within one, and ``compare`` says where two files'
environments differ (a rebuilt venv moved 15 of the 22 configurations in their last bits,
2026-11-28; another machine with the same packages moved 15 of them, 2026-11-29, before the
CPU was recorded). A file records the command, commit and machine
that wrote it too (``compare`` leaves them out); ``benchmarks/results/same_rows.json`` is the
reference.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, machine_info

SMALL = {
    "task": "synthetic",
    "num-server-rounds": 4,
    "fraction-train": 0.5,
    "fedfw.participation": 0.5,
    "feddr.participation": 0.5,
    "local-epochs": 0,
    "local-steps": 3,
    "learning-rate": 0.05,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 10,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.distill-steps": 2,
    "fedfun.distill-samples": 20,
    "fedfun.hidden": "8",
    "tensorboard": False,
}
EXTRA = {
    "ffgb-trees": {"algorithm": "ffgb", "ffgb.learner": "tree"},
    "ffgb-distill": {
        "algorithm": "ffgb",
        "ffgb.distill-every": 2,
        "ffgb.distill-rounds": 1,
        "ffgb.distill-steps": 5,
    },
    "ffgb-one-shot": {"algorithm": "ffgb-l", "ffgb.one-shot": True},
    "fedfw-compact": {"algorithm": "fedfw", "fedfw.downlink": "compact"},
}


ENVIRONMENT = "_environment"  # the key of the writer's environment, beside the configurations
# the provenance beside them (the command, the commit and machine), which ``compare`` leaves out
PROVENANCE = ("command", "machine")
# name -> the module whose __version__ it is (xgboost installs as xgboost-cpu or xgboost)
PACKAGES = {
    "flwr": "flwr",
    "torch": "torch",
    "numpy": "numpy",
    "scipy": "scipy",
    "scikit-learn": "sklearn",
    "xgboost": "xgboost",
    "POT": "ot",
}

# the extensions numpy's and torch's dispatch tell apart, in /proc/cpuinfo's spelling
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
)


def vector_flags() -> str:
    """The CPU's vector extensions (Linux's /proc/cpuinfo) that numpy's and torch's kernels pick
    their code paths by ("unknown" elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    return " ".join(f for f in VECTOR_FLAGS if f in flags) or "unknown"


def environment() -> dict[str, str]:
    """What a run's floats depend on besides the code: Python, packages, torch's threads, the
    CPU's vector extensions and the kernels torch picked for them."""
    import torch

    found = {
        "python": platform.python_version(),
        "torch threads": str(torch.get_num_threads()),
        "torch cpu capability": torch.backends.cpu.get_cpu_capability(),
        "cpu vector flags": vector_flags(),
    }
    for name, module in PACKAGES.items():
        try:
            found[name] = str(importlib.import_module(module).__version__)
        except ImportError:
            found[name] = "absent"
    return found


def cases() -> dict[str, dict[str, Any]]:
    from run_config.families import algorithm_names

    return {**{name: {"algorithm": name} for name in sorted(algorithm_names())}, **EXTRA}


def rows_of(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one configuration, without the clocks (``server_app.results.CLOCKS``)."""
    from client_app.app import app as client_app
    from server_app.app import run
    from server_app.results import CLOCKS
    from testing.inprocess_grid import LocalGrid, counting, run_config, server_context

    with tempfile.TemporaryDirectory() as tmp:
        config = run_config(
            **{"output-dir": tmp, "run-name": "rows", **counting({**SMALL, **case})}
        )
        run(LocalGrid(client_app, config, 4, keep_messages=False), server_context(config))
        rows = json.loads((Path(tmp) / "rows" / "metrics.json").read_text())["rounds"]
    return [{k: v for k, v in row.items() if k not in CLOCKS} for row in rows]


def write(out: Path, names: list[str]) -> None:
    chosen = {name: case for name, case in cases().items() if not names or name in names}
    found: dict[str, Any] = {
        "command": command_line(),
        "machine": machine_info(),
        ENVIRONMENT: environment(),
    }
    for name, case in chosen.items():
        found[name] = rows_of(case)
        out.write_text(json.dumps(found, indent=1, sort_keys=True))  # after each, kept if cut
        print(f"{name}: {len(found[name])} rows", flush=True)


def compare(a: Path, b: Path) -> int:
    """0 when every configuration in both files has the same rows, else 1."""
    first, second = json.loads(a.read_text()), json.loads(b.read_text())
    for data in (first, second):
        for key in PROVENANCE:
            data.pop(key, None)
    envs = first.pop(ENVIRONMENT, None), second.pop(ENVIRONMENT, None)
    if None in envs:
        print(f"environment: not recorded in {a if envs[0] is None else b}")
    elif envs[0] != envs[1]:
        keys = sorted(set(envs[0]) | set(envs[1]))
        moved = [
            f"{k} {envs[0].get(k)} -> {envs[1].get(k)}"
            for k in keys
            if envs[0].get(k) != envs[1].get(k)
        ]
        print(f"environment differs ({', '.join(moved)}): floats may differ in their last bits")
    status = 0
    for name in sorted(set(first) & set(second)):
        if first[name] == second[name]:
            print(f"{name}: identical")
            continue
        status = 1
        print(f"{name}: DIFFERENT")
        for i, (r, s) in enumerate(zip(first[name], second[name])):
            cells = {
                k: (r.get(k), s.get(k)) for k in sorted(set(r) | set(s)) if r.get(k) != s.get(k)
            }
            if cells:
                print(f"  round {i}: {cells}")
    for name in sorted(set(first) ^ set(second)):
        print(f"{name}: in one file only")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("write", help="run every configuration, write its rows")
    w.add_argument("out", type=Path)
    w.add_argument("names", nargs="*", help="only these configurations")
    c = commands.add_parser("compare", help="compare two files cell by cell")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.out, args.names)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
