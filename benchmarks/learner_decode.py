"""Decoding received MLP learners: a meta-device skeleton allocated, vs the weights given to it.

Every FFGB node decodes the learners it lacks each round (the default job: N K = 30 networks
64-32-32-10 a round). Torch's way to build a module without drawing its initial weights is a
skeleton on the meta device, then ``to_empty`` and a copy (``torch.nn.utils.skip_init``); that
is what the project did until this benchmark's commit. ``Network(spec, arrays)`` builds the
layers around copies of the received arrays instead (``functions.networks._given_linear``). Both
paths decode the same stacked arrays; the outputs must be equal bit for bit. One torch thread,
the paths alternating, best of ``--repeats``; ``unpack_delta`` is the whole decode of a round's
delta as a node runs it (checks included).

    python -m benchmarks.learner_decode            # a few seconds
    python -m benchmarks.learner_decode --quick
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from benchmarks.common import md_table, parser, results_dir, write_report
from functions.ensembles import Delta, pack_delta, unpack_delta
from functions.networks import Network, NetworkSpec, allocated, build, module_arrays

LEARNERS = 30  # the default job's N K


def through_meta_skeleton(spec: NetworkSpec, arrays: Sequence[np.ndarray]) -> Network:
    """The torch way (``skip_init``'s): a skeleton on the meta device, allocated, then filled."""
    with torch.device("meta"):
        skeleton = Network(spec)
    return allocated(skeleton, arrays)


def main() -> None:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--repeats", type=int, default=20)
    args = cli.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    repeats = 3 if args.quick else args.repeats
    spec = NetworkSpec((64, 32, 32, 10), "leaky_relu")
    torch.manual_seed(0)
    learners = [build(spec) for _ in range(LEARNERS)]
    shapes = spec.array_shapes()
    per_learner = [module_arrays(net, shapes) for net in learners]
    delta = Delta(0, 1.0, tuple(learners), (1.0,) * LEARNERS, 64, 10)
    config, arrays = pack_delta(delta)
    paths = {
        "meta skeleton, to_empty, copy (torch's skip_init)": lambda: [
            through_meta_skeleton(spec, a) for a in per_learner
        ],
        "weights given (Network(spec, arrays))": lambda: [Network(spec, a) for a in per_learner],
        "unpack_delta of the round's delta (the node's whole decode)": lambda: unpack_delta(
            config, arrays
        ),
    }
    x = torch.randn(256, 64)
    with torch.no_grad():
        expected = [net(x) for net in learners]
        for name, decode in list(paths.items())[:2]:
            got = decode()
            assert all(torch.equal(a(x), b) for a, b in zip(got, expected)), name
    seconds = dict.fromkeys(paths, float("inf"))
    for _ in range(repeats):
        for name, decode in paths.items():
            began = time.perf_counter()
            decode()
            seconds[name] = min(seconds[name], time.perf_counter() - began)
    reference = seconds[next(iter(paths))]
    rows = [
        [name, f"{1e3 * s:.1f}", f"{1e3 * s / LEARNERS:.3f}", f"{reference / s:.1f}x"]
        for name, s in seconds.items()
    ]
    table = md_table(
        ["decode of 30 networks 64-32-32-10", "ms", "ms / learner", "vs meta skeleton"], rows
    )
    body = f"""\
{LEARNERS} networks 64-32-32-10 (leaky ReLU), one round's learners of the default job; one torch
thread; best of {repeats}, the paths alternating. Outputs of both builds equal bit for bit
(checked before timing).

{table}
"""
    write_report(
        results_dir(args.quick) / "learner_decode.md",
        "Decoding received MLP learners",
        time.perf_counter() - start,
        body,
    )
    print(table)


if __name__ == "__main__":
    main()
