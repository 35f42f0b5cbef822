"""Sites' own files through Flower's deployment engine, on loopback: a SuperLink with TLS and
SuperNode authentication and three SuperNodes, each given only its own CSV (node config
``dataset-path``; one with its columns in another order, one with extra missing values), run
FFGB with trees, FedFW, and fedxgb-hist, FedAvg and FedFW+ with secure aggregation for two rounds
through ``flwr run``; the per-site metrics are in the results and equal, round by round, those
of the in-process engine on the same files and seed.

Every process is started and stopped by PID (``deploy.deployment.Deployment``); the files and work
directories are pytest's temporary ones.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from deploy.app_files import app_copy
from deploy.deployment import Deployment
from deploy.ports import free_port_block
from run_config.declared import parse_overrides
from tasks.sites import write_sites
from tests.helpers import run_app

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time

NODES = 3
SITE = (
    "task='site' data.label='species' data.categorical='sex' num-server-rounds=2 "
    "min-nodes=3 reply-timeout=300"
)
JOBS = {
    "ffgb-trees": "algorithm='ffgb' ffgb.learner='tree'",
    "fedfw": "algorithm='fedfw'",
    # secure sums: each node's secrets kept in its SuperNode between the stages
    "fedxgb-hist-secure": "algorithm='fedxgb-hist' fedxgb-hist.bins='grid' "
    "fedxgb-hist.max-depth=3 secure-aggregation=true",
    "fedavg-secure": "algorithm='fedavg' secure-aggregation=true",
    "fedfw-secure": "algorithm='fedfw-plus' secure-aggregation=true",
    # the group key made by one SuperNode, wrapped to the others; learners sealed under it
    "ffgb-sealed": "algorithm='ffgb' ffgb.learner='tree' central-evaluation=false "
    "relay-encryption=true",
}


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """The penguin islands, one file each: 1.csv with its columns reversed, 2.csv with a
    quarter of its bill lengths missing."""
    folder = tmp_path_factory.mktemp("sites")
    write_sites("penguins", folder)
    one = pd.read_csv(folder / "1.csv")
    one[list(reversed(one.columns))].to_csv(folder / "1.csv", index=False)
    two = pd.read_csv(folder / "2.csv")
    holes = np.random.default_rng(0).choice(len(two), len(two) // 4, replace=False)
    two.loc[holes, "bill_length_mm"] = np.nan
    two.to_csv(folder / "2.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, sites):
    app = app_copy(tmp_path_factory.mktemp("app") / "app")
    d = Deployment(
        tmp_path_factory.mktemp("deploy"),
        tls=True,
        auth=True,
        base_port=free_port_block(low=30000, high=32700),
        warm=True,
    )
    try:
        d.start_superlink()
        for i in range(NODES):
            d.start_supernode(i, NODES, node_config=f"dataset-path='{sites / f'{i}.csv'}'")
        results = d.workdir / "results"
        run_ids = d.submit_all(
            [f"{JOBS[name]} {SITE} output-dir='{results}' run-name='{name}'" for name in JOBS], app
        )
        yield d.wait_for_runs(run_ids, timeout=900), results
    finally:
        d.stop()


def test_each_site_trains_on_its_own_file_as_the_simulation_does(deployed, sites, tmp_path):
    statuses, results = deployed
    assert set(statuses.values()) == {"finished:completed"}, statuses
    for name, job in JOBS.items():
        config = json.loads((results / name / "config.json").read_text())["sites"]
        assert config["partitions"] == [0, 1, 2] and config["left-out"] == {}
        rows = json.loads((results / name / "metrics.json").read_text())["rounds"]
        assert [r["round"] for r in rows] == [0, 1, 2]
        assert all(0 <= rows[-1][f"site{p}_test_accuracy"] <= 1 for p in range(NODES))
        local = run_app(
            tmp_path / name,
            NODES,
            [{"dataset-path": str(sites / f"{i}.csv")} for i in range(NODES)],
            **parse_overrides(f"{job} {SITE}"),
        ).rows
        keys = sorted(k for k in rows[-1] if "accuracy" in k or "loss" in k)
        assert [{k: r.get(k) for k in keys} for r in rows] == [
            {k: r.get(k) for k in keys} for r in local
        ], name
