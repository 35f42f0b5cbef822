"""What secure aggregation and encrypted relays cost: every family that offers
``secure-aggregation`` or ``relay-encryption``, with and without it, side by side in one process
(in-process engine, the nodes one after another), on the penguin sites and on a table of 300,000
rows over 3 sites.

Per run: the median seconds of a round after the first (the first also agrees the bins, sets up
the keys and evaluates round 0), the first round's seconds, the bytes up and down a round, and
the exchanges with the nodes a round; then the ratio of each secure figure to the plain one.
Both runs of a pair must end with the same figures (the booster; FedAvg's mean to float32
rounding; FedFW's and FedDR's x-bar, a running sum of the nodes' changes, to the secure
sum's fixed-point resolution; FFGB's and FedFun's relayed functions exactly): the table says so.
FFGB runs with federated evaluation in both runs of its pair (a sealed ensemble has no central
one).

The large table is ``benchmarks.boosting``'s ``synth300k-3``: scikit-learn's
``make_classification`` (300,000 rows, 20 features, 10 informative, 3 classes, seed 0), cut over
3 sites by a Dirichlet draw over the labels (alpha 0.5) with each site's features shifted
(``dirichlet-shift``); each site holds out a fifth of its rows, so about 240,000 rows train.

    python -m benchmarks.secure_cost            # about 2 min on 2 cores
    python -m benchmarks.secure_cost --quick    # the penguins only, 2 rounds

Writes ``results/secure_cost.md`` and ``results/secure_cost.json``.
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.boosting import write_raw
from benchmarks.common import md_table, parser, results_dir, write_report
from server_app.grid_wrapper import GridWrapper

SITES = {"task": "site", "tensorboard": False}
PENGUINS = {**SITES, "data.label": "species", "data.categorical": "sex"}
LARGE = {**SITES, "data.label": "y"}
HIST = {"algorithm": "fedxgb-hist", "fedxgb-hist.bins": "grid"}
TORCH = {"local-steps": 20, "batch-size": 64}  # a round's work is the same with and without
# the defaults: full-batch gradients (FedFW), 5 prox steps (FedDR); with secure aggregation the
# nodes send the dense change of x_i (x_hat_i) and get x-bar dense ('auto' downlink)
FEDFW = {"algorithm": "fedfw"}
FEDDR = {"algorithm": "feddr"}
FFGB = {"algorithm": "ffgb", "ffgb.learner": "tree", "central-evaluation": False}
FEDFUN = {"algorithm": "fedfun", "fedfun.learner": "tree"}
RELAY = "relay-encryption"


@dataclass(frozen=True)
class Case:
    """A family's run on a table: its run config and rounds."""

    name: str
    table: str  # penguins or large
    overrides: dict[str, Any] = field(default_factory=dict)
    rounds: int = 10
    # the pair's losses agree to 10**-digits relative: FedAvg's plain mean is summed in
    # float32; FedFW's and FedDR's x-bar is float64 in plain, a fine fixed point in secure
    digits: int = 5
    key: str = "secure-aggregation"  # the protection the pair is run without and with


CASES = (
    Case("fedxgb-hist", "penguins", HIST),
    Case("fedavg", "penguins", {"algorithm": "fedavg", **TORCH}),
    Case("fedprox", "penguins", {"algorithm": "fedprox", **TORCH}),
    Case("fedavg-proj", "penguins", {"algorithm": "fedavg-proj", **TORCH}),
    Case("fedfw", "penguins", FEDFW, digits=6),
    Case("feddr", "penguins", FEDDR, digits=6),
    Case("ffgb", "penguins", FFGB, key=RELAY),
    Case("fedfun", "penguins", FEDFUN, key=RELAY),
    Case("fedxgb-hist", "large", HIST, rounds=5),
    Case("fedavg", "large", {"algorithm": "fedavg", **TORCH}, rounds=5),
    Case("fedfw", "large", FEDFW, rounds=5, digits=6),
    Case("feddr", "large", FEDDR, rounds=5, digits=6),
    Case("ffgb", "large", FFGB, rounds=3, key=RELAY),
)


