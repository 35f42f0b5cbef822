"""A SuperNode that comes back under a new node id takes its partition's place and is brought up
to date; a second node claiming a partition that is served is left out (never counted twice).

In-process engine (``LocalGrid.leave`` / ``join``): the node of partition ``AWAY`` is gone from
round 3 and a restarted SuperNode (fresh id, empty state) serves that partition from round 4; a
claimant of partition ``SERVED`` joins in round 2 while that partition's node is connected. The
reference is the same run where the node of ``AWAY`` only misses round 3 (every message fails)
and has lost its state by round 4: once the server knows, both take the same lost-state path,
so every metric but the traffic counts must be equal.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from client_app.app import app as client_app
from client_app.fedfw_replica import STATE as REPLICA_STATE
from client_app.ffgb import CACHE, VALUES
from functions.protocol import (
    ARRAYS,
    BOUNDS,
    GROWING,
    LAYOUT,
    MODELS,
    NEIGHBOURS,
    NODE,
    OWN_PREFIX,
    QUERY_SKETCH,
    SETUP,
)
from run_config.common import RunSettings
from server_app.app import run
from server_app.checkpoint import read_checkpoint
from server_app.metered_grid import MeteredGrid
from server_app.results import CLOCKS
from strategies.roster import Changes, Roster
from tasks.federation import local_data
from testing.inprocess_grid import (
    LocalGrid,
    counting,
    enter_run,
    round_of,
    run_config,
    server_context,
)
from tests.helpers import RUN_NAME, checkpoint_ensemble, state_params
from tests.lifecycle.test_checkpoints import CrashingGrid, ServerCrash, assert_resumed_equals

NODES, ROUNDS, AWAY, SERVED = 4, 5, 3, 2  # partition 3 is sampled in round 3 in every family
SMALL = {
    "task": "synthetic",
    "num-server-rounds": ROUNDS,
    "local-epochs": 0,
    "local-steps": 3,
    "learning-rate": 0.05,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 10,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.hidden": "8",
}
FAMILIES = {
    "fedavg": {"fraction-train": 0.75},
    "fedfw": {"fedfw.participation": 0.5, "fedfw.downlink": "compact"},
    "feddr": {"feddr.participation": 0.5},
    "ffgb": {},
    "fedfun": {},
    "fedxgb-hist": {"fedxgb-hist.max-depth": 3},
}
TRAFFIC = (*CLOCKS, "models_exchanged", "exchanges")  # and every *bytes* key


def config_for(out: Path, algorithm: str) -> dict:
    return run_config(
        **{
            "output-dir": str(out),
            "run-name": RUN_NAME,
            **counting({"algorithm": algorithm, **SMALL, **FAMILIES[algorithm]}),
        }
    )


def rows_of(out: Path) -> list[dict]:
    return json.loads((out / RUN_NAME / "metrics.json").read_text())["rounds"]


def without_traffic(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "bytes" not in k and k not in TRAFFIC} for r in rows]


def returning(
    config: dict, grid_class: type[LocalGrid] = LocalGrid
) -> tuple[LocalGrid, dict[str, int]]:
    """A grid where AWAY's node leaves from round 3 and comes back (a new id) at round 4, and a
    claimant of the served partition SERVED joins at round 2."""
    grid = grid_class(client_app, config, NODES)
    nodes = {"old": grid.partition_node(AWAY), "served": grid.partition_node(SERVED)}
    grid.leave(nodes["old"], from_round=3)
    nodes["new"] = grid.join(AWAY, from_round=4)
    nodes["claimant"] = grid.join(SERVED, from_round=2)
    return grid, nodes


def missing_round_3(message, context):
    """AWAY's node fails every message of round 3 and has lost its state by round 4."""
    if context.node_config["partition-id"] == AWAY:
        server_round = round_of(message)
        if server_round == 3:
            raise RuntimeError("SuperNode down")
        if server_round > 3 and "lost" not in context.node_config:
            context.node_config["lost"] = 1
            for key in list(context.state.keys()):
                del context.state[key]
    return client_app(message, context)


def to(grid: LocalGrid, node: int) -> list[tuple[int, str]]:
    """(round, type) of every message sent to ``node``."""
    return [
        (round_of(m), m.metadata.message_type) for m in grid.down if m.metadata.dst_node_id == node
    ]


