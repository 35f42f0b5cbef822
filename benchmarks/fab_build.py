"""What ``flwr run`` spends building the app's FAB: from the checkout, against from a copy of
its app files (``deploy.app_files``, what ``make run``, ``deploy.local`` and the tests submit).

Flower collects every file of the folder it is given before it applies .gitignore
(``flwr.cli.utils.collect_files``, flwr 1.41), the checkout's .venv included. Each figure is
the best of the repeats, in this process; the two FABs' sha256 must be equal.

    python -m benchmarks.fab_build            # about 30 s on 2 cores
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import warnings
from pathlib import Path

from benchmarks.common import md_table, parser, results_dir, write_report
from deploy.app_files import PROJECT, app_copy


def files_under(folder: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(folder))


def best_of(repeats: int, build) -> tuple[float, str]:
    """The shortest wall time of ``build()`` (returning FAB bytes) and the FAB's sha256."""
    times, digest = [], ""
    for _ in range(repeats):
        began = time.perf_counter()
        digest = hashlib.sha256(build()).hexdigest()
        times.append(time.perf_counter() - began)
    return min(times), digest


def main() -> None:
    from flwr.cli.build import build_fab_from_disk

    args = parser(__doc__.splitlines()[0]).parse_args()
    repeats = 1 if args.quick else 3
    warnings.filterwarnings("ignore", "GitWildMatchPattern")  # flwr 1.41's use of pathspec
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:

        def from_copy() -> bytes:
            copy = Path(tmp) / f"app-{time.monotonic_ns()}"
            return build_fab_from_disk(app_copy(copy))

        checkout_s, checkout_fab = best_of(repeats, lambda: build_fab_from_disk(PROJECT))
        copy_s, copy_fab = best_of(repeats, from_copy)
    if checkout_fab != copy_fab:
        raise SystemExit(
            f"the copy's FAB differs from the checkout's: {copy_fab} != {checkout_fab}"
        )
    rows = [
        ["the checkout (`flwr run .`)", files_under(PROJECT), f"{checkout_s:.2f}"],
        ["a copy of its app files, made and built", "", f"{copy_s:.2f}"],
    ]
    body = md_table(["FAB built from", "files under the folder", "best s"], rows)
    body += f"\n\nBoth FABs: sha256 {checkout_fab[:16]}...; best of {repeats}.\n"
    print(body, flush=True)
    out = results_dir(args.quick) / "fab_build.md"
    write_report(out, "FAB build: the checkout against a copy", time.perf_counter() - start, body)


if __name__ == "__main__":
    main()
