"""Server time to build one FFGB round's downlink: each learner packed once vs once per recipient.

After a boosting round with N nodes of K learners each, every node is sent the other nodes'
(N - 1) K learners (``strategies.ensemble_sync.EnsembleSync.records_for``). Packed per recipient
(what the server did before ``functions.ensembles.PackCache``), the round packs N (N - 1) K
learners; with the cache, N K. The records are identical either way
(tests/ffgb/test_ensemble_sync.py). Learners: MLPs 64-32-32-10 with leaky ReLU (FFGB's default on
digits) and depth-3 regression trees with float32 leaves, K = 5; best of 3 repetitions, one torch
thread, interleaved.

    python -m benchmarks.ffgb_downlink            # N = 10, 100, 300; about 2 min on 2 cores

Writes ``results/ffgb_downlink.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import ConfigRecord

from benchmarks.common import write_report
from functions.ensembles import Delta, Ensemble, pack_delta
from functions.networks import NetworkSpec
from functions.params import arrays_to_record
from functions.trees import from_sklearn
from oracles.weak_learning import new_network
from strategies.ensemble_sync import EnsembleSync, SyncSlot

K, FEATURES, OUTPUTS, REPEATS = 5, 64, 10, 3
SIZES = (10, 100, 300)
OUT = Path(__file__).parent / "results" / "ffgb_downlink.md"


def learners(kind: str, count: int) -> list:
    if kind == "mlp":
        spec = NetworkSpec((FEATURES, 32, 32, OUTPUTS), "leaky_relu")
        return [new_network(spec, seed) for seed in range(count)]
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, FEATURES))
    return [
        from_sklearn(
            DecisionTreeRegressor(max_depth=3, random_state=i).fit(
                x, rng.normal(size=(300, OUTPUTS))
            ),
            value_dtype=np.float32,
        )
        for i in range(count)
    ]


def one_round(kind: str, n: int) -> tuple[EnsembleSync, list[SyncSlot]]:
    """A sync after one round of n nodes, each slot holding version 0 and its own learners."""
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), FEATURES))
    slots = [SyncSlot(needs_sync=False, version=0) for _ in range(n)]
    made = learners(kind, n * K)
    sync.average(
        [
            (slot, Delta(0, 1.0, tuple(made[i * K : (i + 1) * K]), (0.1,) * K, FEATURES, OUTPUTS))
            for i, slot in enumerate(slots)
        ]
    )
    return sync, slots


def build(sync: EnsembleSync, slots: list[SyncSlot], cached: bool) -> float:
    """Seconds to build every node's delta records."""
    saved = [(s.version, s.own_version, s.own_first, s.own_count, s.own_fraction) for s in slots]
    if cached:
        sync.packs.keep(())  # every learner packed afresh, once
    start = time.perf_counter()
    for slot in slots:
        if cached:
            sync.records_for(slot)
        else:
            config, arrays = pack_delta(sync.delta_for(slot))
            ConfigRecord(config), arrays_to_record(arrays)
    elapsed = time.perf_counter() - start
    for slot, (v, ov, of, oc, fr) in zip(slots, saved):
        slot.version, slot.own_version, slot.own_first, slot.own_count = v, ov, of, oc
        slot.own_fraction = fr
    return elapsed


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help
    start = time.perf_counter()
    torch.set_num_threads(1)
    rows = [
        "| learners | N | per recipient (s) | packed once (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for kind in ("mlp", "tree"):
        for n in SIZES:
            sync, slots = one_round(kind, n)
            times = {True: [], False: []}
            for _ in range(REPEATS):
                for cached in (False, True):
                    times[cached].append(build(sync, slots, cached))
            old, new = min(times[False]), min(times[True])
            rows.append(f"| {kind} | {n} | {old:.3f} | {new:.3f} | {old / new:.1f} |")
            print(rows[-1], flush=True)
    title = "FFGB downlink build time (one round, K = 5)"
    write_report(OUT, title, time.perf_counter() - start, "\n".join(rows))


if __name__ == "__main__":
    main()
