"""Training steps in the form a CUDA graph replays (``oracles.graphed_steps``): step inputs drawn
beforehand into tables, read through a device counter. On the CPU that form runs eagerly, so
these tests check that it computes what the eager loops compute, for every oracle that uses it;
on a CUDA machine the last tests check the replayed graphs themselves against the eager GPU loop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from functions.convnets import ConvNetSpec
from functions.networks import NetworkSpec, build
from oracles import decentralized, graphed_steps, mlp_least_squares, weak_learning
from oracles.decentralized import adam_train, distill, momentum_sgd_train, psr_train
from oracles.fsr_network import Anchor, fsr_train
from oracles.graphed_steps import run_steps
from oracles.weak_learning import OracleSettings, fit_least_squares, fit_sobolev, fit_sup_norm
from tests.helpers import DEVICE_CASES as CASES
from tests.helpers import DEVICE_LOSS as LOSS
from tests.helpers import run_app

RNG = np.random.default_rng(0)
X = RNG.normal(size=(90, 6)).astype(np.float32)
TARGET = RNG.normal(size=(90, 3))
SPEC = NetworkSpec((6, 16, 16, 3), "leaky_relu")
SETTINGS = OracleSettings(steps=40, lr=0.01, batch_size=16, sup_p=8.0)
IMAGES = RNG.normal(size=(40, 144)).astype(np.float32)
CUDA = torch.device("cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def tables_on_the_cpu(monkeypatch):
    """Every oracle takes its graph form (tables and counter), run eagerly on the CPU."""
    for module in (mlp_least_squares, weak_learning, decentralized):
        monkeypatch.setattr(module, "graphs_on", lambda device: True)
    return monkeypatch


def _parameters(module: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().cpu().numpy() for p in module.parameters()]


def _close(a: list[np.ndarray], b: list[np.ndarray], tol: float = 1e-5) -> bool:
    return all(np.allclose(u, v, rtol=tol, atol=tol) for u, v in zip(a, b, strict=True))


def test_run_steps_gives_each_step_its_own_rows_in_order():
    tables = [torch.arange(12).reshape(6, 2), torch.arange(6.0)]
    seen = []
    run_steps(lambda row: seen.append([r.tolist() for r in row]), tables)
    assert seen == [[[2 * t, 2 * t + 1], float(t)] for t in range(6)]
    with pytest.raises(ValueError, match="one row per step"):
        run_steps(lambda row: None, [torch.zeros(3), torch.zeros(4)])


def test_graphs_are_for_cuda_devices_and_can_be_turned_off(monkeypatch):
    assert not graphed_steps.graphs_on(torch.device("cpu"))
    assert graphed_steps.graphs_on(CUDA)
    monkeypatch.setenv(graphed_steps.ENV, "0")
    assert not graphed_steps.graphs_on(CUDA)


@pytest.mark.parametrize("fit", [fit_least_squares, fit_sup_norm])
@pytest.mark.parametrize("fast", [True, False])
def test_the_weak_learning_oracles_table_form_is_their_eager_loop(fit, fast, monkeypatch):
    eager = fit(SPEC, X, TARGET, SETTINGS, seed=3, fast=fast)
    for module in (mlp_least_squares, weak_learning):
        monkeypatch.setattr(module, "graphs_on", lambda device: True)
    tabled = fit(SPEC, X, TARGET, SETTINGS, seed=3, fast=fast)
    assert _close(_parameters(eager.learner), _parameters(tabled.learner))
    assert np.allclose(eager.values, tabled.values, rtol=1e-5, atol=1e-5)


POINTS = RNG.uniform(-1, 1, size=(70, 6))
POINTS_JACOBIAN = RNG.normal(size=(70, 3, 6))


def _sobolev(settings: OracleSettings, device: torch.device = torch.device("cpu")):
    return fit_sobolev(SPEC, X, TARGET, POINTS, POINTS_JACOBIAN, settings, 2, device)


def test_the_sobolev_oracles_table_form_is_its_eager_loop(monkeypatch):
    """FFGB.L's WO-lip: both index streams (the data's rows, the Jacobian's points) drawn
    before the steps, in the order the eager loop draws them; its double backward in the step."""
    eager = _sobolev(SETTINGS)
    monkeypatch.setattr(weak_learning, "graphs_on", lambda device: True)
    tabled = _sobolev(SETTINGS)
    assert _close(_parameters(eager.learner), _parameters(tabled.learner))
    assert np.allclose(eager.values, tabled.values, rtol=1e-5, atol=1e-5)


def test_a_cnn_learners_table_form_is_its_eager_loop(monkeypatch):
    spec = ConvNetSpec((1, 12, 12), 3, channels=(2, 3), kernel=3, hidden=(8,))
    settings = OracleSettings(steps=12, lr=0.01, batch_size=8)
    eager = fit_least_squares(spec, IMAGES, TARGET[:40], settings, seed=1)
    monkeypatch.setattr(weak_learning, "graphs_on", lambda device: True)
    tabled = fit_least_squares(spec, IMAGES, TARGET[:40], settings, seed=1)
    assert _close(_parameters(eager.learner), _parameters(tabled.learner))


CUBE = RNG.uniform(size=(50, 4)).astype(np.float32)
ONE_HOT = np.eye(2, dtype=np.float32)[np.arange(50) % 2]


def _fsr(anchors: list[Anchor]) -> tuple[float, list[np.ndarray]]:
    torch.manual_seed(0)
    model = build(NetworkSpec((4, 8, 2), "tanh"))
    x, y = torch.as_tensor(CUBE), torch.as_tensor(ONE_HOT)
    loss = fsr_train(model, x, y, anchors, 25, 0.05, 16, 30, 0.01, torch.Generator().manual_seed(4))
    return loss, _parameters(model)


def _anchor(weight: float = 0.5, seed: int = 1) -> Anchor:
    torch.manual_seed(seed)
    teacher = build(NetworkSpec((4, 8, 2), "tanh"))
    return Anchor(weight, lambda z: teacher(z), replayable=True)


@pytest.mark.parametrize("weights", [(0.5, 0.2, 1.5), (0.5,), (0.0,), ()])
def test_fsr_trains_the_same_in_table_form_and_reports_the_same_tail_loss(weights, monkeypatch):
    """Pooled anchors (one mean target and a constant per point) give eq. 14's loss and steps;
    round 0 has no anchor; anchors of weight 0 pull nothing."""
    anchors = [_anchor(w, seed) for seed, w in enumerate(weights)]
    loss, params = _fsr(anchors)
    monkeypatch.setattr(decentralized, "graphs_on", lambda device: True)
    monkeypatch.setattr(decentralized, "TABLE_BYTES", 4096)  # several chunks of draws
    tabled_loss, tabled_params = _fsr(anchors)
    assert tabled_loss == pytest.approx(loss, rel=1e-5)
    assert _close(params, tabled_params)


def test_an_anchor_that_copies_to_the_host_keeps_the_eager_loop(monkeypatch):
    monkeypatch.setattr(decentralized, "graphs_on", lambda device: True)
    called = []
    monkeypatch.setattr(decentralized, "run_steps", lambda *a: called.append(a))
    _fsr([Anchor(0.5, lambda z: torch.zeros(len(z), 2))])
    assert not called
    _fsr([_anchor()])
    assert called


LABELS = np.arange(60) % 3
BLOBS = (RNG.normal(size=(60, 4)) + LABELS[:, None]).astype(np.float32)


def _blobs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(BLOBS), torch.as_tensor(LABELS)


BASELINES = {
    "adam": lambda m, x, y, g: adam_train(m, x, y, 20, 16, 0.01, g),
    "momentum": lambda m, x, y, g: momentum_sgd_train(m, x, y, 20, 16, 0.05, 0.9, g),
    "psr": lambda m, x, y, g: psr_train(
        m, x, y, [[np.zeros_like(p) for p in _parameters(m)]], 0.1, 20, 16, 0.01, g
    ),
    "distill": lambda m, x, y, g: distill(
        m, [lambda z: z[:, :3] * 2.0], 4, 20, 30, 0.01, g, replayable=True
    ),
}


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_the_fedfun_baselines_train_the_same_in_table_form(name, monkeypatch):
    def trained() -> tuple[float, list[np.ndarray]]:
        torch.manual_seed(0)
        model = build(NetworkSpec((4, 8, 3), "relu"))
        loss = BASELINES[name](model, *_blobs(), torch.Generator().manual_seed(2))
        return loss, _parameters(model)

    loss, params = trained()
    monkeypatch.setattr(decentralized, "graphs_on", lambda device: True)
    tabled_loss, tabled_params = trained()
    assert tabled_loss == pytest.approx(loss, rel=1e-5)
    assert _close(params, tabled_params)


def _replays(monkeypatch) -> list[int]:
    count = [0]
    replay = torch.cuda.CUDAGraph.replay

    def counting(graph):
        count[0] += 1
        return replay(graph)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", counting)
    return count


@needs_cuda
@pytest.mark.parametrize("fit", [fit_least_squares, fit_sup_norm])
@pytest.mark.parametrize("fast", [True, False])
def test_on_a_gpu_the_replayed_oracle_is_the_eager_gpu_loop(fit, fast, monkeypatch):
    settings = OracleSettings(steps=200, lr=0.005, batch_size=32)
    monkeypatch.setenv(graphed_steps.ENV, "0")
    eager = fit(SPEC, X, TARGET, settings, seed=5, fast=fast, device=CUDA)
    monkeypatch.delenv(graphed_steps.ENV)
    replays = _replays(monkeypatch)
    graphed = fit(SPEC, X, TARGET, settings, seed=5, fast=fast, device=CUDA)
    assert replays[0] == (200 - graphed_steps.WARMUP) // graphed_steps.UNROLL
    assert np.allclose(eager.values, graphed.values, rtol=1e-3, atol=1e-4)


@needs_cuda
def test_on_a_gpu_the_replayed_sobolev_oracle_is_the_eager_gpu_loop(monkeypatch):
    settings = replace(SETTINGS, steps=200, batch_size=32)
    monkeypatch.setenv(graphed_steps.ENV, "0")
    eager = _sobolev(settings, CUDA)
    monkeypatch.delenv(graphed_steps.ENV)
    replays = _replays(monkeypatch)
    graphed = _sobolev(settings, CUDA)
    assert replays[0] == (200 - graphed_steps.WARMUP) // graphed_steps.UNROLL
    assert np.allclose(eager.values, graphed.values, rtol=1e-3, atol=1e-4)


@needs_cuda
def test_on_a_gpu_fsr_replays_and_matches_the_eager_gpu_loop(monkeypatch):
    def on_cuda() -> tuple[float, list[np.ndarray]]:
        torch.manual_seed(0)
        model = build(NetworkSpec((4, 8, 2), "tanh")).to(CUDA)
        torch.manual_seed(1)
        teacher = build(NetworkSpec((4, 8, 2), "tanh")).to(CUDA)
        x, y = torch.as_tensor(CUBE, device=CUDA), torch.as_tensor(ONE_HOT, device=CUDA)
        anchors = [Anchor(0.5, lambda z: teacher(z), replayable=True)]
        g = torch.Generator().manual_seed(4)
        loss = fsr_train(model, x, y, anchors, 100, 0.05, 16, 30, 0.01, g)
        return loss, _parameters(model)

    monkeypatch.setenv(graphed_steps.ENV, "0")
    loss, params = on_cuda()
    monkeypatch.delenv(graphed_steps.ENV)
    replays = _replays(monkeypatch)
    graphed_loss, graphed_params = on_cuda()
    assert replays[0] > 0
    assert graphed_loss == pytest.approx(loss, rel=1e-3)
    assert _close(params, graphed_params, 1e-3)


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_every_client_half_in_table_form_gives_the_eager_rows(
    tmp_path, algorithm, tables_on_the_cpu
):
    """Through the apps (in-process engine, 3 nodes): the table form every oracle takes on a
    GPU, run on the CPU, gives the rows of the eager loops to float tolerance."""
    overrides = {**CASES[algorithm], "num-server-rounds": 2}
    tabled = run_app(tmp_path / "tabled", 3, [{"device": "cpu"}] * 3, **overrides)
    tables_on_the_cpu.undo()
    eager = run_app(tmp_path / "eager", 3, [{"device": "cpu"}] * 3, **overrides)
    loss = LOSS.get(algorithm, "test_loss")
    for a, b in zip(eager.rows[1:], tabled.rows[1:], strict=True):
        assert b["failures"] == 0
        assert b[loss] == pytest.approx(a[loss], rel=1e-4, abs=1e-5)
