"""Sites that come and go (``strategies.roster``), in every family, on the in-process engine.

*Joining*: partition ``LATE``'s node is not there when the run starts; a node for it connects
while round 3 runs (``LocalGrid.join(..., from_round=4)``: the server sees it at round 4's
roster refresh), is asked who it is, and trains from round 4, brought up to date by its first
message. *Leaving*: partition ``GONE``'s node disconnects from round 2; with ``leave-after`` = 2
it leaves the run for good at round 3 (its partition free, nothing sent to it again, no failure
counted after), and a node that connects later for that partition joins as a new node.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import RecordDict

from client_app.app import app as client_app
from functions.protocol import ARRAYS, BOUNDS, GROWING, LAYOUT, NEIGHBOURS, NUM_CLIENTS, SETUP
from server_app.app import run
from server_app.checkpoint import read_checkpoint
from server_app.results import CLOCKS
from strategies.roster import Admission, Changes, Roster, tombstone
from testing.inprocess_grid import LocalGrid, counting, round_of, run_config, server_context
from tests.helpers import RUN_NAME, train_messages
from tests.lifecycle.test_checkpoints import CrashingGrid, ServerCrash, assert_resumed_equals
from tests.membership import test_returning_node as returning
from tests.membership.test_late_nodes import LateGrid
from tests.membership.test_returning_node import AnsweringGrid, facts

NODES, ROUNDS, LATE, GONE = 4, 5, 3, 1
SMALL = {**returning.SMALL, "num-server-rounds": ROUNDS, "join-timeout": 0.0}  # small jobs
FAMILIES = {  # every node trains every round, so participants count the run's nodes
    "fedavg": {},
    "fedfw": {"fedfw.downlink": "compact"},
    "feddr": {},
    "ffgb": {},
    "fedfun": {},
    "fedxgb-bagging": {},
    "fedxgb-hist": {"fedxgb-hist.max-depth": 3},
}
VARIANTS = {  # the families' other server states: secure sums, sealed relays, a baseline
    "fedavg-secure": ("fedavg", {"secure-aggregation": True}),
    "fedxgb-hist-secure": (
        "fedxgb-hist",
        {"secure-aggregation": True, "fedxgb-hist.bins": "grid", "fedxgb-hist.max-depth": 3},
    ),
    "fedfw-secure": ("fedfw", {"secure-aggregation": True}),
    "feddr-secure": ("feddr", {"secure-aggregation": True}),
    "ffgb-sealed": ("ffgb", {"relay-encryption": True, "central-evaluation": False}),
    "fedfun-sealed": ("fedfun", {"relay-encryption": True}),
    "dfedavgm": ("dfedavgm", {}),
}
ONE_SHOT = {"ffgb-one-shot": ("ffgb-l", {"ffgb.one-shot": True})}  # its pool of learners


def algorithm_of(name: str) -> tuple[str, dict]:
    return {**VARIANTS, **ONE_SHOT}.get(name, (name, FAMILIES.get(name, {})))


def config_for(out: Path, name: str, **extra) -> dict:
    algorithm, keys = algorithm_of(name)
    return run_config(
        **{
            "output-dir": str(out),
            "run-name": RUN_NAME,
            **counting({"algorithm": algorithm, **SMALL, **keys, **extra}),
        }
    )


def joining(config: dict, grid_class: type[LocalGrid] = LocalGrid) -> tuple[LocalGrid, int]:
    """A grid without ``LATE``'s node at the start; a node for it connects in round 3."""
    grid = grid_class(client_app, config, NODES)
    grid.node_ids.remove(grid.partition_node(LATE))  # never connects
    return grid, grid.join(LATE, from_round=4)


def leaving(config: dict, grid_class: type[LocalGrid] = LocalGrid) -> tuple[LocalGrid, int, int]:
    """A grid whose ``GONE`` node disconnects from round 2; a new node for that partition
    connects in round 4 (the run's last)."""
    grid = grid_class(client_app, config, NODES)
    gone = grid.partition_node(GONE)
    grid.leave(gone, from_round=2)
    return grid, gone, grid.join(GONE, from_round=5)


def outcome_of(out: Path) -> tuple[list[dict], dict]:
    folder = out / RUN_NAME
    rows = json.loads((folder / "metrics.json").read_text())["rounds"]
    return rows, json.loads((folder / "config.json").read_text())["outcome"]


def rounds_sent(grid: LocalGrid, node: int) -> list[tuple[int, str]]:
    return [
        (round_of(m), m.metadata.message_type) for m in grid.down if m.metadata.dst_node_id == node
    ]


def participants(rows: list[dict]) -> list[int]:
    return [r["participants"] for r in rows[1:]]


