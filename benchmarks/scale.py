"""How each family grows with the number of nodes: server time, node time, bytes, memory and
checkpoint size per round, at N = 10, 100, 300 (1,000 with ``--sizes``), on the in-process
engine.

Each (family, N) runs 3 rounds in its own process (so its peak memory is its own), with every
node taking part, on ``task='synthetic' synthetic.samples=60000`` (each node holds 60,000 / N
points). Per round, averaged over rounds 2-3 (round 1 builds the rosters and the caches):

- ``server s``: the round's wall time less the nodes' time (what the ServerApp, its strategy,
  its half of Flower's wire and the results writer cost: the messages' distinct objects
  deflated once a push, as Flower's grid uploads them, and the replies inflated);
- ``node s``: the nodes' half of each delivery, all nodes (they run one after another here):
  inflating the message, the ClientApp, deflating the reply (``LocalGrid.node_step``);
- ``up/down kB``: payload bytes of the round, all nodes, and ``down/node``;
- ``peak MiB``: the process's peak resident memory (server and in-process nodes together);
- ``ckpt kB``: ``checkpoint.pb`` plus the segments file after the last round;
- ``run s``: the whole run's wall time (all 3 rounds, the ServerApp's clock), and the final
  round's central test accuracy.

The growth exponent between the two largest sizes that finished is log(b / a) / log(N_b / N_a)
for server time, node time and bytes down (1: linear in N). A run that does not finish within
``--timeout`` seconds is reported as such.

    python -m benchmarks.scale                       # N = 10, 100, 300; several minutes
    python -m benchmarks.scale --sizes 10 100 300 1000 --families fedavg ffgb-trees

Writes ``results/scale.md`` and ``results/scale.json`` (``--name`` another name).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine_info, write_report

COMMON = {
    "task": "synthetic",
    "synthetic.samples": 60000,
    "num-server-rounds": 3,
    "fraction-train": 1.0,
    "tensorboard": False,
}
FAMILIES = {
    "fedavg": {"algorithm": "fedavg", "local-steps": 5},
    "ffgb-mlp": {"algorithm": "ffgb", "ffgb.oracle-steps": 50},
    "ffgb-trees": {"algorithm": "ffgb", "ffgb.learner": "tree"},  # shared downlink from N = 100
    "ffgb-trees-per-node": {
        "algorithm": "ffgb",
        "ffgb.learner": "tree",
        "ffgb.downlink": "per-node",
    },
    # FFGB's MLP learners at N = 1,000 (issue 21): 10 % of the nodes a round, no federated
    # evaluation (which would send every node the round's learners), with and without each
    # node distilling its K new learners into one (ffgb.distill='increment')
    "ffgb-mlp-sampled": {
        "algorithm": "ffgb",
        "ffgb.oracle-steps": 50,
        "fraction-train": 0.1,
        "ffgb.federated-eval": False,
    },
    "ffgb-mlp-bounded": {
        "algorithm": "ffgb",
        "ffgb.oracle-steps": 50,
        "fraction-train": 0.1,
        "ffgb.federated-eval": False,
        "ffgb.distill": "increment",
    },
    "fedfw": {"algorithm": "fedfw"},  # downlink auto: compact up to about N = 1,200
    "fedfw-dense": {"algorithm": "fedfw", "fedfw.downlink": "dense"},
    "fedfun": {
        "algorithm": "fedfun",
        "fedfun.initial-steps": 20,
        "fedfun.local-steps": 10,
        "fedfun.hidden": "16",
        "fedfun.penalty-samples": 50,
    },
}


def measure(family: str, nodes: int, folder: Path | None = None) -> dict[str, Any]:
    """Run one (family, N) here; its per-round figures (rounds 2-3). With ``folder``, the run's
    results folder (``folder``/scale) is written there and kept."""
    from client_app.app import app as client_app
    from server_app.app import run
    from testing.inprocess_grid import LocalGrid, Wire, run_config, server_context

    node_seconds: dict[int, float] = defaultdict(float)

    class TimedGrid(LocalGrid):
        def node_step(self, wire: Wire) -> Wire:
            start = time.perf_counter()
            try:
                return super().node_step(wire)
            finally:
                node_seconds[self.round] += time.perf_counter() - start

    with tempfile.TemporaryDirectory() if folder is None else nullcontext(str(folder)) as tmp:
        config = run_config(
            **{"output-dir": tmp, "run-name": "scale", **COMMON, **FAMILIES[family]}
        )
        run(TimedGrid(client_app, config, nodes, keep_messages=False), server_context(config))
        folder = Path(tmp) / "scale"
        rows = json.loads((folder / "metrics.json").read_text())["rounds"]
        checkpoint = sum(p.stat().st_size for p in folder.glob("checkpoint*"))
    walls = {r["round"]: r["wall_time_s"] for r in rows}
    later = [t for t in (2, 3) if t in walls and t - 1 in walls]
    per_round = {
        "server_s": [walls[t] - walls[t - 1] - node_seconds[t] for t in later],
        "node_s": [node_seconds[t] for t in later],
        "up_kB": [rows[t]["bytes_up"] / 1e3 for t in later],
        "down_kB": [rows[t]["bytes_down"] / 1e3 for t in later],
    }
    out = {k: sum(v) / len(v) for k, v in per_round.items()}
    out.update(
        family=family,
        nodes=nodes,
        down_per_node_kB=out["down_kB"] / nodes,
        peak_MiB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        checkpoint_kB=checkpoint / 1e3,
        failures=sum(r.get("failures", 0) for r in rows),
        run_s=rows[-1]["wall_time_s"],
        accuracy=rows[-1].get("test_accuracy"),
    )
    return out


def measure_in_child(family: str, nodes: int, timeout: float) -> dict[str, Any]:
    """``measure`` in a fresh Python process, or a "did not finish" row."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.scale", "--one", family, str(nodes)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"family": family, "nodes": nodes, "error": f"did not finish in {timeout:.0f} s"}
    if done.returncode != 0:
        return {
            "family": family,
            "nodes": nodes,
            "error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}",
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def growth(rows: list[dict[str, Any]], key: str) -> float | None:
    """The log-log slope of ``key`` between the two largest N that finished."""
    done = sorted((r for r in rows if "error" not in r and r[key] > 0), key=lambda r: r["nodes"])
    if len(done) < 2:
        return None
    a, b = done[-2], done[-1]
    return math.log(b[key] / a[key]) / math.log(b["nodes"] / a["nodes"])


def report(results: list[dict[str, Any]]) -> str:
    header = (
        "| family | N | server s | node s | up kB | down kB | down/node kB | peak MiB | "
        "ckpt kB | run s | test accuracy |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['family']} | {r['nodes']} | {r['error']} |||||||||")
            continue
        accuracy = r.get("accuracy")
        lines.append(
            f"| {r['family']} | {r['nodes']} | {r['server_s']:.2f} | {r['node_s']:.2f} "
            f"| {r['up_kB']:.0f} | {r['down_kB']:.0f} | {r['down_per_node_kB']:.1f} "
            f"| {r['peak_MiB']:.0f} | {r['checkpoint_kB']:.0f} "
            f"| {r.get('run_s', math.nan):.0f} "
            f"| {'-' if accuracy is None else f'{accuracy:.4f}'} |"
        )
    lines += [
        "",
        "| family | server time exponent | node time exponent | bytes down exponent |",
        "|---|---|---|---|",
    ]
    for family in dict.fromkeys(r["family"] for r in results):
        mine = [r for r in results if r["family"] == family]
        shown = [growth(mine, k) for k in ("server_s", "node_s", "down_kB")]
        lines.append(
            f"| {family} | " + " | ".join("-" if g is None else f"{g:.2f}" for g in shown) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 300])
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--timeout", type=float, default=360.0, help="seconds per (family, N)")
    parser.add_argument(
        "--name", default="scale", help="results/<name>.md and .json (default: scale)"
    )
    parser.add_argument("--one", nargs=2, metavar=("FAMILY", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]))))
        return 0
    start = time.perf_counter()
    results = []
    for family in args.families:
        for nodes in args.sizes:
            results.append(measure_in_child(family, nodes, args.timeout))
            print(json.dumps(results[-1]), flush=True)
            if "error" in results[-1]:
                break  # larger N would not finish either
    RESULTS.mkdir(exist_ok=True)
    command = "python -m benchmarks.scale " + " ".join(sys.argv[1:] if argv is None else argv)
    wall_s = time.perf_counter() - start
    document = {"command": command.strip(), "machine": machine_info(), "wall_s": wall_s}
    (RESULTS / f"{args.name}.json").write_text(
        json.dumps({**document, "results": results}, indent=1) + "\n"
    )
    title = f"Scale: {', '.join(args.families)} at N = {', '.join(map(str, args.sizes))}"
    body = report(results)
    write_report(
        RESULTS / f"{args.name}.md",
        title,
        wall_s,
        body,
        command=command.strip(),
        info=document["machine"],
    )
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