class CountingGrid(GridWrapper):
    """Counts the exchanges the ServerApp makes, by message type."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.exchanges: Counter[str] = Counter()

    def push_messages(self, messages: Iterable) -> Iterable[str]:
        messages = list(messages)
        self.exchanges.update({m.metadata.message_type for m in messages})
        return self._inner.push_messages(messages)

    def send_and_receive(self, messages: Iterable, *, timeout: float | None = None):
        return list(self.pull_messages(list(self.push_messages(messages))))


def run(case: Case, secure: bool, paths: dict[str, str], out: Path) -> dict[str, Any]:
    """One run on the in-process engine: its rows, wall time and exchanges by type."""
    from client_app.app import app as client_app
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    name = f"{case.name}-{case.table}-{'secure' if secure else 'plain'}"
    table = PENGUINS if case.table == "penguins" else LARGE
    config = run_config(
        **{
            **table,
            **case.overrides,
            "dataset-path": paths[case.table],
            "num-server-rounds": case.rounds,
            "output-dir": str(out),
            "run-name": name,
            case.key: secure,
        }
    )
    grid = CountingGrid(LocalGrid(client_app, config, 3, keep_messages=False))
    start = time.perf_counter()
    server_main(grid, server_context(config))
    wall = time.perf_counter() - start
    rows = json.loads((out / name / "metrics.json").read_text())["rounds"]
    model = out / name / "model.json"
    return {
        "name": name,
        "rows": rows,
        "wall_s": wall,
        "exchanges": dict(grid.exchanges),
        "model": model.read_text() if model.exists() else None,
    }


def figures(result: dict[str, Any], rounds: int) -> dict[str, float]:
    """Seconds a round (median after the first; the first), bytes a round, exchanges a round."""
    rows = result["rows"]
    times = [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(rows, rows[1:])]
    trained = [r for r in rows if r["round"] >= 1]
    return {
        "s_per_round": statistics.median(times[1:]) if len(times) > 1 else times[0],
        "first_round_s": times[0],
        "bytes_up_per_round": statistics.fmean(r["bytes_up"] for r in trained),
        "bytes_down_per_round": statistics.fmean(r["bytes_down"] for r in trained),
        "exchanges_per_round": sum(result["exchanges"].values()) / rounds,
        "final": rows[-1].get("test_accuracy", float("nan")),
        "final_loss": rows[-1].get("test_loss", float("nan")),
    }


def same_answer(plain: dict[str, Any], secure: dict[str, Any], digits: int) -> str:
    """Whether the pair ends alike: the same booster, or the same test accuracy every round
    and train and test losses within 10**-digits relative (``Case.digits``)."""
    if plain["model"] is not None:
        return "same booster" if plain["model"] == secure["model"] else "different booster"
    pairs = list(zip(plain["rows"][1:], secure["rows"][1:]))
    accuracy = all(
        p.get(key) == s.get(key)
        for p, s in pairs
        for key in ("test_accuracy", "test_accuracy_mean")
    )
    loss = all(
        abs(p[key] - s[key]) <= 10**-digits * abs(p[key])
        for p, s in pairs
        for key in ("train_loss", "test_loss")
        if key in p
    )
    return f"same accuracy, losses to 1e-{digits}" if accuracy and loss else "differs"


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)
    start = time.monotonic()
    from tasks.sites import write_sites

    if args.quick:
        cases = [replace(c, rounds=2) for c in CASES if c.table == "penguins"]
    else:
        cases = CASES
    records = []
    with tempfile.TemporaryDirectory(prefix="secure-cost-") as tmp:
        work = Path(tmp)
        write_sites("penguins", work / "penguins")
        paths = {"penguins": str(work / "penguins" / "{partition-id}.csv")}
        if any(c.table == "large" for c in cases):
            write_raw("synth300k-3", work / "large", seed=0)
            paths["large"] = str(work / "large" / "{partition-id}.csv")
        # torch's first steps in a process take a second: spent before anything is timed
        run(Case("warm-up", "penguins", {"algorithm": "fedavg", **TORCH}, 1), False, paths, work)
        for case in cases:
            pair = {s: run(case, s, paths, work / "runs") for s in (False, True)}
            plain, secure = (figures(pair[s], case.rounds) for s in (False, True))
            record = {
                "family": case.name,
                "protection": case.key,
                "table": case.table,
                "rounds": case.rounds,
                "plain": plain,
                "secure": secure,
                "answer": same_answer(pair[False], pair[True], case.digits),
            }
            records.append(record)
            print(json.dumps(record), flush=True)
    out = results_dir(args.quick)
    out.mkdir(parents=True, exist_ok=True)
    (out / "secure_cost.json").write_text(json.dumps(records, indent=1) + "\n")
    rows = []
    for r in records:
        plain, secure = r["plain"], r["secure"]
        rows.append(
            [
                r["family"],
                r["protection"],
                r["table"],
                f"{plain['s_per_round']:.3f}",
                f"{secure['s_per_round']:.3f}",
                f"{secure['s_per_round'] / plain['s_per_round']:.2f}x",
                f"{plain['first_round_s']:.2f} / {secure['first_round_s']:.2f}",
                f"{(plain['bytes_up_per_round'] + plain['bytes_down_per_round']) / 1e3:.1f}",
                f"{(secure['bytes_up_per_round'] + secure['bytes_down_per_round']) / 1e3:.1f}",
                f"{plain['exchanges_per_round']:.1f} / {secure['exchanges_per_round']:.1f}",
                r["answer"],
            ]
        )
    headers = [
        "family",
        "protection",
        "table",
        "s/round plain",
        "s/round protected",
        "ratio",
        "round 1 s (plain / protected)",
        "kB/round plain",
        "kB/round protected",
        "exchanges/round (plain / protected)",
        "same answer",
    ]
    write_report(
        out / "secure_cost.md",
        "What secure aggregation and encrypted relays cost: the same runs with and without",
        time.monotonic() - start,
        md_table(headers, rows)
        + "\n\nSeconds a round: the median of rounds 2 on (round 1 apart). Bytes: payload up "
        "and down a round, all nodes together (`bytes_up` + `bytes_down`). Exchanges: messages "
        "sent to all nodes at once, train and evaluate included, over the rounds.",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
