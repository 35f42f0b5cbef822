"""FedFW's compact downlink: nodes rebuild x-bar from the rounds' points, bit-identical to the
server's, over hundreds of rounds with partial participation; bytes; re-sync; the codec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from client_app.app import app as client_app
from client_app.fedfw_replica import STATE
from functions.errors import DecodeError
from functions.fedfw_downlink import (
    Replica,
    RoundPoints,
    header_through,
    pack_replica,
    pack_updates,
    unpack_replica,
    unpack_updates,
)
from functions.params import record_to_arrays
from functions.protocol import REPLICA_ARRAYS, UPDATE_ARRAYS, UPDATES, XBAR
from server_app.checkpoint import read_checkpoint
from server_app.results import CLOCKS
from tests.helpers import forgetting, run_app

BASE = {"task": "synthetic", "fedfw.participation": 0.5, "fedfw.constraint": "l1"}


def _without_bytes(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "bytes" not in k and k not in CLOCKS} for r in rows]


def _server_xbar(run) -> list[np.ndarray]:
    state = read_checkpoint(run.out_dir).strategy
    total = [a.numpy() for a in state["mirror-sum"].values()]
    return [t / len(run.grid.node_ids) for t in total]


def _node_xbar(run, node: int) -> list[np.ndarray]:
    arrays = {k: v.numpy() for k, v in run.grid.contexts[node].state[STATE].items()}
    total = [arrays[f"sum.{k}"] for k in range(sum(k.startswith("sum.") for k in arrays))]
    return [t / len(run.grid.node_ids) for t in total]


@pytest.mark.parametrize(
    ("algorithm", "evaluate"), [("fedfw", False), ("fedfw-plus", True), ("fedfw-sto", False)]
)
@pytest.mark.e2e
def test_nodes_hold_the_servers_xbar_bit_for_bit(tmp_path, algorithm, evaluate):
    overrides = {
        **BASE,
        "algorithm": algorithm,
        "num-server-rounds": 200,
        "fedfw.federated-eval": evaluate,
        "central-evaluation": False,
    }
    compact = run_app(tmp_path / "compact", 4, **overrides, **{"fedfw.downlink": "compact"})
    dense = run_app(tmp_path / "dense", 4, **overrides, **{"fedfw.downlink": "dense"})
    assert _without_bytes(compact.rows) == _without_bytes(dense.rows)
    server, checked = _server_xbar(compact), 0
    for node in compact.grid.node_ids:  # every node that saw round 200 (an evaluation did)
        if compact.grid.contexts[node].state.get("fedfw-replica.meta")["version"] == 200:
            checked += 1
            assert all(np.array_equal(a, b) for a, b in zip(_node_xbar(compact, node), server))
    # without evaluation a node's replica ends at its last train round (< 200): the rows above,
    # equal to the dense run's, are then the check that every node used the server's x-bar
    assert checked == (len(compact.grid.node_ids) if evaluate else 0)
    down = [r["bytes_down"] for r in compact.rows[1:]]
    assert sum(down) < sum(r["bytes_down"] for r in dense.rows[1:]) / 3


def test_a_hundred_nodes_hold_the_servers_xbar_bit_for_bit_with_partial_participation(tmp_path):
    """Issue 21's exactness pin: N = 100, half the nodes train each round, compact downlink;
    after the last round's evaluation every node's x-bar equals the server's bit for bit."""
    run = run_app(
        tmp_path,
        100,
        **{
            **BASE,
            "algorithm": "fedfw",
            "num-server-rounds": 6,
            "fedfw.federated-eval": True,
            "central-evaluation": False,
            "fedfw.downlink": "compact",
        },
    )
    assert all(r["failures"] == 0 and 0 < r["participants"] < 100 for r in run.rows[1:])
    server = _server_xbar(run)
    for node in run.grid.node_ids:
        assert run.grid.contexts[node].state.get("fedfw-replica.meta")["version"] == 6
        assert all(np.array_equal(a, b) for a, b in zip(_node_xbar(run, node), server))


def test_a_node_that_missed_rounds_gets_them_all_in_one_message(tmp_path):
    run = run_app(
        tmp_path,
        4,
        **{
            **BASE,
            "algorithm": "fedfw",
            "num-server-rounds": 12,
            "fedfw.federated-eval": False,
            "fedfw.downlink": "compact",
        },
    )
    spans = [  # a round's bitmap (ceil(4 / 8) = 1 B) for each round the message brings
        len(m.content[UPDATE_ARRAYS]["accepted"].numpy())
        for m in run.grid.down
        if UPDATES in m.content
    ]
    assert max(spans) >= 2 and all(r["failures"] == 0 for r in run.rows[1:])