@pytest.mark.parametrize("name", [*FAMILIES, *VARIANTS])
def test_a_node_that_connects_in_round_3_trains_from_round_4(tmp_path, name):
    config = config_for(tmp_path, name)
    grid, late = joining(config)
    run(grid, server_context(config))
    rows, outcome = outcome_of(tmp_path)

    assert rounds_sent(grid, late)[0] == (4, "query.node")
    assert {r for r, kind in rounds_sent(grid, late) if kind == "train"} == {4, 5}
    assert participants(rows) == [NODES - 1] * 3 + [NODES] * 2
    check_joined(grid, late, rows, outcome, name)


def test_a_node_that_joins_a_one_shot_run_fits_its_learners_once(tmp_path):
    """FFGB.L in one round of communication: a node that joins fits its K learners in the
    round it joins, and they enter every average from then on. This run sends no message
    after round 1 (the in-process grid's clock follows the messages): the node connects once
    round 1's train messages are out (``LateGrid``) and is seen at round 2."""
    name = "ffgb-one-shot"
    config = config_for(tmp_path, name)
    grid = LateGrid(client_app, config, NODES, late=LATE, delay=0.0, after="train")
    late = grid.late
    run(grid, server_context(config))
    rows, outcome = outcome_of(tmp_path)

    assert rounds_sent(grid, late)[:2] == [(2, "query.node"), (2, "train")]
    assert {r for r, kind in rounds_sent(grid, late) if kind == "train"} == {2}
    assert participants(rows) == [NODES - 1] + [NODES] * 4
    check_joined(grid, late, rows, outcome, name)


def check_joined(grid: LocalGrid, late: int, rows: list[dict], outcome: dict, name: str) -> None:
    """No failure; the run's nodes all four; the new node brought up to date at once."""
    assert all(r["failures"] == 0 for r in rows)
    assert outcome["nodes"] == NODES and outcome["vacant"] == [] and outcome["left_out"] == {}
    BROUGHT_UP_TO_DATE[algorithm_of(name)[0]](train_messages(grid, late)[0])
    if name.startswith("fedfw") and "secure" not in name:  # N is the run's nodes
        assert [m.content["config"][NUM_CLIENTS] for m in train_messages(grid, late)] == [4, 4]


@pytest.mark.parametrize("name", [*FAMILIES, *VARIANTS])
def test_a_node_away_for_leave_after_rounds_leaves_and_its_partition_is_taken_again(tmp_path, name):
    config = config_for(tmp_path, name, **{"leave-after": 2})
    grid, gone, back = leaving(config)
    run(grid, server_context(config))
    rows, outcome = outcome_of(tmp_path)

    # away in round 2 (its messages fail), released at round 3: never addressed again
    assert max(r for r, _ in rounds_sent(grid, gone)) == 2
    assert rows[2]["failures"] > 0 and all(r["failures"] == 0 for r in rows[3:])
    assert participants(rows)[2:] == [NODES - 1, NODES - 1, NODES]
    # its partition, free, is taken by the node that connected in round 4
    assert rounds_sent(grid, back)[0] == (5, "query.node")
    assert {r for r, kind in rounds_sent(grid, back) if kind == "train"} == {5}
    assert outcome["nodes"] == NODES and outcome["vacant"] == [] and outcome["left_out"] == {}
    if "fedfun" in name:  # the neighbours go on without its vertex until it is taken again
        for m in grid.down:
            if m.metadata.message_type == "train" and round_of(m) in (3, 4):
                assert GONE not in m.content[NEIGHBOURS]["ids"]
    if name == "fedfw":
        counts = {
            round_of(m): m.content["config"][NUM_CLIENTS]
            for m in grid.down
            if m.metadata.message_type == "train" and round_of(m) >= 3
        }
        assert counts == {3: 3, 4: 3, 5: 4}


def test_fedxgb_cyclic_takes_a_node_that_joins_into_its_turn(tmp_path):
    """One node a round, in order: the new node comes last, so round 4 is its turn."""
    config = config_for(tmp_path, "fedxgb-cyclic")
    grid, late = joining(config)
    run(grid, server_context(config))
    rows, outcome = outcome_of(tmp_path)
    assert {r for r, kind in rounds_sent(grid, late) if kind == "train"} == {4}
    assert participants(rows) == [1] * ROUNDS and all(r["failures"] == 0 for r in rows)
    assert outcome["nodes"] == NODES


