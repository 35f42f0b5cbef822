"""Flower's deployment engine for real, on loopback: a SuperLink with TLS and SuperNode
authentication, three registered SuperNodes and one that is not (refused), every landed family
run for two rounds through ``flwr run``, and a run that loses a SuperNode mid-way and completes.

Every process is started and stopped by PID (``deploy.local.Deployment``); ports are loopback
only; the work directory is pytest's temporary one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from deploy.local import Deployment, free_port_block
from run_config.declared import parse_overrides
from tests.helpers import run_app

NODES = 3
# no federated evaluation: a SuperNode starts one ClientApp process per message (about 3 s
# each on 2 cores), so every message saved is time saved
COMMON = ("num-server-rounds=2 min-nodes=3 reply-timeout=300 fedfw.federated-eval=false "
          "feddr.federated-eval=false ffgb.federated-eval=false fedfun.federated-eval=false")
FAMILIES = {
    "fedavg": "algorithm='fedavg' task='digits' local-steps=5",
    "fedfw": "algorithm='fedfw' task='synthetic'",
    "feddr": "algorithm='feddr' task='synthetic'",
    "ffgb": "algorithm='ffgb' task='digits' ffgb.local-steps=1 ffgb.oracle-steps=20 "
            "ffgb.hidden=8",
    "fedfun": "algorithm='fedfun' task='wine' fedfun.initial-steps=50 fedfun.local-steps=20 "
              "fedfun.hidden='8' fedfun.penalty-samples=50",
}


def rows(results: Path, name: str) -> list[dict]:
    path = results / name / "metrics.json"
    return json.loads(path.read_text())["rounds"] if path.exists() else []


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    d = Deployment(tmp_path_factory.mktemp("deploy"), tls=True, auth=True,
                   base_port=free_port_block())
    try:
        d.start_superlink()
        for i in range(NODES):
            d.start_supernode(i, NODES)
        intruder = d.start_supernode(0, NODES, registered=False, name="intruder", slot=NODES)
        intruder.wait(120)
        yield d
    finally:
        d.stop()


def test_an_unregistered_supernode_is_refused(deployment):
    assert deployment.processes["intruder"].returncode != 0
    log = (deployment.workdir / "intruder.log").read_text()
    assert "Exit Code: 305" in log and "Failed to activate SuperNode" in log
    assert not any(n.startswith("supernode-") for n in deployment.exited())


def test_every_family_runs_two_rounds_over_tls(deployment):
    results = deployment.workdir / "results"
    run_ids = {name: deployment.submit(f"{config} {COMMON} output-dir='{results}' "
                                       f"run-name='{name}'")
               for name, config in FAMILIES.items()}
    statuses = deployment.wait_for_runs(list(run_ids.values()), timeout=900)
    assert set(statuses.values()) == {"finished:completed"}, statuses
    for name in FAMILIES:
        done = rows(results, name)
        assert [r["round"] for r in done] == [0, 1, 2], name
        assert all(r["failures"] == 0 for r in done[1:]), (name, done)
        assert done[-1]["bytes_up"] > 0 and done[-1]["bytes_down"] > 0


def test_the_deployment_gives_the_in_process_engine_s_numbers(deployment, tmp_path):
    """Determinism across engines: the same config and seed, the same metrics (the nodes are
    ordered by partition id, every draw is seeded, and the payloads cross Flower's serialisation
    on both engines). Seen bit-identical for every family, except once FedFun's local_loss in
    its last bit (float64 sums of float32 network outputs): hence rel=1e-12."""
    keys = ("test_accuracy", "test_loss", "train_loss", "local_loss", "failures", "participants")
    for name, config in FAMILIES.items():
        overrides = parse_overrides(f"{config} {COMMON}")
        local = run_app(tmp_path / name, NODES, **overrides).rows
        deployed = rows(deployment.workdir / "results", name)
        assert len(local) == len(deployed) == 3
        for a, b in zip(deployed, local):
            assert [k for k in keys if k in a] == [k for k in keys if k in b], name
            assert {k: a[k] for k in keys if k in a} == pytest.approx(
                {k: b[k] for k in keys if k in b}, rel=1e-12, abs=0.0), name


def test_a_run_that_loses_a_supernode_completes_and_counts_it(deployment):
    results = deployment.workdir / "results"
    run_id = deployment.submit(
        f"algorithm='fedfw' task='synthetic' num-server-rounds=4 min-nodes=3 "
        f"fedfw.federated-eval=false reply-timeout=30 output-dir='{results}' run-name='killed'")
    deadline = time.monotonic() + 300
    while not any(r["round"] >= 1 for r in rows(results, "killed")):
        assert time.monotonic() < deadline, "round 1 never finished"
        time.sleep(1)
    deployment.kill("supernode-2")
    status = deployment.wait_for_runs([run_id], timeout=600)[run_id]
    done = rows(results, "killed")
    assert status == "finished:completed"
    assert [r["round"] for r in done] == [0, 1, 2, 3, 4]
    assert sum(r["failures"] for r in done[2:]) >= 1
    assert done[-1]["participants"] == 2