def first_message(grid: LocalGrid, node: int, kind: str):
    return next(
        m for m in grid.down if m.metadata.dst_node_id == node and m.metadata.message_type == kind
    )


@pytest.mark.parametrize("algorithm", sorted(FAMILIES))
@pytest.mark.e2e
def test_a_returning_node_is_brought_up_to_date_and_counted_once(tmp_path, algorithm):
    config = config_for(tmp_path / "returning", algorithm)
    grid, nodes = returning(config)
    run(grid, server_context(config))
    rows = rows_of(tmp_path / "returning")
    reference = config_for(tmp_path / "reference", algorithm)
    run(LocalGrid(missing_round_3, reference, NODES), server_context(reference))

    # the run equals one where the node only missed round 3 and lost its state
    assert without_traffic(rows) == without_traffic(rows_of(tmp_path / "reference"))
    # away in round 3: every message to it fails; back from round 4 without a failure
    old = to(grid, nodes["old"])
    assert (3, "train") in old  # so the reference's server learns of the loss in round 3
    # FFGB's, FedFun's and fedxgb-hist's round-2 evaluation rode on round 3's train messages
    # (every node trains every round): lost with the node's reply
    rides = algorithm in ("ffgb", "fedfun", "fedxgb-hist")
    assert [r["failures"] for r in rows[1:3]] == [0, 1 if rides else 0]
    assert rows[3]["failures"] == sum(r == 3 for r, _ in old) > 0
    assert [r["failures"] for r in rows[4:]] == [0] * (ROUNDS - 3)
    # the new node is asked who it is once, then addressed from round 4 on; the old one never
    assert max(r for r, _ in old) == 3
    assert to(grid, nodes["new"])[0] == (4, "query.node")
    assert {r for r, _ in to(grid, nodes["new"])} == set(range(4, ROUNDS + 1))
    # participants count every train message that reached a node, the returning one included
    for server_round in range(1, ROUNDS + 1):
        trained = [
            m.metadata.dst_node_id
            for m in grid.down
            if m.metadata.message_type == "train" and round_of(m) == server_round
        ]
        reached = {n for n in trained if n != nodes["old"] or server_round < 3}
        assert rows[server_round]["participants"] == len(reached)  # fedxgb-hist: a level each
    assert any(kind == "train" for r, kind in to(grid, nodes["new"]) if r >= 4)
    # the claimant of a served partition: asked once, never trained or evaluated
    assert to(grid, nodes["claimant"]) == [(2, "query.node")]
    assert sum(m.metadata.message_type == "query.node" for m in grid.down) == NODES + 2
    UP_TO_DATE[algorithm](tmp_path / "returning", grid, nodes)


