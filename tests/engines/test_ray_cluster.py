"""``flwr run`` on Flower's simulation engine across a Ray cluster of two Ray nodes (each with
its own CPU, on this machine: ``testing.ray_cluster``), every family: the rows equal those of
the in-process engine, which equal a single-machine simulation's
(``tests/engines/test_simulation_engine.py``)."""

from __future__ import annotations

import json

import pytest

from benchmarks.latency import FAMILIES
from deploy.app_files import app_copy
from run_config.declared import parse_overrides
from server_app.results import CLOCKS
from testing.ray_cluster import actor_nodes, ray_cluster
from testing.simulation_link import flwr_run, simulation_superlink
from tests.helpers import run_app

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time

NODES = 3
JOBS = FAMILIES  # one short job per family, benchmarks.latency's; 2 rounds here


@pytest.fixture(scope="module")
def cluster_link(tmp_path_factory):
    """A simulation SuperLink whose runs join a Ray cluster of two Ray nodes of one CPU."""
    folder = tmp_path_factory.mktemp("cluster")
    with ray_cluster((1, 1)) as address:
        with simulation_superlink(folder / "flwr-home", folder / "link.log", address) as link:
            yield address, link


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    return app_copy(tmp_path_factory.mktemp("app") / "app")


def _computed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in CLOCKS} for r in rows]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_family_on_a_ray_cluster_gives_the_in_process_rows(cluster_link, app, tmp_path, name):
    address, (env, connection) = cluster_link
    out = tmp_path / "results"
    config = f"{JOBS[name]} num-server-rounds=2 output-dir='{out}' run-name='cluster'"
    done = flwr_run(env, connection, NODES, config, timeout=500, app=app)
    assert done.returncode == 0 and (out / "cluster" / "metrics.json").exists(), (
        done.stdout + done.stderr
    )[-3000:]
    rows = json.loads((out / "cluster" / "metrics.json").read_text())["rounds"]
    local = run_app(
        tmp_path / "local", NODES, **parse_overrides(f"{JOBS[name]} num-server-rounds=2")
    )
    assert _computed(rows) == _computed(local.rows)
    assert len(actor_nodes(address)) == 2  # the ClientApps ran on both Ray nodes