def test_a_steady_l1_round_is_at_most_100_bytes_a_node(tmp_path):
    """10 nodes, full participation, the evaluation riding on training: from round 2 to the
    one before the last, a node's round is its train message (ten 4-byte vertices, a 2-byte
    bitmap, their 1-byte length, ``server-round``, ``evaluate-first``: 52 B) and its reply (its
    vertex and the five evaluation sums: 44 B); ``since``, ``rounds``, ``last-accepted``,
    ``sync`` and ``num-clients`` are implied."""
    run = run_app(
        tmp_path,
        10,
        **{"task": "synthetic", "algorithm": "fedfw", "fedfw.constraint": "l1"},
        **{"num-server-rounds": 4, "fedfw.downlink": "auto", "central-evaluation": False},
    )
    steady = [r for r in run.rows if 2 <= r["round"] < 4]
    assert [(r["bytes_down"], r["bytes_up"]) for r in steady] == [(10 * 52, 10 * 44)] * 2
    trains = [m.content["config"] for m in run.grid.down if m.metadata.group_id == "3"]
    assert {tuple(sorted(c)) for c in trains} == {("evaluate-first", "server-round")}


@pytest.mark.e2e
def test_a_node_that_lost_its_state_fails_once_and_is_resynced_once(tmp_path):
    """Full participation: the re-sync is x-bar (tests/fedfw/test_fedfw_mean.py); the mirror's, with
    partial participation, is tests/membership/test_returning_node.py's."""
    overrides = {**BASE, "algorithm": "fedfw", "num-server-rounds": 6, "fedfw.participation": 1.0}
    compact = run_app(
        tmp_path / "compact",
        4,
        None,
        forgetting(client_app, 2, 4),
        **overrides,
        **{"fedfw.downlink": "compact"},
    )
    dense = run_app(
        tmp_path / "dense",
        4,
        None,
        forgetting(client_app, 2, 4),
        **overrides,
        **{"fedfw.downlink": "dense"},
    )
    # round 4's lost reply takes round 3's evaluation, which rode on it, with it
    assert [r["failures"] for r in compact.rows[1:]] == [0, 0, 1, 1, 0, 0]
    assert _without_bytes(compact.rows) == _without_bytes(dense.rows)
    node = compact.grid.node_ids[2]
    assert (
        sum(
            REPLICA_ARRAYS in m.content for m in compact.grid.down if m.metadata.dst_node_id == node
        )
        == 1
    )


@pytest.mark.parametrize(
    ("constraint", "clients", "compact"),
    [
        ("l1", 10, True),
        pytest.param("l1", 100, True, marks=pytest.mark.e2e),
        ("box", 10, True),
        ("l2", 10, False),
        ("nuclear", 2, True),
        ("nuclear", 10, False),
    ],
)
def test_auto_sends_points_only_where_they_are_smaller(tmp_path, constraint, clients, compact):
    run = run_app(
        tmp_path,
        clients,
        **{
            "algorithm": "fedfw",
            "task": "synthetic",
            "fedfw.constraint": constraint,
            "num-server-rounds": 2,
            "fedfw.federated-eval": False,
        },
    )
    later = [
        m
        for m in run.grid.down
        if m.metadata.message_type == "train" and m.content["config"]["server-round"] == 2
    ]
    assert all((XBAR not in m.content) == compact for m in later)


# -- the codec ------------------------------------------------------------------------------------
ETAS = {2: 0.5, 5: 0.25, 9: 0.125}


def _updates() -> list[RoundPoints]:
    point = {"vertex": np.array([7], np.uint16)}
    return [RoundPoints(2, 0.5, ((0, point), (2, point))), RoundPoints(5, 0.25, ((1, point),))]


def test_updates_round_trip():
    config, arrays = pack_updates(1, _updates(), 3)
    assert sorted(config) == ["rounds", "since"]  # eta_t comes from the schedule on both sides
    assert arrays["accepted"].tolist() == [0b10100000, 0b01000000]
    assert sorted(arrays) == [
        "0.vertex",
        "0.vertex.len",
        "1.vertex",
        "1.vertex.len",
        "accepted",
    ]  # two arrays a field and round, not one a point
    assert arrays["0.vertex.len"].tolist() == [1] and arrays["0.vertex.len"].dtype == np.uint8
    since, updates = unpack_updates(config, arrays, 3, ETAS.get)
    assert since == 1 and [(u.round, u.eta, [i for i, _ in u.points]) for u in updates] == [
        (2, 0.5, [0, 2]),
        (5, 0.25, [1]),
    ]
    assert all(
        p["vertex"].tolist() == [7] and p["vertex"].dtype == np.uint16
        for u in updates
        for _, p in u.points
    )


