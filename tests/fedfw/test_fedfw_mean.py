"""FedFW with full participation: x-bar follows Algorithm 1's recursion from each round's mean
point, on the server and on every node, bit for bit; a node then holds x-bar alone (O(model)),
under the compact downlink as under the dense one."""

from __future__ import annotations

import numpy as np
import pytest

from client_app.app import app as client_app
from client_app.fedfw_mean import META, STATE
from client_app.fedfw_replica import META as REPLICA_META
from functions.errors import DecodeError
from functions.extreme_points import decode_model_point, encode_model_point
from functions.fedfw_downlink import (
    PackedRound,
    RosterSets,
    RoundPoints,
    pack_updates,
    sum_round,
    unpack_rounds,
)
from functions.protocol import FW_POINT, REPLICA_ARRAYS, UPDATES
from oracles.lmo import Constraint, lmo_per_tensor
from server_app.checkpoint import read_checkpoint
from server_app.results import CLOCKS
from tests.helpers import forgetting, run_app

FULL = {
    "algorithm": "fedfw",
    "task": "synthetic",
    "fedfw.constraint": "l1",
    "central-evaluation": False,
}
SHAPES = [(6, 5), (5,), (1,)]


def _without_bytes(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "bytes" not in k and k not in CLOCKS} for r in rows]


def _server_xbar(run) -> list[np.ndarray]:
    return [a.numpy() for a in read_checkpoint(run.out_dir).strategy["xbar"].values()]


def _node_xbar(run, node: int) -> list[np.ndarray]:
    arrays = run.grid.contexts[node].state[STATE]
    return [arrays[f"xbar.{k}"].numpy() for k in range(len(arrays))]


def _state_size(run, node: int) -> int:
    """A node's persistent state: array bytes, plus one per config value (a list: its length)."""
    size = 0
    for record in run.grid.contexts[node].state.values():  # ArrayRecords and ConfigRecords
        for value in record.values():
            if hasattr(value, "numpy"):
                size += value.numpy().nbytes
            else:
                size += len(value) if isinstance(value, list) else 1
    return size


# -- the shared sum of a round's points -------------------------------------------------------
def _points(kind: str, radii: list[float], scope: str, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        encode_model_point(
            Constraint(kind, r),
            lmo_per_tensor(Constraint(kind, r), [rng.normal(size=s) for s in SHAPES], scope),
            scope,
        )
        for r in radii
    ]


def _round(points: list[dict[str, np.ndarray]]) -> PackedRound:
    """The round's points packed and unpacked as a node receives them."""
    config, arrays = pack_updates(0, [RoundPoints(1, 0.5, tuple(enumerate(points)))], len(points))
    return unpack_rounds(config, arrays, len(points), {1: 0.5}.get)[1][0]


@pytest.mark.parametrize(
    ("kind", "scope"),
    [
        ("l1", "per-tensor"),
        ("l1", "global"),
        ("simplex", "per-tensor"),
        ("simplex", "global"),
        ("box", "per-tensor"),
        ("box", "global"),
        ("nuclear", "per-tensor"),
    ],
)
def test_a_rounds_points_sum_as_one_by_one_in_roster_order(kind, scope):
    """Decoded all at once (l1, simplex) or one by one, the sum is the sequential sum of the
    decoded points in roster order, bit for bit; radii may differ between nodes."""
    radii = [0.5, 3.0, 3.0, 7.25, 1e-3, 3.0] * 20
    sets = [Constraint(kind, r) for r in radii]
    points = _points(kind, radii, scope, seed=1)
    expected = [np.zeros(s) for s in SHAPES]
    for ball, arrays in zip(sets, points):
        for total, s in zip(expected, decode_model_point(ball, arrays, SHAPES, scope)):
            total += s
    got = sum_round(RosterSets.of(sets), _round(points), SHAPES, scope)
    assert all(np.array_equal(a, b) and a.dtype == np.float64 for a, b in zip(got, expected))
    assert RosterSets.of(sets).members.tolist() == [0, 1, 1, 2, 3, 1] * 20


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p.update(vertex=p["vertex"].astype(np.uint32)),
        lambda p: p.update(vertex=p["vertex"][:1]),
        lambda p: p.update(vertex=np.array([60, 0, 0], np.uint8)),  # 2 * 30 codes in tensor 0
        lambda p: p.update(index=p.pop("vertex")),
    ],
)
def test_a_bad_point_among_the_round_is_refused(change):
    points = _points("l1", [1.0] * 3, "per-tensor", seed=2)
    change(points[1])
    with pytest.raises(DecodeError):
        sum_round(RosterSets.of([Constraint("l1", 1.0)] * 3), _round(points), SHAPES, "per-tensor")


def test_a_round_without_every_nodes_point_is_refused():
    points = _points("l1", [1.0] * 3, "per-tensor", seed=2)
    config, arrays = pack_updates(0, [RoundPoints(1, 0.5, ((0, points[0]), (2, points[2])))], 3)
    (update,) = unpack_rounds(config, arrays, 3, {1: 0.5}.get)[1]
    with pytest.raises(DecodeError, match="every node's"):
        sum_round(RosterSets.of([Constraint("l1", 1.0)] * 3), update, SHAPES, "per-tensor")


