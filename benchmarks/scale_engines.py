"""The scale benchmark's job on both engines: the in-process engine and `flwr run .` with Ray.

One family of ``benchmarks.scale`` (default ``fedavg``) at one N (default 100), 3 rounds, on
the same run config as ``benchmarks.scale`` (``task='synthetic' synthetic.samples=60000``,
every node in every round), runs

- on the in-process engine, exactly as ``benchmarks.scale`` does (its ``measure``, in a child
  process), and
- through ``flwr run .`` on Flower's simulation engine (Ray, ``num-supernodes=N``), against a
  SuperLink of our own (``testing.simulation_link``: new process group, temporary FLWR_HOME
  and Ray folder, free loopback ports; stopped by its PID, folders removed).

Both results folders' ``metrics.json`` rows are compared round by round on every key both share
but the clocks (``server_app.results.CLOCKS``): the largest absolute difference per metric and
whether every value agrees to 1e-9 relative. Each engine's wall time per round is the difference
of the ServerApp's ``wall_time_s`` between rows (round 1 also builds the rosters and caches;
Ray's round 1 also starts its actors); ``run s`` is the whole command's wall time (for Ray:
building the FAB, submitting it, starting Ray and the ServerApp).

    python -m benchmarks.scale_engines                   # fedavg, N = 100
    python -m benchmarks.scale_engines --family fedfw --nodes 10
    python -m benchmarks.scale_engines --nodes 1000 --ray-nodes 2   # Ray across 2 Ray nodes

Writes ``results/scale-engines.md`` and ``.json`` (``--name`` another name).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, md_table, write_report
from benchmarks.scale import COMMON, FAMILIES, RESULTS
from server_app.results import CLOCKS

CLOCK_KEYS = CLOCKS  # the engines' clocks: timed, not compared
REL_TOL = 1e-9


# -- pure helpers ---------------------------------------------------------------------------
def run_config_arg(values: dict[str, Any]) -> str:
    """``values`` as one ``flwr run --run-config`` string (TOML values, space separated)."""

    def toml(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str) and "'" not in v:
            return f"'{v}'"
        raise ValueError(f"cannot pass {v!r} in --run-config")

    return " ".join(f"{k}={toml(v)}" for k, v in values.items())


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _agree(a: Any, b: Any, rel: float) -> bool:
    if _number(a) and _number(b):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    return a == b


def compare_rows(
    first: list[dict], second: list[dict], rel: float = REL_TOL, skip: tuple[str, ...] = CLOCK_KEYS
) -> dict[str, Any]:
    """Rows of two runs, matched by ``round``: for every key both share (but ``skip``), over
    the rounds both have, the largest absolute difference (numbers; None otherwise) and whether
    every pair agrees to ``rel`` relative (NaN agrees with NaN only; other values by ==)."""
    a = {r["round"]: r for r in first}
    b = {r["round"]: r for r in second}
    rounds = sorted(set(a) & set(b))
    keys_a = {k for t in rounds for k in a[t]} - {"round", *skip}
    keys_b = {k for t in rounds for k in b[t]} - {"round", *skip}
    metrics: dict[str, dict[str, Any]] = {}
    for key in sorted(keys_a & keys_b):
        pairs = [(a[t][key], b[t][key]) for t in rounds if key in a[t] and key in b[t]]
        missing = sum((key in a[t]) != (key in b[t]) for t in rounds)
        numeric = [(x, y) for x, y in pairs if _number(x) and _number(y)]
        diffs = [abs(x - y) for x, y in numeric if not (math.isnan(x) or math.isnan(y))]
        metrics[key] = {
            "rounds": len(pairs),
            "max_abs_diff": (max(diffs) if diffs else 0.0) if len(numeric) == len(pairs) else None,
            "equal": missing == 0 and all(_agree(x, y, rel) for x, y in pairs),
        }
    return {
        "rounds": rounds,
        "metrics": metrics,
        "only_first": sorted(keys_a - keys_b),
        "only_second": sorted(keys_b - keys_a),
        "rounds_only_first": sorted(set(a) - set(b)),
        "rounds_only_second": sorted(set(b) - set(a)),
        "agree": bool(rounds)
        and set(a) == set(b)
        and keys_a == keys_b
        and all(m["equal"] for m in metrics.values()),
    }


def round_seconds(rows: list[dict]) -> dict[int, float]:
    """Each training round's wall time: the ServerApp clock's step from the previous row."""
    walls = {r["round"]: r["wall_time_s"] for r in rows if "wall_time_s" in r}
    return {t: walls[t] - walls[t - 1] for t in sorted(walls) if t >= 1 and t - 1 in walls}


# -- the two engines ------------------------------------------------------------------------
def run_inprocess(family: str, nodes: int, folder: Path, timeout: float) -> dict[str, Any]:
    """``benchmarks.scale.measure`` in a fresh process, its results folder kept in ``folder``."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.scale_engines",
            "--inprocess",
            family,
            str(nodes),
            str(folder),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"in-process run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    rows = json.loads((folder / "scale" / "metrics.json").read_text())["rounds"]
    return {"rows": rows, "run_s": wall, "scale": figures}


