"""A long run under faults (``testing.soak``): the default job through the separate-machines
runbook's deployment on one machine (TLS, SuperNode authentication, the nginx perimeter, the
SuperLink's state in SQLite, a network namespace per process, one SuperNode's link slow and
lossy) while ``testing.soak.schedule`` crashes and restarts SuperNodes, kills the ServerApp once
and restarts the SuperLink once, the job resumed from its checkpoint after each of the last two.

Three runs of the same job and seed, one after another: the deployment undisturbed (its wall
time, and a check that its rows equal the in-process engine's), the soak, and the in-process
engine's run, the reference of ``testing.soak.check``.

    python -m benchmarks.soak                  # 100 rounds, 3 SuperNodes
    python -m benchmarks.soak --quick          # the e2e test's short version, results/quick/

Writes ``results/soak.md`` and ``results/soak.json``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import md_table, parser, results_dir, write_report
from testing.soak import (
    ACCURACY_TOLERANCE,
    LOSS_TOLERANCE,
    SHORT,
    SHORT_NODES,
    SHORT_ROUNDS,
    Soak,
    check,
    rows_equal,
    schedule,
    undisturbed,
)

JOB = ""  # the default job: FFGB, MLP learners, digits (pyproject's defaults)


def measure(rounds: int, nodes: int, quick: bool, work: Path) -> dict[str, Any]:
    """The undisturbed deployment (not with ``quick``), the soak and the in-process reference;
    each deployment's outcome and verdicts."""
    faults = SHORT if quick else schedule(rounds, nodes)
    out: dict[str, Any] = {}
    ways = {"soak": faults} if quick else {"undisturbed": [], "soak": faults}
    for name, planned in ways.items():
        started = time.monotonic()
        out[name] = Soak(work / name, JOB, rounds, planned, nodes=nodes).run()
        print(f"{name}: {out[name]['status']} in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    reference = undisturbed(JOB, rounds, nodes, work / "in-process")
    out["in-process"] = {"rows": reference, "wall_s": round(time.monotonic() - started, 1)}
    for name in ways:
        out[name]["verdicts"] = check(out[name], reference)
    if "undisturbed" in out:  # an undisturbed deployment gives the in-process rows exactly
        rows = out["undisturbed"]["rows"]
        out["undisturbed"]["verdicts"]["every_row_equal"] = len(rows) == len(reference) and all(
            rows_equal(a, b) for a, b in zip(rows, reference, strict=False)
        )
    return out


def faults_by_kind(outcome: dict[str, Any]) -> str:
    """``kind: rounds`` of each kind of fault injected."""
    kinds: dict[str, list[str]] = {}
    for fault in outcome["faults"]:
        kinds.setdefault(fault["kind"], []).append(str(fault["round"]))
    return "; ".join(f"{kind} after round {', '.join(r)}" for kind, r in kinds.items()) or "none"


def report(measured: dict[str, Any]) -> str:
    """The summary table, the faults one by one, the tolerance."""
    ways = [w for w in ("undisturbed", "soak") if w in measured]
    reference = measured["in-process"]["rows"][-1]

    def cells(way: str) -> list[str]:
        o, v = measured[way], measured[way]["verdicts"]
        return [
            way,
            str(o["rounds"]),
            faults_by_kind(o),
            f"{len(o['rows'])} of {o['rounds'] + 1} (rounds 0-{o['rounds']}, each once: "
            f"{'yes' if v['every_row_once'] else 'no'})",
            f"{'yes' if v['checkpoint_readable'] else 'no'} (round {o['checkpoint_round']})",
            f"{v['final_test_accuracy']:.4f} ({v['accuracy_difference']:+.4f})",
            f"{v['final_test_loss']:.4f} ({100 * v['loss_relative_difference']:+.2f} %)",
            str(v["failures"]),
            o["status"],
            f"{o['wall_s']:.0f}",
        ]

    summary = md_table(
        [
            "run",
            "rounds",
            "faults injected",
            "rows on disk",
            "checkpoint readable",
            "final test_accuracy (vs undisturbed)",
            "final test_loss (vs undisturbed)",
            "failed replies",
            "Flower status",
            "wall s",
        ],
        [cells(way) for way in ways],
    )
    soak = measured["soak"]
    faults = md_table(
        ["fault", "after round", "at s", "next row after s", "what happened"],
        [[f["kind"], f["round"], f["at_s"], f["recovered_s"], f["detail"]] for f in soak["faults"]],
    )
    verdicts = "\n".join(
        f"- {way}: " + ", ".join(f"{k} {v}" for k, v in measured[way]["verdicts"].items())
        for way in ways
    )
    return (
        f"Job: the default job (FFGB, digits, iid), {soak['nodes']} SuperNodes, "
        f"{soak['rounds']} rounds. Network: {soak['network']}.\n\n{summary}\n\n"
        f"Undisturbed (in-process engine, {measured['in-process']['wall_s']:.0f} s): "
        f"test_accuracy {reference['test_accuracy']:.4f}, test_loss "
        f"{reference['test_loss']:.4f}. Tolerance: final test_accuracy within "
        f"{ACCURACY_TOLERANCE} (absolute), final test_loss within {100 * LOSS_TOLERANCE:.0f} % "
        "(relative): a fault takes node-rounds away, so the soak is the same job, not the "
        "same computation (testing/soak.py).\n\nThe faults, in order:\n\n"
        f"{faults}\n\nVerdicts:\n\n{verdicts}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--nodes", type=int, default=3)
    args = p.parse_args(argv)
    rounds, nodes = (SHORT_ROUNDS, SHORT_NODES) if args.quick else (args.rounds, args.nodes)
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="flower-soak-"))
    try:
        measured = measure(rounds, nodes, args.quick, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(measured, indent=1))
    write_report(
        out / "soak.md", "A long run under faults", time.monotonic() - start, report(measured)
    )
    return 0 if measured["soak"]["verdicts"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
