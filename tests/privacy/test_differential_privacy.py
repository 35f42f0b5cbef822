"""Client-level differential privacy of FedAvg (``dp.*``, in-process engine): every node's update
is clipped, the mean carries Gaussian noise of the declared size (the server's from the run's
seed, or under secure aggregation the nodes' shares), and the run reports the epsilon Flower's
accountant gives for its releases, continued across a resume.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

import client_app.app as client_module
from functions.protocol import ARRAYS, CONFIG, DP_NOISE_STD, TRAIN
from run_config.common import RunSettings
from run_config.families import inert_keys
from strategies.fedavg import CheckedFedAvg
from testing.inprocess_grid import run_config
from tests.helpers import RUN_NAME, run_app

NODES = 4
FAST = {"algorithm": "fedavg", "local-steps": 5, "tensorboard": False}
DP = {"dp.noise-multiplier": 1.0, "dp.clipping-norm": 0.5}


def epsilon(multipliers: list[float], sizes: list[int], delta: float = 1e-5) -> float:
    """Flower's accountant on the releases, directly."""
    accountant = RdpAccountant(
        PrivacyConfig(
            delta,
            max(sizes),
            NeighboringRelation.ADD_OR_REMOVE_ONE,
            SamplingMethod.NO_AMPLIFICATION,
        )
    )
    for z, m in zip(multipliers, sizes):
        accountant.compose(GaussianPrivacyEvent(z, m, max(sizes)))
    return accountant.get_epsilon(delta)


def record_train_replies(monkeypatch) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Each train reply's model and the model it was sent, as the node built them (before any
    secure sum masked them): instrumentation of the node's family reply."""
    seen = []
    family_reply = client_module._family_reply

    def recording(message_type, content, context):
        reply = family_reply(message_type, content, context)
        if message_type == TRAIN:
            sent = [a.numpy().astype(np.float64) for a in content[ARRAYS].values()]
            seen.append(([a.numpy().astype(np.float64) for a in reply[ARRAYS].values()], sent))
        return reply

    monkeypatch.setattr(client_module, "_family_reply", recording)
    return seen


def norm(arrays: list[np.ndarray]) -> float:
    return float(np.sqrt(sum(np.sum(a * a) for a in arrays)))


def test_updates_are_clipped_the_noise_is_the_declared_one_and_epsilon_is_reported(
    tmp_path, monkeypatch
):
    seen = record_train_replies(monkeypatch)
    means = []
    server_step = CheckedFedAvg._server_step
    monkeypatch.setattr(
        CheckedFedAvg, "_server_step", lambda self, m: means.append(m) or server_step(self, m)
    )
    run = run_app(tmp_path / "dp", NODES, **FAST, **DP, **{"num-server-rounds": 3})
    assert len(seen) == 3 * NODES and len(means) == 3
    for model, sent in seen:
        update = [a - b for a, b in zip(model, sent)]
        assert norm(update) <= 0.5 * (1 + 1e-5)
    # the server's noise: z C / m around the unweighted mean of the clipped models
    first = [m for m, _ in seen[:NODES]]
    mean = [np.mean([m[k] for m in first], axis=0) for k in range(len(first[0]))]
    noise = np.concatenate([(a - b).ravel() for a, b in zip(means[0], mean)])
    assert noise.std() == pytest.approx(1.0 * 0.5 / NODES, rel=0.1)
    rows = run.rows
    expected = [epsilon([1.0] * r, [NODES] * r) for r in (1, 2, 3)]
    assert [r["dp_epsilon"] for r in rows[1:]] == pytest.approx(expected)
    outcome = json.loads((run.out_dir / "config.json").read_text())["outcome"]
    assert outcome["privacy"]["epsilon"] == pytest.approx(expected[-1])
    assert f"differential privacy epsilon {expected[-1]:.4g} at delta 1e-05" in outcome["line"]
    # the same seed, the same noise
    again = run_app(tmp_path / "again", NODES, **FAST, **DP, **{"num-server-rounds": 3})
    assert again.rows[-1]["test_accuracy"] == rows[-1]["test_accuracy"]


def test_under_secure_aggregation_each_node_adds_its_share_of_the_noise(tmp_path, monkeypatch):
    seen = record_train_replies(monkeypatch)
    config = {**FAST, **DP, "secure-aggregation": True, "num-server-rounds": 2}
    run = run_app(tmp_path / "secure", NODES, **config)
    messages = [m for m in run.grid.down if m.metadata.message_type == TRAIN]
    stds = [m.content[CONFIG].get(DP_NOISE_STD) for m in messages if CONFIG in m.content]
    assert len(stds) == 2 * NODES and stds == pytest.approx([1.0 * 0.5 / NODES**0.5] * len(stds))
    for model, sent in seen:  # clipped, then noise of that size: the norm grows past C
        update = [a - b for a, b in zip(model, sent)]
        size = sum(a.size for a in update)
        assert norm(update) == pytest.approx((0.5 / NODES**0.5) * size**0.5, rel=0.2)
    assert [r["dp_epsilon"] for r in run.rows[1:]] == pytest.approx(
        [epsilon([1.0] * r, [NODES] * r) for r in (1, 2)]
    )


