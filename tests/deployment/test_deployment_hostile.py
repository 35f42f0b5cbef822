"""A hostile peer: SuperNodes whose ClientApp is deliberately malicious, in a real deployment
(TLS, SuperNode authentication, ``flwr run``) and on the in-process engine.

The job's FAB is built from a copy of the project whose ClientApp component is
``testing.hostile_clientapp`` (every node runs it; it is the real ClientApp unless the node config
has ``hostile``); ``client_app/app.py`` is unchanged. FedFW on the synthetic task, D an l2 ball
(dense points, so NaN and a point outside D can be told apart from malformed arrays), five nodes:

- partitions 0, 1, 2: honest;
- partition 3, ``hostile='nan,outside,garbage,huge'``: its train reply of round 1 has a NaN, of
  round 2 a point of norm 4r (outside its D_i), of round 3 arrays of another dtype and shape, of
  round 4 a 32 MiB array and a 16 MiB bytes record (Flower sends arrays in 5 MiB chunks; a
  ConfigRecord travels as one object; Flower's own limit per message is 2 GiB - 1, the protobuf
  maximum, ``GRPC_MAX_MESSAGE_LENGTH`` / ``MAX_PROTOBUF_STREAM_MESSAGE_LENGTH`` in flwr 1.41);
- partition 4, ``hostile='claim:<p>'``: its query.node reply claims an honest node's partition.
  The operator pins the registered nodes to their partitions (run config ``node-partitions``,
  node ids as ``flwr supernode register`` gave them), so the claim is refused (one failure of
  round 1, logged) whatever the claimant's node id.

What must hold: the run completes, each bad reply is one failure of its round (and the server's
log gives the reason), and the honest nodes' results are those of a run in which the
payload-attacker's every reply after its query.node answer is an error and the claimant does not
exist: equal to rel 1e-12 on every metric but the failure counts,
byte counts and wall times.

Known, without ``node-partitions``: the roster keeps the first claim of a partition by node id,
so a claimant whose (random) node id is smaller than the honest owner's takes the partition and
the owner is left out (``test_without_pins_...``, a strict xfail).

The live deployment takes about 1.5 min alone on 2 cores (warm SuperNodes, see
``deploy.warm_superexec``); it runs in the default suite.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from client_app.app import app as client_app
from deploy.app_files import app_copy
from deploy.deployment import Deployment
from deploy.ports import free_port_block
from run_config.declared import parse_overrides
from server_app.results import CLOCKS
from testing.hostile_clientapp import HUGE_ARRAY_BYTES, HUGE_CONFIG_BYTES
from testing.hostile_clientapp import app as hostile_app
from tests.helpers import run_app

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time

HONEST = 3
PARTITIONS = 5
PAYLOADS = "nan,outside,garbage,huge"
CONFIG = (
    "algorithm='fedfw' task='synthetic' fedfw.constraint='l2' num-server-rounds=4 "
    "fedfw.federated-eval=false"
)
REASONS = {1: "NaN", 2: "outside D", 3: "dtype", 4: "expected records"}  # of the dropped replies
DIFFERENT_BY_DESIGN = ("failures", "bytes", "wire_bytes", "exchange", *CLOCKS)  # key prefixes


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(DIFFERENT_BY_DESIGN)} for r in rows]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        assert x == pytest.approx(y, rel=1e-12, abs=0.0)


def honest_configs(num_partitions: int) -> list[dict]:
    return [{"num-partitions": num_partitions} for _ in range(HONEST)]


def failing_after_admission(message, context):
    """The ClientApp, but a node with ``failing`` in its node config answers query.node (it is
    admitted, as the payload attacker is) and errs on every other message."""
    if context.node_config.get("failing") and message.metadata.message_type != "query.node":
        raise RuntimeError("this node fails every round")
    return client_app(message, context)


def with_a_failing_node(tmp_path: Path) -> list[dict]:
    """The reference: the honest nodes and one admitted node whose every reply is an error (of
    the deployment's five partitions; nobody comes for the fifth: no wait for it)."""
    return run_app(
        tmp_path,
        HONEST + 1,
        [*honest_configs(PARTITIONS), {"num-partitions": PARTITIONS, "failing": 1}],
        client=failing_after_admission,
        **parse_overrides(CONFIG),
        **{"join-timeout": 0.0},
    ).rows


def local_ids(num_nodes: int) -> list[int]:
    """The node ids LocalGrid gives ``num_nodes`` nodes, in partition order."""
    return [(1 << 63) + 977 * (i - num_nodes // 2) for i in range(num_nodes)]


def pins(ids: dict[int, int]) -> str:
    """``node-partitions`` for {node id: partition id}."""
    return ",".join(f"{node}:{partition}" for node, partition in ids.items())


def with_hostile_nodes(tmp_path: Path, claimed: int = 0) -> list[dict]:
    """The deployment's job on the in-process engine: the honest nodes and the payload attacker
    pinned to their partitions (``node-partitions``), the claimant not."""
    configs = [
        *honest_configs(PARTITIONS),
        {"num-partitions": PARTITIONS, "hostile": PAYLOADS},
        {"num-partitions": PARTITIONS, "hostile": f"claim:{claimed}"},
    ]
    pinned = pins({node: p for p, node in enumerate(local_ids(HONEST + 2)[: HONEST + 1])})
    return run_app(
        tmp_path,
        HONEST + 2,
        configs,
        client=hostile_app,
        **parse_overrides(CONFIG),
        **{"node-partitions": pinned},
    ).rows


def test_hostile_peers_cost_only_their_own_replies_in_process(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="flwr")
    hostile = with_hostile_nodes(tmp_path / "hostile")
    dropped = [r.getMessage() for r in caplog.records if "dropped the reply" in r.getMessage()]
    claims = [r.getMessage() for r in caplog.records if "claims partition 0" in r.getMessage()]
    reference = with_a_failing_node(tmp_path / "reference")
    assert [r["failures"] for r in hostile] == [0, 2, 1, 1, 1]  # + the refused claim
    assert [r["failures"] for r in reference] == [0, 1, 1, 1, 1]
    assert all(r["participants"] == HONEST for r in hostile[1:])
    assert_same(comparable(hostile), comparable(reference))
    assert len(dropped) == 4 and len(claims) == 1, (dropped, claims)
    for server_round, reason in REASONS.items():
        assert reason in dropped[server_round - 1], dropped


def _claimant_first(tmp_path: Path, pinned: bool) -> tuple[list[dict], list[dict]]:
    """A claimant of partition 0 whose node id is smaller than every honest node's (LocalGrid's
    ids grow with the index), and the honest nodes alone."""
    claimant = {"partition-id": HONEST, "num-partitions": HONEST + 1, "hostile": "claim:0"}
    honest = [{"partition-id": i, "num-partitions": HONEST + 1} for i in range(HONEST)]
    extra = {"node-partitions": pins({n: i for i, n in enumerate(local_ids(HONEST + 1)[1:])})}
    hostile = run_app(
        tmp_path / "hostile",
        HONEST + 1,
        [claimant, *honest],
        client=hostile_app,
        **parse_overrides(CONFIG),
        **(extra if pinned else {}),
    ).rows
    # the honest nodes of a federation of HONEST + 1 alone: nobody comes, no wait
    alone = run_app(
        tmp_path / "alone", HONEST, honest, **parse_overrides(CONFIG), **{"join-timeout": 0.0}
    ).rows
    return hostile, alone


def test_with_pinned_partitions_a_claimant_with_a_smaller_node_id_changes_nothing(tmp_path):
    hostile, alone = _claimant_first(tmp_path, pinned=True)
    assert hostile[1]["failures"] == 1  # the refused claim
    assert_same(comparable(hostile), comparable(alone))


def test_an_unpinned_node_with_an_unusable_answer_never_takes_part(tmp_path):
    """A registered node outside ``node-partitions`` whose query.node answer is an Array with a
    dtype numpy does not know and a declared 1e28 elements: the run goes on as if it did not
    exist (one failure of round 1), and it is never sent anything after round 1's question."""
    honest = [{"partition-id": i, "num-partitions": HONEST} for i in range(HONEST)]
    intruder = {"partition-id": 0, "num-partitions": HONEST, "hostile": "unusable"}
    extra = {"node-partitions": pins({n: i for i, n in enumerate(local_ids(HONEST + 1)[:HONEST])})}
    run = run_app(
        tmp_path / "hostile",
        HONEST + 1,
        [*honest, intruder],
        client=hostile_app,
        **parse_overrides(CONFIG),
        **extra,
    )
    alone = run_app(tmp_path / "alone", HONEST, honest, **parse_overrides(CONFIG)).rows
    intruder_id = local_ids(HONEST + 1)[HONEST]
    assert [
        m.metadata.message_type for m in run.grid.down if m.metadata.dst_node_id == intruder_id
    ] == ["query.node"]
    assert run.rows[1]["failures"] == 1 and all(r["failures"] == 0 for r in run.rows[2:])
    assert all(r["participants"] == HONEST for r in run.rows[1:])
    assert_same(comparable(run.rows), comparable(alone))


@pytest.mark.xfail(
    strict=True,
    reason="known, without node-partitions: the roster keeps the "
    "first claim of a partition by node id, so a claimant with a smaller (random) "
    "node id than the honest owner takes its place and the owner is left out",
)
def test_without_pins_a_claimant_with_a_smaller_node_id_changes_nothing(tmp_path):
    hostile, alone = _claimant_first(tmp_path, pinned=False)
    assert_same(comparable(hostile), comparable(alone))


# -- the live deployment -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """Five warm SuperNodes (two hostile) behind a TLS SuperLink with SuperNode authentication,
    one job; its metrics rows, the ServerApp's log and the node ids."""
    app = app_copy(tmp_path_factory.mktemp("app") / "app", "testing.hostile_clientapp:app")
    d = Deployment(
        tmp_path_factory.mktemp("hostile"),
        tls=True,
        auth=True,
        base_port=free_port_block(),
        warm=True,
    )
    try:
        d.start_superlink()
        for i in range(HONEST):
            d.start_supernode(i, PARTITIONS)
        d.start_supernode(HONEST, PARTITIONS, name="payloads", node_config=f"hostile='{PAYLOADS}'")
        # the operator pins the registered honest nodes (and the payload attacker, an insider
        # with a registered key) to their partitions; the claimant's node id, smaller or larger
        # than its victim's, does not matter
        owner = 0
        d.start_supernode(
            HONEST + 1, PARTITIONS, name="claimant", node_config=f"hostile='claim:{owner}'"
        )
        pinned = pins(
            {
                **{d.node_ids[f"supernode-{i}"]: i for i in range(HONEST)},
                d.node_ids["payloads"]: HONEST,
            }
        )
        results = d.workdir / "results"
        run_id = d.submit(
            f"{CONFIG} min-nodes={HONEST + 2} reply-timeout=300 "
            f"node-partitions='{pinned}' output-dir='{results}' run-name='hostile'",
            app,
        )
        status = d.wait_for_runs([run_id], timeout=600)[run_id]
        rows = json.loads((results / "hostile" / "metrics.json").read_text())["rounds"]
        log = (d.workdir / "logs" / f"{run_id}.log").read_text()
        ended = json.loads((results / "hostile" / "config.json").read_text())["outcome"]
        yield {
            "status": status,
            "rows": rows,
            "log": log,
            "owner": owner,
            "ids": d.node_ids,
            "outcome": ended,
        }
    finally:
        d.stop()


def test_a_deployment_with_hostile_peers_completes_and_counts_every_bad_reply(hostile_run):
    rows, log, ids = hostile_run["rows"], hostile_run["log"], hostile_run["ids"]
    assert hostile_run["status"] == "finished:completed"
    assert [r["round"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["failures"] for r in rows] == [0, 2, 1, 1, 1]  # round 1: + the refused claim
    assert all(r["participants"] == HONEST for r in rows[1:])
    for server_round, reason in REASONS.items():
        line = next(
            line
            for line in log.splitlines()
            if f"round {server_round}: dropped the reply of node {ids['payloads']}" in line
        )
        assert reason in line, line
    assert any(
        f"node {ids['claimant']} claims partition {hostile_run['owner']}, but "
        "node-partitions does not list it" in line
        for line in log.splitlines()
    ), log[-3000:]
    assert rows[4]["bytes_up"] > HUGE_ARRAY_BYTES + HUGE_CONFIG_BYTES  # the huge reply arrived
    # the health line names the refused claimant with its reason, and the partition its
    # SuperNode was started for, which nobody served
    refused = f"claims partition {hostile_run['owner']}, but node-partitions does not list it"
    assert hostile_run["outcome"]["left_out"] == {str(ids["claimant"]): refused}
    assert hostile_run["outcome"]["vacant"] == [HONEST + 1]
    assert (
        f"{HONEST + 1} nodes, 1 left out: node {ids['claimant']}: {refused}, "
        f"no node for partition {HONEST + 1}, 0 warnings" in hostile_run["outcome"]["line"]
    )


def test_the_honest_nodes_results_are_those_without_the_hostile_peers(hostile_run, tmp_path):
    deployed = hostile_run["rows"]
    assert_same(comparable(deployed), comparable(with_a_failing_node(tmp_path / "reference")))
    # and the in-process engine runs the same attack to the same numbers, failures included
    mirrored = with_hostile_nodes(tmp_path / "hostile", claimed=hostile_run["owner"])
    keep = ("failures",)
    assert_same(
        [{**a, **{k: r[k] for k in keep}} for a, r in zip(comparable(deployed), deployed)],
        [{**a, **{k: r[k] for k in keep}} for a, r in zip(comparable(mirrored), mirrored)],
    )
