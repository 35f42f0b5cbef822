"""Wire size of FedFW per constraint, and the speed of the nuclear-ball LMO.

Part 1 runs FedFW for a few rounds (10 clients) and reports, per client and round, the training
payload uploaded (the encoded extreme point) and downloaded (x-bar), next to the dense float32
model, twice: as the project meters it (array bytes put into the records), and as Flower
serialises the message content (RecordDict protobuf, with keys, dtype/shape fields and the .npy
header of every array).
Part 2 times the nuclear LMO of oracles/lmo.py (top singular pair; ARPACK ``svds`` above
32 rows/columns) against the same LMO from numpy's full SVD, on one BLAS thread.

    python -m benchmarks.fedfw_wire            # full (about 2 min)
    python -m benchmarks.fedfw_wire --quick
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported: one BLAS thread, like the apps

import time  # noqa: E402  (after the thread settings above)
from statistics import median  # noqa: E402

from benchmarks.common import Job, md_table, parser, results_dir, run_jobs, runs_dir, write_report  # noqa: E402

RUNS = [("mclr", t, c) for t in ("synthetic", "mnist-5k") for c in ("l1", "l2", "box", "nuclear")]
RUNS += [("dnn", t, c) for t in ("synthetic", "mnist-5k") for c in ("l1", "nuclear")]
LMO_SHAPES = [
    (10, 60),
    (10, 784),
    (33, 100),
    (60, 100),
    (64, 300),
    (100, 100),
    (100, 784),
    (256, 1024),
    (512, 2048),
    (1000, 1000),
]


def num_params(model: str, task: str) -> tuple[int, list[tuple[int, ...]]]:
    from tasks.datasets import load_task
    from tasks.models import build_model

    data = load_task(task)
    net = build_model(model, data.input_shape, data.num_outputs)
    shapes = [tuple(p.shape) for p in net.parameters()]
    return sum(p.numel() for p in net.parameters()), shapes


def wire_table(rounds: int, runs: list, quick: bool, workers: int, reuse: bool) -> str:
    jobs = [
        Job(
            f"{m}-{t}-{c}",
            10,
            {
                "algorithm": "fedfw",
                "model": m,
                "task": t,
                "fedfw.constraint": c,
                "fedfw.radius": 10.0,
                "num-server-rounds": rounds,
                "fedfw.gap": False,
                "fedfw.downlink": "dense",  # the dense x-bar column
                "fedfw.federated-eval": False,
                "seed": 0,
            },
            wire=True,
        )
        for m, t, c in runs
    ]
    results = run_jobs(jobs, runs_dir(quick, "wire"), workers, reuse)
    table = []
    for (m, t, c), job in zip(runs, jobs):
        r = results[job.name]
        params, shapes = num_params(m, t)
        dense = 4 * params
        last = r["rows"][-1]
        up = last["bytes_up_train"] / last["participants"]
        down = last["bytes_down_train"] / last["participants"]
        train = [w for w in r["wire"] if w["type"] == "train"]
        later = train[len(train) // rounds :] or train  # rounds >= 2 (round 1 is the first sync)
        up_pb = median(w["up_content"] for w in later)
        down_pb = median(w["down_content"] for w in later)
        table.append(
            [
                m,
                t,
                c,
                " ".join("x".join(map(str, s)) for s in shapes),
                f"{dense:,}",
                f"{up:,.0f}",
                f"{dense / up:,.1f}x",
                f"{up_pb:,.0f}",
                f"{dense / up_pb:,.1f}x",
                f"{down:,.0f}",
                f"{down_pb:,.0f}",
                str(last.get("failures", 0)),
            ]
        )
    return md_table(
        [
            "model",
            "task",
            "D",
            "tensors",
            "dense fp32 B",
            "up payload B",
            "dense/payload",
            "up protobuf B",
            "dense/protobuf",
            "down payload B",
            "down protobuf B",
            "failures",
        ],
        table,
    )


def _time(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def lmo_table(shapes: list, repeats: int) -> str:
    import numpy as np
    from scipy.sparse.linalg import svds

    from oracles.lmo import make_constraint

    nuclear = make_constraint("nuclear", 10.0)

    def full_svd_lmo(g):
        u, _, vt = np.linalg.svd(g, full_matrices=False)
        return -10.0 * np.outer(u[:, 0], vt[0])

    def svds_lmo(g):
        v0 = np.random.default_rng(0).standard_normal(min(g.shape))
        u, _, vt = svds(g, k=1, v0=v0, tol=0)
        return -10.0 * np.outer(u[:, 0], vt[0])

    rows = []
    for shape in shapes:
        g = np.random.default_rng(1).standard_normal(shape)
        t_full = _time(lambda g=g: full_svd_lmo(g), repeats)
        t_svds = _time(lambda g=g: svds_lmo(g), repeats)
        t_lmo = _time(lambda g=g: nuclear.lmo(g), repeats)
        s_ref, s_lmo = full_svd_lmo(g), nuclear.lmo(g)
        # the pair is unique up to a joint sign flip, which leaves u v^T unchanged
        err = float(np.abs(s_ref - s_lmo).max())
        path = "full SVD" if min(shape) <= 32 or np.prod(shape) <= 30_000 else "svds"
        rows.append(
            [
                "x".join(map(str, shape)),
                f"{1e3 * t_full:.3f}",
                f"{1e3 * t_svds:.3f}",
                f"{t_full / t_svds:.1f}x",
                f"{1e3 * t_lmo:.3f} ({path})",
                f"{t_full / t_lmo:.1f}x",
                f"{err:.1e}",
            ]
        )
    return md_table(
        [
            "matrix",
            "numpy full SVD ms",
            "svds k=1 ms",
            "full/svds",
            "oracles.lmo nuclear ms (path)",
            "full/lmo",
            "max abs diff vs full SVD",
        ],
        rows,
    )


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    start = time.perf_counter()
    rounds = 2 if args.quick else 3
    runs = RUNS[:4] if args.quick else RUNS
    wire_md = wire_table(rounds, runs, args.quick, args.workers, args.reuse)
    lmo_md = lmo_table(LMO_SHAPES[:4] if args.quick else LMO_SHAPES, 3 if args.quick else 15)
    wall = time.perf_counter() - start
    body = f"""\
## Bytes per client per round (FedFW, 10 clients, round {rounds}, radius 10, per-tensor)

- *payload*: what the project meters (`bytes_up_train / participants`, array bytes put into the
  records, config values included, keys and framing not).
- *protobuf*: Flower's serialised message content (`recorddict_to_proto(content).ByteSize()`),
  median over the training messages of rounds >= 2: keys, dtype and shape fields, and the 128-byte
  `.npy` header Flower stores with every array, i.e. what actually crosses the network (plus the
  message metadata, about 100-150 B).
- dense fp32 B = 4 x number of parameters (the raw dense model, no framing); ratios are
  dense / upload.

{wire_md}

## Nuclear-ball LMO: top singular pair (svds) vs numpy full SVD

Gaussian matrices (a hard case for ARPACK: small gap between the top singular values), one BLAS
thread, median of {3 if args.quick else 15} calls after a warm-up. `oracles.lmo` uses a full SVD
when min(shape) <= 32 or the matrix has at most 30,000 entries, and `svds` otherwise.

{lmo_md}
"""
    write_report(
        results_dir(args.quick) / "fedfw_wire.md", "FedFW wire size and LMO cost", wall, body
    )


if __name__ == "__main__":
    main()