def test_a_resumed_run_continues_its_budget(tmp_path):
    config = {**FAST, **DP}
    whole = run_app(tmp_path / "whole", NODES, **config, **{"num-server-rounds": 4}).rows
    run_app(tmp_path / "cut", NODES, **config, **{"num-server-rounds": 2})
    resumed = run_app(
        tmp_path / "cut",
        NODES,
        **config,
        **{"num-server-rounds": 4, "resume-from": str(tmp_path / "cut" / RUN_NAME)},
    ).rows
    assert resumed[-1]["dp_epsilon"] == pytest.approx(whole[-1]["dp_epsilon"])
    assert resumed[-1]["test_accuracy"] == whole[-1]["test_accuracy"]


def test_dp_keys_without_noise_are_refused():
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "fedavg", "dp.clipping-norm": 2.0})
    )
    assert (
        "read only with dp.noise-multiplier other than 0.0"
        in inert_keys(settings)["dp.clipping-norm"]
    )
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "ffgb", "dp.noise-multiplier": 1.0})
    )
    assert "dp.noise-multiplier" in inert_keys(settings)


# -- fedxgb-hist: row-level noise on every summed release -------------------------------------
HIST = {
    "algorithm": "fedxgb-hist",
    "task": "breast-cancer",
    "fedxgb-hist.bins": "grid",
    "fedxgb-hist.max-depth": 3,
    "num-server-rounds": 3,
    "tensorboard": False,
}


def releases_of(rows: list[dict]) -> int:
    """The grid counts' release, then one a tree level."""
    return 1 + sum(r["histogram_levels"] for r in rows[1:])


@pytest.mark.parametrize("secure", [False, True], ids=["server-noise", "node-shares"])
def test_fedxgb_hist_releases_noisy_sums_and_counts_each(tmp_path, secure):
    z = 0.05  # on 455 rows, more noise leaves little of the trees (benchmarks.dp_tradeoff)
    config = {**HIST, "dp.noise-multiplier": z, "secure-aggregation": secure}
    run = run_app(tmp_path / "hist", 3, **config)
    rows = run.rows
    expected = epsilon([z] * releases_of(rows), [3] * releases_of(rows))
    assert rows[-1]["dp_epsilon"] == pytest.approx(expected)
    assert rows[-1]["test_accuracy"] > 0.75
    trains = [m for m in run.grid.down if m.metadata.message_type == TRAIN]
    stds = [m.content[CONFIG].get(DP_NOISE_STD) for m in trains]
    if secure:  # each node's share of z times a level's sensitivity sqrt(K d (2 + 1/16))
        share = z * (30 * (2 + 0.25**2)) ** 0.5 / 3**0.5
        assert stds == pytest.approx([share] * len(stds))
    else:
        assert set(stds) == {None}
        again = run_app(tmp_path / "again", 3, **config).rows
        assert again[-1]["test_accuracy"] == rows[-1]["test_accuracy"]  # seeded noise


def test_fedxgb_hist_dp_needs_grid_bins_and_a_classification(tmp_path):
    from run_config.fedxgb_hist import fedxgb_hist_settings
    from tasks.errors import ConfigError

    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "fedxgb-hist", "dp.noise-multiplier": 1.0})
    )
    with pytest.raises(ConfigError, match="'grid' with dp.noise-multiplier"):
        fedxgb_hist_settings(settings)
    with pytest.raises(Exception, match="needs a classification task"):
        run_app(tmp_path, 2, **{**HIST, "task": "diabetes", "dp.noise-multiplier": 1.0})


# -- FedFW: a noisy gradient into the linear minimisation ---------------------------------------
def test_a_row_s_clipped_gradient_is_the_gradient_when_nothing_is_clipped_and_at_most_c():
    from oracles.torch_grad import clipped_mean_grad, loss_and_grad
    from tasks.datasets import load_task
    from tasks.models import model_for

    task = load_task("digits")
    model = model_for("mlp", task, 0)
    params = [v.detach().numpy().astype(np.float64) for v in model.state_dict().values()]
    x, y = task.x_train[:40], task.y_train[:40]
    exact = loss_and_grad(model, params, x, y, task.kind)[1]
    unclipped = clipped_mean_grad(model, params, x, y, task.kind, 1e9)
    assert max(np.abs(a - b).max() for a, b in zip(exact, unclipped)) < 1e-6
    one = clipped_mean_grad(model, params, x[:1], y[:1], task.kind, 0.05)
    assert norm(one) == pytest.approx(0.05, rel=1e-5)  # one row's gradient, clipped to C


FW = {"algorithm": "fedfw", "task": "synthetic", "synthetic.samples": 600, "tensorboard": False}


@pytest.mark.parametrize("local_pass", [False, True], ids=["one-step", "local-pass"])
def test_fedfw_counts_one_release_a_noisy_gradient(tmp_path, local_pass):
    config = {**FW, **DP, "num-server-rounds": 3, "fedfw.local-pass": local_pass}
    rows = run_app(tmp_path / "fw", NODES, **config).rows
    steps = -(-(480 // NODES) // 64) if local_pass else 1  # a local pass: one a minibatch of 64
    assert [r["dp_epsilon"] for r in rows[1:]] == pytest.approx(
        [epsilon([1.0] * (steps * r), [1] * (steps * r)) for r in (1, 2, 3)]
    )
    assert all(math.isfinite(r["test_loss"]) for r in rows)


def test_fedfw_refuses_the_gap_with_dp():
    from run_config.fedfw import fedfw_settings
    from tasks.errors import ConfigError

    settings = RunSettings.from_run_config(run_config(**{**FW, **DP, "fedfw.gap": True}))
    with pytest.raises(ConfigError, match="fedfw.gap=True is not valid"):
        fedfw_settings(settings)