# -- brought up to date: per family ---------------------------------------------------------------
def _fedavg(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """Nothing is kept on a FedAvg node: the global model in each message is all it needs."""


def _fedfw(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """Its x_i is the server's mirror of it; its replica holds the server's x-bar bit for bit."""
    state = read_checkpoint(out / RUN_NAME).strategy
    new = nodes["new"]
    assert first_message(grid, new, "train").content["config"]["sync"] != "none"
    position = state["book"]["node-ids"].index(str(new))  # the mirror is kept by roster position
    mirror = [v.numpy() for k, v in state["mirror"].items() if k.startswith(f"{position}/")]
    assert mirror and all(
        np.array_equal(a, b) for a, b in zip(state_params(grid, new, "fedfw.pending.x"), mirror)
    )
    arrays = {k: v.numpy() for k, v in grid.contexts[new].state[REPLICA_STATE].items()}
    replica = [arrays[f"sum.{k}"] for k in range(len(mirror))]
    server = [a.numpy() for a in state["mirror-sum"].values()]
    assert all(np.array_equal(a, b) for a, b in zip(replica, server))


def _feddr(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """It restarts from the x_hat_i the server kept for its partition (``sync``)."""
    assert first_message(grid, nodes["new"], "train").content["config"]["sync"] != "none"
    assert "feddr.meta" in grid.contexts[nodes["new"]].state


def _ffgb(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """Its first message carries the whole ensemble; its values are the server's function."""
    new = nodes["new"]
    assert first_message(grid, new, "train").content["delta"]["full"]
    ensemble = checkpoint_ensemble(out / RUN_NAME)
    context = grid.contexts[new]
    assert int(context.state[CACHE]["version"]) == ensemble.version
    data = local_data(RunSettings.from_run_config(context.run_config).data, AWAY, NODES)
    np.testing.assert_allclose(
        context.state[VALUES]["train"].numpy(),
        ensemble.predict(data.x_train.reshape(len(data.x_train), -1)),
        atol=1e-5,
    )


def _fedfun(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """Its first message carries the domain, its own last model and every neighbour's model."""
    message = first_message(grid, nodes["new"], "train")
    models = message.content[MODELS]
    neighbours = set(message.content[NEIGHBOURS]["ids"])
    sent = {int(k[1:].split("/")[0]) for k in models if k.startswith("p") and k.endswith("/kind")}
    assert neighbours and sent == neighbours and AWAY not in neighbours
    assert OWN_PREFIX + "kind" in models and SETUP in message.content
    assert BOUNDS in message.content


def _fedxgb_hist(out: Path, grid: LocalGrid, nodes: dict[str, int]) -> None:
    """Nothing is kept on a node: every train message carries the booster, the edges and the
    trees so far; its partition's rows stay known by roster position (no second sketch)."""
    new = nodes["new"]
    assert {ARRAYS, LAYOUT, GROWING} <= set(first_message(grid, new, "train").content)
    assert all(kind != QUERY_SKETCH for _, kind in to(grid, new))


UP_TO_DATE = {
    "fedavg": _fedavg,
    "fedfw": _fedfw,
    "feddr": _feddr,
    "ffgb": _ffgb,
    "fedfun": _fedfun,
    "fedxgb-hist": _fedxgb_hist,
}


# -- checkpoints -----------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", sorted(FAMILIES))
@pytest.mark.e2e
def test_rebinds_and_claimants_survive_a_resume(tmp_path, algorithm):
    """The served partition's node leaves from round 5: its claimant (asked in round 2, kept in
    the checkpoint) takes its place without being asked again. The ServerApp crashes before
    round 5 and resumes from the checkpoint of round 4 (after the rebind of round 4)."""
    whole = config_for(tmp_path / "whole", algorithm)
    grid, nodes = returning(whole)
    grid.leave(nodes["served"], from_round=5)
    run(grid, server_context(whole))
    claimant = to(grid, nodes["claimant"])
    assert claimant[0] == (2, "query.node") and len(claimant) > 1
    assert all(r >= 5 and kind != "query.node" for r, kind in claimant[1:])
    assert max(r for r, _ in to(grid, nodes["served"])) == 4
    assert rows_of(tmp_path / "whole")[5]["failures"] == 0

    config = config_for(tmp_path / "resumed", algorithm)
    crashing, same = returning(config, CrashingGrid)
    crashing.leave(same["served"], from_round=5)
    crashing.crash_at = 5
    with pytest.raises(ServerCrash):
        run(crashing, server_context(config))
    assert read_checkpoint(tmp_path / "resumed" / RUN_NAME).server_round == 4
    crashing.crash_at = None
    for context in crashing.contexts.values():  # the resumed run is a new Flower run
        context.state = RecordDict()
    run(crashing, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    resumed, uninterrupted = (
        [{k: v for k, v in r.items() if k not in CLOCKS} for r in rows_of(tmp_path / name)]
        for name in ("resumed", "whole")
    )
    if algorithm != "feddr":
        assert_resumed_equals(resumed, uninterrupted, after=4)
        return
    # FedDR's nodes restart from x_hat_i (their y_i cannot be rebuilt): no round is lost
    assert resumed[:5] == uninterrupted[:5]
    assert all(r["failures"] == 0 for r in resumed[5:])


# -- the roster alone -----------------------------------------------------------------------------
class AnsweringGrid:
    """Connected node ids and their ``query.node`` answers (None: an unusable one)."""

    def __init__(self, answers: dict[int, dict | None]) -> None:
        enter_run()
        self.answers, self.connected, self.asked = answers, set(answers), []

    def get_node_ids(self) -> list[int]:
        return sorted(self.connected)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            facts = self.answers[message.metadata.dst_node_id]
            self.asked.append(message.metadata.dst_node_id)
            content = RecordDict({NODE: ConfigRecord(facts)} if facts is not None else {})
            replies.append(Message(content, reply_to=message))
        return replies


def facts(partition: int, **extra) -> dict:
    return {"partition-id": partition, "num-partitions": 4, **extra}


def test_the_roster_takes_returning_nodes_in_once_and_leaves_out_every_other_claim():
    grid = AnsweringGrid({10: facts(0), 20: facts(1), 30: facts(2), 40: facts(1)})
    roster, rejected = Roster.query(grid, "test", 1)
    # a second claim on partition 1 in round 1 is left out as well (not counted twice)
    assert (roster.node_ids, roster.claimants, rejected) == ([10, 20, 30], {40: facts(1)}, 0)
    assert roster.left_out == {40: "partition 1 is served by node 20"}
    assert roster.vacant() == [3]  # of num-partitions 4: the health line names it
    # one node cannot make the federation larger than the others say, nor unbounded
    assert Roster([1, 2], {1: facts(0), 2: {**facts(1), "num-partitions": 10**6}}).vacant() == [
        2,
        3,
    ]
    huge = AnsweringGrid({1: facts(0), 2: {**facts(1), "num-partitions": 10**6 + 1}})
    assert Roster.query(huge, "test", 1)[0].left_out == {
        2: "num-partitions=1000001 is above 1,000,000"
    }
    grid.asked.clear()
    assert (
        roster.refresh(grid, "test", 2) == (Changes(), 0) and grid.asked == []
    )  # no change: no message

    grid.connected -= {20, 30}  # their SuperNodes restart: 40 and 50 take partitions 1 and 2
    grid.answers |= {
        50: facts(2),
        60: facts(3),  # partition 3: no node of the run had it: 60 joins
        70: facts(0),  # partition 0: its node is still connected
        75: facts(2, constraint="l2"),  # other facts than partition 2's node
        80: None,  # an unusable answer: one failure
        90: facts(2),
    }  # partition 2 again: 50, the lowest id, took it first
    grid.connected |= {50, 60, 70, 75, 80, 90}
    assert roster.refresh(grid, "test", 3) == (Changes([(20, 40), (30, 50)], [60]), 1)
    assert grid.asked == [50, 60, 70, 75, 80, 90]  # 40 was asked in round 1 already
    assert roster.node_ids == [10, 40, 50, 60] and list(roster.facts) == [10, 40, 50, 60]
    assert roster.facts[50] == facts(2) and sorted(roster.claimants) == [70, 75, 80, 90]
    # why each is out, for the health line; 40 took its place and is out no more
    assert sorted(roster.left_out) == [70, 75, 80, 90] and roster.vacant() == []
    assert roster.left_out[70] == "partition 0 is served by node 10"
    assert roster.left_out[75] == "partition 2 is served by node 50"  # 50 took it first
    assert "expected records" in roster.left_out[80]  # the decoder's sentence
    assert roster.left_out[90] == "partition 2 is served by node 50"

    restored = Roster.from_record(roster.to_record())
    assert restored == roster and list(restored.claimants) == list(roster.claimants)
    grid.asked.clear()
    grid.connected -= {90}  # a claimant that leaves is forgotten; nobody is asked again
    assert restored.refresh(grid, "test", 4) == (Changes(), 0) and grid.asked == []
    assert sorted(restored.claimants) == [70, 75, 80]


def test_the_superlinks_node_unavailable_reply_names_the_lost_node():
    """Flower's SuperLink answers for a node it lost from its own id 1; the metered grid gives
    the reply the id of the node the message was for, so the strategy re-syncs that node."""
    inner = LocalGrid(client_app, run_config(**SMALL), 2)
    lost = inner.node_ids[0]
    inner.leave(lost, 1)
    grid = MeteredGrid(inner, reply_timeout=5)
    questions = [
        Message(RecordDict(), node, "query.node", group_id="1") for node in list(inner.node_ids)
    ]
    replies = {r.metadata.src_node_id: r for r in grid.send_and_receive(questions)}
    assert sorted(replies) == sorted(inner.contexts)
    assert replies[lost].has_error() and not replies[inner.node_ids[0]].has_error()
    assert grid.take().failures == 1