def test_the_header_is_left_out_only_when_the_node_can_derive_it():
    """Rounds 4 and 5 after version 3, to a message that brings x-bar to round 5: the header is
    implied by the two bitmaps; a gap (round 2, then 5) or another round brought keeps it."""
    point = {"vertex": np.array([7], np.uint16)}
    steady = [RoundPoints(r, 0.5, ((0, point), (1, point))) for r in (4, 5)]
    config, arrays = pack_updates(3, steady, 9, through=5)
    assert config == {}
    since, updates = unpack_updates(config, arrays, 9, lambda r: 0.5, through=5)
    assert since == 3 and [u.round for u in updates] == [4, 5]
    assert pack_updates(3, steady, 9, through=6)[0] == {"since": 3, "rounds": [4, 5]}
    assert pack_updates(1, _updates(), 3, through=5)[0] == {"since": 1, "rounds": [2, 5]}
    assert pack_updates(5, [], 9, through=5)[0] == {}  # up to date: nothing to apply
    assert unpack_updates({}, {"accepted": np.zeros(0, np.uint8)}, 9, ETAS.get, 5) == (5, [])
    with pytest.raises(DecodeError, match="bitmaps"):  # a bitmap and a half: no round count
        unpack_updates({}, {**arrays, "accepted": arrays["accepted"][:3]}, 9, ETAS.get, 5)
    with pytest.raises(DecodeError, match="header"):  # the header is only implied to a node
        unpack_updates({}, arrays, 9, ETAS.get)


def test_points_of_other_fields_share_a_round():
    """Nodes with other D_i (an l1 vertex, a box's bits) in one round: each gets its own."""
    mixed = [
        RoundPoints(
            3,
            0.5,
            (
                (0, {"vertex": np.array([4, 9], np.uint16)}),
                (1, {"bits": np.array([5], np.uint8)}),
                (2, {"vertex": np.array([1, 2], np.uint16)}),
            ),
        )
    ]
    config, arrays = pack_updates(2, mixed, 3)
    assert arrays["0.vertex.len"].tolist() == [2, 0, 2]  # per point where not all have it
    _, (update,) = unpack_updates(config, arrays, 3, {3: 0.5}.get)
    assert [(i, {k: v.tolist() for k, v in p.items()}) for i, p in update.points] == [
        (0, {"vertex": [4, 9]}),
        (1, {"bits": [5]}),
        (2, {"vertex": [1, 2]}),
    ]


@pytest.mark.parametrize("nodes", [(2, 0), (1, 1), (0, 3)])
def test_points_out_of_roster_order_are_not_packed(nodes):
    point = {"vertex": np.array([7], np.uint16)}
    with pytest.raises(ValueError, match="roster order"):
        pack_updates(1, [RoundPoints(2, 0.5, tuple((i, point) for i in nodes))], 3)


@pytest.mark.parametrize(
    "change",
    [
        lambda c, a: c.update(rounds=[2, 2]),
        lambda c, a: c.update(since=3),
        lambda c, a: c.update(rounds=[2, 5, 9]),
        lambda c, a: a.update(accepted=np.array([0b10110000, 0b01000000], np.uint8)),
        lambda c, a: a.update(accepted=np.array([0b10100000, 0b01010000], np.uint8)),
        lambda c, a: a.update(accepted=a["accepted"].view(np.int8)),
        lambda c, a: a.update(accepted=np.array([0b10100000], np.uint8)),
        lambda c, a: a.pop("accepted"),
        lambda c, a: a.pop("1.vertex"),
        lambda c, a: a.pop("0.vertex.len"),
        lambda c, a: a.update({"9.vertex": np.array([1], np.uint16)}),
        lambda c, a: a.update({"0.vertex.len": np.array([1, 2], np.uint8)}),
        lambda c, a: a.update({"0.vertex.len": np.array([2, 0], np.uint8)}),
        lambda c, a: a.update({"0.vertex.len": np.array([2], np.uint8)}),
        lambda c, a: a.update({"0.vertex.len": np.array([1, 1], np.int8)}),
        lambda c, a: a.update({"0.vertex.len": np.array([1, 1], np.uint64)}),
        lambda c, a: a.update({"0.vertex.len": np.array([1, 1, 0], np.uint8)}),
        lambda c, a: a.update({"1.vertex": np.array([[7]], np.uint16)}),
        lambda c, a: a.update({"junk": np.array([1])}),
        lambda c, a: c.pop("rounds"),
    ],
)
def test_malformed_updates_are_refused(change):
    config, arrays = pack_updates(1, _updates(), 3)
    change(config, arrays)
    with pytest.raises(DecodeError):
        unpack_updates(config, arrays, 3, ETAS.get)


