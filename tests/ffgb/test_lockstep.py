"""Nodes in lockstep, their fits made together (``oracles.lockstep``, issue 37): the scheduler's
order and errors, the stacked MLP fit against fits made alone, and whole runs of the in-process
engine with ``together`` against runs without it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from functions.networks import NetworkSpec
from oracles import mlp_least_squares
from oracles.lockstep import Lockstep, ask
from oracles.weak_learning import minibatches, new_network
from tests.helpers import run_app

RNG = np.random.default_rng(5)
SPEC = NetworkSpec((12, 16, 16, 3), "leaky_relu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# -- the scheduler --------------------------------------------------------------------------
def test_tasks_run_one_at_a_time_in_order_and_their_asks_are_carried_out_together():
    trace, calls = [], []

    def task(i: int):
        def run() -> int:
            trace.append((i, "before"))
            ask("fit", i, lambda requests: calls.append(list(requests)))
            trace.append((i, "after"))
            return 10 * i

        return run

    assert Lockstep().run([task(i) for i in range(3)]) == [0, 10, 20]
    assert trace == [(i, "before") for i in range(3)] + [(i, "after") for i in range(3)]
    assert calls == [[0, 1, 2]]


def test_groups_are_carried_out_apart_in_order_of_first_ask_and_tasks_may_ask_unequally():
    calls = []

    def carry(requests: list) -> None:
        calls.append(list(requests))

    def task(asks: list[str]):
        def run() -> None:
            for group in asks:
                ask(group, (group, len(calls)), carry)

        return run

    Lockstep().run([task(["b", "a"]), task(["a"]), task(["b", "b", "b"])])
    assert calls == [
        [("b", 0), ("b", 0)],  # sweep 1: b asked first (task 0), then a (task 1)
        [("a", 0)],
        [("a", 2)],  # sweep 2: task 0's a and task 2's b; task 1 is done
        [("b", 2)],
        [("b", 4)],  # sweep 3: task 2 alone
    ]


def test_outside_a_lockstep_run_a_fit_is_carried_out_at_once_alone():
    calls = []
    ask("fit", 7, lambda requests: calls.append(list(requests)))
    assert calls == [[7]]


def test_a_failed_group_fails_each_of_its_tasks_where_it_asked_and_the_others_go_on():
    outcomes = {}

    def broken(requests: list) -> None:
        raise ValueError("no fit")

    def task(i: int, group: str):
        def run() -> str:
            try:
                ask(group, i, broken if group == "bad" else lambda requests: None)
            except ValueError as err:
                outcomes[i] = str(err)
                return "failed"
            outcomes[i] = "fitted"
            return "ok"

        return run

    assert Lockstep().run([task(0, "bad"), task(1, "good"), task(2, "bad")]) == [
        "failed",
        "ok",
        "failed",
    ]
    assert outcomes == {0: "no fit", 1: "fitted", 2: "no fit"}


def test_a_task_that_raises_raises_from_run_after_every_task_ended():
    finished = []

    def bad() -> None:
        raise KeyError("node 0")

    def good() -> None:
        ask("fit", 1, lambda requests: None)
        finished.append(1)

    with pytest.raises(KeyError, match="node 0"):
        Lockstep().run([bad, good])
    assert finished == [1]


# -- the stacked MLP fit ----------------------------------------------------------------------
def _problems(counts: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for n in counts:
        x = RNG.normal(size=(n, 12)).astype(np.float32)
        target = RNG.normal(size=(n, 3)).astype(np.float32)
        out.append((torch.as_tensor(x), torch.as_tensor(target)))
    out[1][0][:, 4] = 0.0  # a column one node lacks
    for x, _ in out:
        x[:, 9] = 0.0  # and one no node has
    return out


@pytest.mark.parametrize(
    "loss", [mlp_least_squares.mean_squares_gradient, mlp_least_squares.smooth_max_gradient(8.0)]
)
def test_stacked_fits_end_where_fits_alone_end(monkeypatch, loss):
    problems = _problems((70, 55, 40))
    networks = [new_network(SPEC, seed) for seed in range(3)]
    alone, together = copy.deepcopy(networks), copy.deepcopy(networks)
    stacked = []
    monkeypatch.setattr(
        mlp_least_squares,
        "_fit_stacked",
        lambda fits, real=mlp_least_squares._fit_stacked: (stacked.append(len(fits)), real(fits)),
    )

    def fit(network, i: int) -> None:
        x, target = problems[i]
        batches = minibatches(len(x), 16, 60, np.random.default_rng(i))
        mlp_least_squares.fit_mlp_least_squares(
            network, "leaky_relu", x, target, batches, 0.01, loss
        )

    for i, network in enumerate(alone):
        fit(network, i)
    assert stacked == []
    Lockstep().run([lambda i=i: fit(together[i], i) for i in range(3)])
    assert stacked == [3]
    for a, b, start in zip(alone, together, networks, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)
        first = [next(net.parameters())[:, 9] for net in (a, b, start)]
        assert torch.equal(first[0], first[2]) and torch.equal(first[1], first[2])
    moved = next(together[1].parameters())[:, 4]
    assert torch.equal(moved, next(networks[1].parameters())[:, 4])  # no data, no step


def test_fits_that_differ_in_steps_or_loss_are_not_stacked(monkeypatch):
    problems = _problems((30, 30, 30))
    stacked = []
    monkeypatch.setattr(mlp_least_squares, "_fit_stacked", lambda fits: stacked.append(len(fits)))
    networks = [new_network(SPEC, seed) for seed in range(3)]
    settings = [(20, mlp_least_squares.mean_squares_gradient), (25, None), (20, None)]
    settings[1] = (25, mlp_least_squares.mean_squares_gradient)
    settings[2] = (20, mlp_least_squares.smooth_max_gradient(4.0))

    def fit(i: int) -> None:
        steps, loss = settings[i]
        x, target = problems[i]
        mlp_least_squares.fit_mlp_least_squares(
            networks[i], "leaky_relu", x, target, minibatches(30, 8, steps, RNG), 0.01, loss
        )

    Lockstep().run([lambda i=i: fit(i) for i in range(3)])
    assert stacked == []  # three groups of one: each fitted alone


def test_stacked_fits_in_the_graphs_form_on_the_cpu_equal_the_eager_stacked_fits(monkeypatch):
    problems = _problems((50, 50))

    def fitted() -> list[torch.nn.Module]:
        networks = [new_network(SPEC, seed) for seed in range(2)]

        def fit(i: int) -> None:
            x, target = problems[i]
            batches = minibatches(50, 16, 40, np.random.default_rng(i))
            mlp_least_squares.fit_mlp_least_squares(
                networks[i], "leaky_relu", x, target, batches, 0.01
            )

        Lockstep().run([lambda i=i: fit(i) for i in range(2)])
        return networks

    eager = fitted()
    monkeypatch.setattr(mlp_least_squares, "graphs_on", lambda device: True)
    tables = fitted()
    for a, b in zip(eager, tables, strict=True):
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)


@needs_cuda
def test_on_a_gpu_stacked_replayed_fits_end_where_fits_alone_end():
    cuda = torch.device("cuda")
    problems = [(x.to(cuda), t.to(cuda)) for x, t in _problems((300, 260, 200))]
    networks = [new_network(SPEC, seed).to(cuda) for seed in range(3)]
    alone, together = copy.deepcopy(networks), copy.deepcopy(networks)

    def fit(network, i: int) -> None:
        x, target = problems[i]
        batches = minibatches(len(x), 64, 200, np.random.default_rng(i))
        mlp_least_squares.fit_mlp_least_squares(network, "leaky_relu", x, target, batches, 0.005)

    for i, network in enumerate(alone):
        fit(network, i)
    Lockstep().run([lambda i=i: fit(together[i], i) for i in range(3)])
    with torch.no_grad():  # their values, as test_graphed_steps compares a replay with eager
        for i, (a, b) in enumerate(zip(alone, together, strict=True)):
            x = problems[i][0]
            assert torch.allclose(a(x), b(x), rtol=1e-3, atol=1e-4)


# -- whole runs through the apps ---------------------------------------------------------------
QUICK = {"ffgb.oracle-steps": 60, "num-server-rounds": 2}


@pytest.mark.parametrize("algorithm", ["ffgb", "ffgb-c"])
def test_a_run_with_its_nodes_in_lockstep_has_the_rows_of_a_run_without(
    tmp_path, monkeypatch, algorithm
):
    stacked = []
    monkeypatch.setattr(
        mlp_least_squares,
        "_fit_stacked",
        lambda fits, real=mlp_least_squares._fit_stacked: (stacked.append(len(fits)), real(fits)),
    )
    config = {"algorithm": algorithm, **QUICK}
    alone = run_app(tmp_path / "alone", **config).rows
    assert stacked == []
    together = run_app(tmp_path / "together", together=4, **config).rows
    assert stacked and set(stacked) == {4}  # every fit of every round made with the others'
    _same_rows(alone, together)


def _same_rows(alone: list[dict], together: list[dict]) -> None:
    """Equal rows to float rounding, but for the clocks."""
    assert len(alone) == len(together)
    for a, b in zip(alone, together, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            if "time" in key:
                continue
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
            else:
                assert b[key] == value, key


def test_a_node_that_fails_in_lockstep_is_a_failure_of_its_own(tmp_path):
    nodes = [{}, {"device": "cuda:7"}, {}, {}]  # node 1 has no such device: its replies fail
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    alone = run_app(tmp_path / "alone", node_configs=nodes, **QUICK).rows
    together = run_app(tmp_path / "together", node_configs=nodes, together=4, **QUICK).rows
    assert together[1]["failures"] == 1  # round 1: node 1 (then left out by the server)
    _same_rows(alone, together)