def test_without_leave_after_an_absent_node_keeps_its_place(tmp_path):
    """Its messages fail while it is away; the node that connects later for its partition
    takes its place as a returning SuperNode (same position), not as a new node."""
    config = config_for(tmp_path, "fedavg")
    grid, gone, back = leaving(config)
    run(grid, server_context(config))
    rows, outcome = outcome_of(tmp_path)
    assert all(r["failures"] > 0 for r in rows[2:5]) and rows[5]["failures"] == 0
    assert {r for r, kind in rounds_sent(grid, back) if kind == "train"} == {5}
    checkpoint = read_checkpoint(tmp_path / RUN_NAME).strategy
    assert checkpoint["roster"]["node-ids"][GONE] == str(back)
    assert outcome["nodes"] == NODES and outcome["left_out"] == {}


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["fedfw", "ffgb", "fedfun", "fedxgb-hist"])
def test_a_run_resumed_after_joins_and_leaves_continues_exactly(tmp_path, name):
    """A node left at round 3 and one joined at round 4 (``leaving`` with ``LATE`` absent
    from the start and joining at round 4); the ServerApp dies before round 5 and resumes
    from round 4's checkpoint, which holds the roster's tombstone and the new position."""

    def grid_of(config: dict, grid_class: type[LocalGrid]) -> LocalGrid:
        grid, _, _ = leaving(config, grid_class)
        grid.node_ids.remove(grid.partition_node(LATE))
        grid.join(LATE, from_round=4)
        return grid

    keys = {"leave-after": 2, "num-server-rounds": 6}
    whole = config_for(tmp_path / "whole", name, **keys)
    run(grid_of(whole, LocalGrid), server_context(whole))

    config = config_for(tmp_path / "resumed", name, **keys)
    crashing = grid_of(config, CrashingGrid)
    crashing.crash_at = 5
    with pytest.raises(ServerCrash):
        run(crashing, server_context(config))
    roster = read_checkpoint(tmp_path / "resumed" / RUN_NAME).strategy["roster"]
    assert [int(n) < 0 for n in roster["node-ids"]] == [False, True, False, False]
    crashing.crash_at = None
    for context in crashing.contexts.values():  # the resumed run is a new Flower run
        context.state = RecordDict()
    run(crashing, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    resumed, uninterrupted = (
        [{k: v for k, v in r.items() if k not in CLOCKS} for r in outcome_of(tmp_path / n)[0]]
        for n in ("resumed", "whole")
    )
    assert_resumed_equals(resumed, uninterrupted, after=4)


# -- brought up to date: each family's first message to a node that joined -----------------------
def _global_model(message) -> None:
    assert ARRAYS in message.content


def _held_vector(message) -> None:
    """FedFW's x_i, FedDR's x_hat_i: the node starts where the server put it (x-bar)."""
    assert message.content["config"]["sync"] != "none"


def _ensemble(message) -> None:
    assert message.content["delta"]["full"]


def _node_models(message) -> None:
    assert SETUP in message.content and BOUNDS in message.content


def _booster(message) -> None:
    assert {ARRAYS, LAYOUT, GROWING} <= set(message.content)


BROUGHT_UP_TO_DATE = {
    "fedavg": _global_model,
    "fedxgb-bagging": _global_model,
    "fedfw": _held_vector,
    "feddr": _held_vector,
    "ffgb": _ensemble,
    "ffgb-l": _ensemble,
    "fedfun": _node_models,
    "dfedavgm": _node_models,
    "fedxgb-hist": _booster,
}


# -- the roster alone -----------------------------------------------------------------------------
def test_the_roster_releases_an_absent_node_and_a_new_one_takes_the_partition_at_a_new_place():
    grid = AnsweringGrid({10: facts(0), 20: facts(1), 30: facts(2)})
    roster, _ = Roster.query(grid, "test", 1)
    admission = Admission(leave_after=2)
    grid.connected -= {20}
    assert roster.refresh(grid, "test", 2, admission) == (Changes(), 0)
    assert roster.absent == {20: 1}
    restored = Roster.from_record(roster.to_record())  # the count survives a checkpoint
    assert restored == roster
    assert restored.refresh(grid, "test", 3, admission) == (Changes(left=[20]), 0)
    assert restored.node_ids == [10, tombstone(1), 30] == [10, -2, 30]
    assert restored.active == [10, 30] and restored.vacant() == [1, 3]
    assert restored.facts[-2] == facts(1)  # kept, under the tombstone
    grid.answers[40], grid.connected = facts(1), grid.connected | {40}
    assert restored.refresh(grid, "test", 4, admission) == (Changes(joined=[40]), 0)
    assert restored.node_ids == [10, -2, 30, 40] and restored.vacant() == [3]
    # a claim the federation's size does not fit is left out, with the reason
    grid.answers[50], grid.connected = {**facts(3), "num-partitions": 5}, grid.connected | {50}
    assert restored.refresh(grid, "test", 5, admission)[0] == Changes()
    assert restored.left_out[50] == "it declares num-partitions=5, the federation's nodes 4"
    # the run keeps its last node, however long every node is away
    grid.connected = set()
    for server_round in (6, 7, 8):
        restored.refresh(grid, "test", server_round, admission)
    assert restored.active == [40]