# -- end to end ------------------------------------------------------------------------------
def test_the_servers_xbar_is_the_recursion_from_each_rounds_mean_point(tmp_path):
    """x-bar^{t+1} = (1 - eta_t) x-bar^t + eta_t ((sum_i s_i) / n): the points as the nodes sent
    them, decoded and added in roster order, then one ``apply_step`` (the order both sides use;
    the mirror's running sum of x_i rounds differently)."""
    sent: dict[int, dict[int, dict[str, np.ndarray]]] = {}  # round -> partition -> s_i

    def recording(message, context):
        reply = client_app(message, context)
        if message.metadata.message_type == "train":
            sent.setdefault(int(message.metadata.group_id), {})[
                context.node_config["partition-id"]
            ] = {k: v.numpy() for k, v in reply.content[FW_POINT].items()}
        return reply

    run = run_app(
        tmp_path,
        7,
        None,
        recording,
        **FULL,
        **{"num-server-rounds": 4, "fedfw.downlink": "dense", "fedfw.federated-eval": False},
    )
    strategy = read_checkpoint(run.out_dir).strategy
    mirror = [a.numpy() / 7 for a in strategy["mirror-sum"].values()]
    first = next(m for m in run.grid.down if m.metadata.message_type == "train")
    xbar = [a.numpy().astype(np.float64) for a in first.content["xbar"].values()]
    shapes = [a.shape for a in xbar]
    for t, eta in zip(range(1, 5), [r["eta"] for r in run.rows[1:]]):
        total = [np.zeros(s) for s in shapes]
        for partition in range(7):  # the roster's order
            for k, s in enumerate(
                decode_model_point(Constraint("l1", 10.0), sent[t][partition], shapes, "per-tensor")
            ):
                total[k] += s
        xbar = [(1.0 - eta) * x + eta * (s / 7) for x, s in zip(xbar, total)]
    assert all(np.array_equal(a, b) for a, b in zip(_server_xbar(run), xbar))
    assert not all(np.array_equal(a, b) for a, b in zip(mirror, xbar))  # the order matters


@pytest.mark.e2e
def test_a_hundred_nodes_follow_the_servers_xbar_holding_no_replica(tmp_path):
    """N = 100, every node every round, compact downlink: each node holds x-bar alone, equal
    to the server's bit for bit, and every round's figures equal the dense run's."""
    overrides = {**FULL, "num-server-rounds": 4, "fedfw.federated-eval": True}
    compact = run_app(tmp_path / "compact", 100, **overrides, **{"fedfw.downlink": "compact"})
    dense = run_app(tmp_path / "dense", 100, **overrides, **{"fedfw.downlink": "dense"})
    assert _without_bytes(compact.rows) == _without_bytes(dense.rows)
    assert all(r["participants"] == 100 and r["failures"] == 0 for r in compact.rows[1:])
    server = _server_xbar(compact)
    for node in compact.grid.node_ids:
        state = compact.grid.contexts[node].state
        assert REPLICA_META not in state and state[META]["version"] == 4
        assert all(np.array_equal(a, b) for a, b in zip(_node_xbar(compact, node), server))
    later = [m for m in compact.grid.down if m.metadata.group_id != "1"]
    assert later and all(REPLICA_ARRAYS not in m.content for m in later)


@pytest.mark.e2e
@pytest.mark.parametrize("downlink", ["compact", "dense"])
def test_a_nodes_state_does_not_grow_with_the_nodes(tmp_path, downlink):
    """The same per-node state at N = 10 and N = 100 (x_i and pending x_i, and x-bar under the
    compact downlink): O(model), not the N-model replica."""
    sizes = set()
    for nodes in (10, 100):
        run = run_app(
            tmp_path / str(nodes),
            nodes,
            **FULL,
            **{"num-server-rounds": 2, "fedfw.federated-eval": False, "fedfw.downlink": downlink},
        )
        sizes |= {_state_size(run, node) for node in run.grid.node_ids}
        assert all(
            (META in run.grid.contexts[n].state) == (downlink == "compact")
            for n in run.grid.node_ids
        )
    model = 8 * (60 * 10 + 10)
    assert len(sizes) == 1 and sizes.pop() < 4 * model


def test_a_node_that_lost_its_xbar_fails_once_and_gets_xbar(tmp_path):
    """Node 2 forgets everything before round 4's train message: that round is not full, so
    x-bar is the mirror's mean and every node is re-synced with x-bar (one model in float64,
    never the mirror), then follows the recursion again; the rows equal the dense run's."""
    overrides = {**FULL, "num-server-rounds": 6, "fedfw.federated-eval": True}
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
    resyncs = [m for m in compact.grid.down if REPLICA_ARRAYS in m.content]
    assert sorted(m.metadata.dst_node_id for m in resyncs) == sorted(compact.grid.node_ids)
    assert all(sorted(m.content[REPLICA_ARRAYS]) == ["xbar.0", "xbar.1"] for m in resyncs)
    assert all(UPDATES in m.content for m in compact.grid.down if m.metadata.group_id == "6")
    server = _server_xbar(compact)
    assert all(
        np.array_equal(a, b)
        for node in compact.grid.node_ids
        for a, b in zip(_node_xbar(compact, node), server)
    )