MUTATIONS = {  # a declared field of one packed array: its dtype, shape or count
    "dtype": lambda a: a.astype(np.int64 if a.dtype.kind == "u" else np.uint32),
    "signed": lambda a: a.astype(np.int8),
    "2-D": lambda a: a.reshape(1, -1),
    "shorter": lambda a: a[:-1],
    "longer": lambda a: np.concatenate([a, a[:1]]),
    "empty": lambda a: a[:0],
    "counts + 1": lambda a: a + 1,  # on the lengths and the bitmaps only (below)
}


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(["0.vertex", "0.vertex.len", "1.vertex", "1.vertex.len", "accepted"]),
    mutation=st.sampled_from(sorted(MUTATIONS)),
)
def test_a_mutated_declared_field_decodes_to_the_same_points_or_is_refused(key, mutation):
    """Any one packed array with another dtype, shape or count: the updates either decode to
    exactly the packed points (the change said nothing) or raise DecodeError, never anything
    else and never other points."""
    assume(mutation != "counts + 1" or key.endswith((".len", "accepted")))  # not the points
    config, arrays = pack_updates(1, _updates(), 3)
    arrays[key] = MUTATIONS[mutation](arrays[key])
    try:
        since, updates = unpack_updates(config, arrays, 3, ETAS.get)
    except DecodeError:
        return
    assert since == 1 and [
        (u.round, [(i, p["vertex"].tolist()) for i, p in u.points]) for u in updates
    ] == [(2, [(0, [7]), (2, [7])]), (5, [(1, [7])])]


def test_a_replica_round_trips_and_refuses_wrong_arrays():
    shapes = [(2, 3), (3,)]
    points = tuple([np.full(s, float(i)) for s in shapes] for i in range(2))
    replica = Replica(4, ("l1", "l2"), (1.0, 2.0), points, [np.ones(s) for s in shapes])
    config, arrays = pack_replica(replica)
    again = unpack_replica(config, arrays, shapes)
    assert again.version == 4 and again.kinds == ("l1", "l2")
    assert all(np.array_equal(a, b) for a, b in zip(again.points[1], points[1]))
    for bad in (
        {**arrays, "x.0.0": arrays["x.0.0"].astype(np.float32)},
        {**arrays, "sum.1": np.full(3, np.nan)},
        {k: v for k, v in arrays.items() if k != "x.1.1"},
    ):
        with pytest.raises(DecodeError):
            unpack_replica(config, bad, shapes)


@pytest.mark.e2e
def test_a_hundred_nodes_hold_the_servers_xbar_and_share_each_rounds_updates(tmp_path):
    """N = 100, half of them a round: after the last round's evaluation every node holds the
    server's x-bar bit for bit, and the train messages of a round that need the same rounds
    share one packed copy (packed once per version held, not once per message)."""
    run = run_app(
        tmp_path,
        100,
        **{
            **BASE,
            "algorithm": "fedfw",
            "num-server-rounds": 4,
            "fedfw.federated-eval": True,
            "central-evaluation": False,
            "fedfw.downlink": "compact",
        },
    )
    server, last = _server_xbar(run), 0
    for node in run.grid.node_ids:
        meta = run.grid.contexts[node].state.get("fedfw-replica.meta")
        if meta is not None and meta["version"] == 4:
            last += 1
            assert all(np.array_equal(a, b) for a, b in zip(_node_xbar(run, node), server))
    assert last == 100
    for server_round in range(2, 5):
        sent = [
            m.content
            for m in run.grid.down
            if UPDATES in m.content
            and m.metadata.message_type == "train"
            and m.metadata.group_id == str(server_round)
        ]
        versions = {
            unpack_updates(
                dict(c[UPDATES]),
                record_to_arrays(c[UPDATE_ARRAYS]),
                100,
                lambda r: 1.0,
                header_through("train", server_round),
            )[0]
            for c in sent
        }
        assert len(sent) > len(versions) and len({id(c[UPDATES]) for c in sent}) == len(versions)