def run_ray(
    family: str, nodes: int, folder: Path, timeout: float, cpus: float, ray_nodes: int = 0
) -> dict[str, Any]:
    """``flwr run .`` on Flower's simulation engine, against a SuperLink of our own; with
    ``ray_nodes``, its simulation joins a Ray cluster of that many Ray nodes of one CPU each
    (``testing.ray_cluster``) instead of starting a Ray of its own."""
    from testing.ray_cluster import ray_cluster
    from testing.simulation_link import federation_config, flwr_run, simulation_superlink

    config = {"output-dir": str(folder), "run-name": "ray", **COMMON, **FAMILIES[family]}
    home = Path(tempfile.mkdtemp(prefix="scale-engines-")) / "flwr-home"
    try:
        with contextlib.ExitStack() as stack:
            address = stack.enter_context(ray_cluster((1,) * ray_nodes)) if ray_nodes else None
            env, connection = stack.enter_context(simulation_superlink(home, None, address))
            start = time.perf_counter()
            done = flwr_run(env, connection, nodes, run_config_arg(config), timeout, cpus)
            wall = time.perf_counter() - start
    finally:
        shutil.rmtree(home.parent, ignore_errors=True)
    log = done.stdout + done.stderr
    metrics = folder / "ray" / "metrics.json"
    if done.returncode != 0 or not metrics.exists():
        raise RuntimeError(f"flwr run failed ({done.returncode}):\n{log[-3000:]}")
    return {
        "rows": json.loads(metrics.read_text())["rounds"],
        "run_s": wall,
        "federation_config": federation_config(nodes, cpus),
        "ray_nodes": ray_nodes,
    }


# -- report ---------------------------------------------------------------------------------
def _sci(value: float | None) -> str:
    return "-" if value is None else ("0" if value == 0 else f"{value:.3g}")


def report(result: dict[str, Any]) -> str:
    comparison = result["comparison"]
    engines = result["engines"]
    rounds = sorted({t for e in engines.values() for t in e["round_s"]})
    later = [t for t in rounds if t >= 2] or rounds
    time_rows = []
    for name, label in (("inprocess", "in-process"), ("ray", "flwr run (Ray)")):
        secs = engines[name]["round_s"]
        time_rows.append(
            [
                label,
                *(f"{secs[t]:.2f}" if t in secs else "-" for t in rounds),
                f"{sum(secs[t] for t in later) / len(later):.2f}",
                f"{engines[name]['run_s']:.1f}",
            ]
        )
    lines = [
        (
            f"{result['family']} ({run_config_arg(FAMILIES[result['family']])}) at N = "
            f"{result['nodes']}, run config `{run_config_arg(COMMON)}`; Ray with "
            f"`{engines['ray']['federation_config']}`"
            + (
                f", across a Ray cluster of {engines['ray']['ray_nodes']} Ray nodes of one CPU"
                if engines["ray"].get("ray_nodes")
                else ""
            )
            + "."
        ),
        "",
        (
            f"**Agreement (every shared metric, rounds {comparison['rounds']}, to {REL_TOL:g} "
            f"relative): {'yes' if comparison['agree'] else 'NO'}**"
        ),
        "",
        "## Wall time per round",
        "",
        md_table(
            [
                "engine",
                *(f"round {t} s" for t in rounds),
                f"s/round (rounds {later[0]}-{later[-1]})",
                "run s",
            ],
            time_rows,
        ),
        "",
        "## Metrics, in-process against Ray",
        "",
        md_table(
            ["metric", "rounds", "max abs diff", f"equal to {REL_TOL:g} rel"],
            [
                [k, m["rounds"], _sci(m["max_abs_diff"]), "yes" if m["equal"] else "NO"]
                for k, m in comparison["metrics"].items()
            ],
        ),
    ]
    for side, label in (("only_first", "in-process"), ("only_second", "Ray")):
        if comparison[side]:
            lines += ["", f"Only in the {label} rows: {', '.join(comparison[side])}."]
    for side, label in (("rounds_only_first", "in-process"), ("rounds_only_second", "Ray")):
        if comparison[side]:
            lines += ["", f"Rounds only in the {label} rows: {comparison[side]}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="fedavg")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument(
        "--ray-cpus",
        type=float,
        default=1.0,
        help="client-resources-num-cpus of each Ray actor (default 1)",
    )
    parser.add_argument(
        "--ray-nodes",
        type=int,
        default=0,
        help="run Ray's side on a cluster of this many Ray nodes of one CPU each, started "
        "here (testing.ray_cluster); default 0: the simulation's own Ray",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per engine")
    parser.add_argument(
        "--name",
        default="scale-engines",
        help="results/<name>.md and .json (default: scale-engines)",
    )
    parser.add_argument(
        "--inprocess", nargs=3, metavar=("FAMILY", "N", "FOLDER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.inprocess:
        from benchmarks.scale import measure

        family, nodes, folder = args.inprocess
        print(json.dumps(measure(family, int(nodes), Path(folder))))
        return 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scale-engines-") as tmp:
        engines = {
            "inprocess": run_inprocess(
                args.family, args.nodes, Path(tmp) / "inprocess", args.timeout
            ),
            "ray": run_ray(
                args.family,
                args.nodes,
                Path(tmp) / "ray",
                args.timeout,
                args.ray_cpus,
                args.ray_nodes,
            ),
        }
    for engine in engines.values():
        engine["round_s"] = round_seconds(engine["rows"])
    comparison = compare_rows(engines["inprocess"]["rows"], engines["ray"]["rows"])
    result = {
        "family": args.family,
        "nodes": args.nodes,
        "run_config": COMMON,
        "family_config": FAMILIES[args.family],
        "comparison": comparison,
        "engines": engines,
    }
    text = report(result)
    print(text)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    write_report(
        RESULTS / f"{args.name}.md",
        f"The scale job on both engines: {args.family}, N = {args.nodes}",
        time.perf_counter() - start,
        text,
    )
    return 0 if comparison["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
