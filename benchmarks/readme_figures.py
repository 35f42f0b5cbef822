"""The runs the README quotes, run as it writes them, with their figures kept in
benchmarks/results/readme.json (command, machine and commit beside them).

Each job is the README's command on the in-process engine (the real ServerApp and ClientApp on
``testing.inprocess_grid.LocalGrid``), which gives Flower's simulation engine's numbers to the
bit (benchmarks/README.md, case `scale_engines`); the wall times are the rounds' own
(``wall_time_s`` of the last row), not a command's start-up. The README marks every figure it
takes from here with ``<!-- figure: readme <path> -->`` (so do pages of docs/) and
``tests/code_and_docs/test_quoted_figures.py`` fails when one no longer matches.

    python -m benchmarks.readme_figures            # about 5 min on 2 cores
    python -m benchmarks.readme_figures --only penguins
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, command_line, machine_info

OUT = RESULTS / "readme.json"
# name -> (nodes, run config), as the README's commands give them
JOBS: dict[str, tuple[int, dict[str, Any]]] = {
    "default": (10, {}),
    "fedavg": (10, {"algorithm": "fedavg"}),
    "ffgb-c": (10, {"algorithm": "ffgb-c"}),
    "ffgb-l": (10, {"algorithm": "ffgb-l", "task": "lipschitz", "ffgb.one-shot": True}),
    "fedfw": (10, {"algorithm": "fedfw", "task": "synthetic", "fedfw.constraint": "l1"}),
    "fedfun": (2, {"algorithm": "fedfun", "task": "wine", "partitioning": "kmeans"}),
    "fedfw-sto": (10, {"algorithm": "fedfw-sto", "task": "synthetic", "num-server-rounds": 5}),
    "penguins": (
        3,
        {
            "task": "site",
            "data.label": "species",
            "data.categorical": "sex",
            "dataset-path": "{sites}/penguins/{{partition-id}}.csv",
            "ffgb.learner": "tree",
            "num-server-rounds": 5,
        },
    ),
    # docs/algorithms.md's FedFun table: trees on wine, and one class per node on digits
    "fedfun-kddt": (
        2,
        {"algorithm": "fedfun", "task": "wine", "partitioning": "kmeans", "fedfun.learner": "tree"},
    ),
    "fedfun-by-class": (10, {"algorithm": "fedfun", "task": "digits", "partitioning": "by-class"}),
    # docs/algorithms.md's XGBoost baselines: the growing booster, and fedxgb.scaled-eta
    **{
        f"{algorithm}-{where}": (
            nodes,
            {"algorithm": f"fedxgb-{algorithm}", **config, "num-server-rounds": 10},
        )
        for algorithm in ("bagging", "cyclic")
        for where, nodes, config in (
            (
                "penguins",
                3,
                {
                    "task": "site",
                    "data.label": "species",
                    "data.categorical": "sex",
                    "dataset-path": "{sites}/penguins/{{partition-id}}.csv",
                },
            ),
            ("breast-cancer", 5, {"task": "breast-cancer", "partitioning": "dirichlet"}),
        )
    },
    "bagging-unscaled": (
        10,
        {
            "algorithm": "fedxgb-bagging",
            "task": "synthetic",
            "fedxgb.scaled-eta": False,
            "num-server-rounds": 10,
        },
    ),
    "bagging-scaled": (
        10,
        {"algorithm": "fedxgb-bagging", "task": "synthetic", "num-server-rounds": 10},
    ),
    # docs/results.md's failed run: FedAvg's old default step on a regression task diverges
    "fedavg-diverges": (
        10,
        {"algorithm": "fedavg", "task": "diabetes", "learning-rate": 0.3, "num-server-rounds": 4},
    ),
    "digits-images": (
        3,
        {
            "task": "site",
            "data.label": "y",
            "dataset-path": "{sites}/digits/{{partition-id}}",
            "num-server-rounds": 10,
        },
    ),
}


def figures(folder: Path) -> dict[str, Any]:
    """What the README and docs may quote of a finished run: its rows (``first``: round 0, with
    sites' own data the schema agreement's traffic; ``last``), its summary and outcome."""
    metrics = json.loads((folder / "metrics.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    last = metrics["rounds"][-1]
    return {
        "first": metrics["rounds"][0],
        "last": last,
        "rows": metrics["rounds"],
        "summary": metrics["summary"],
        "outcome": config["outcome"],
        "rounds_s": last["wall_time_s"],
        "mb_moved": (metrics["summary"]["bytes_up_total"] + metrics["summary"]["bytes_down_total"])
        / 1e6,
    }


def run(name: str, sites: Path, out: Path) -> dict[str, Any]:
    """One README job in this process; its figures."""
    from client_app.app import app as client_app
    from server_app.app import RunDiverged
    from server_app.app import main as server_main
    from testing.inprocess_grid import LocalGrid, run_config, server_context

    nodes, overrides = JOBS[name]
    config = {k: v.format(sites=sites) if isinstance(v, str) else v for k, v in overrides.items()}
    full = run_config(**config, **{"output-dir": str(out), "run-name": name})
    start = time.perf_counter()
    try:
        server_main(LocalGrid(client_app, full, nodes, keep_messages=False), server_context(full))
    except RunDiverged:
        pass  # its outcome is in its config.json, which is what is quoted
    return {
        "nodes": nodes,
        "run_config": config,
        "wall_s": time.perf_counter() - start,
        **figures(out / name),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="also keep the runs' results folders here (for compare.png)",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    from tasks.sites import write_image_sites, write_sites

    old = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    info = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        sites = Path(tmp) / "sites"
        write_sites("penguins", sites / "penguins")
        write_image_sites(sites / "digits")
        for name in args.only:
            old["runs"][name] = {
                **run(name, sites, Path(tmp) / "runs"),
                "commit": info["commit"],
                "date": info["date"],
            }
            print(f"{name}: {old['runs'][name]['outcome']['line']}", flush=True)
            if args.keep is not None:
                shutil.copytree(Path(tmp) / "runs" / name, args.keep / name, dirs_exist_ok=True)
    old.update(command=command_line(), machine=info)
    args.out.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
