"""The bundled synthetic Lipschitz regression task (``task='lipschitz'``): shape, determinism,
its target against the known 1-Lipschitz f*, and short runs through the real apps."""

from __future__ import annotations

import numpy as np
import pytest

from oracles.lipschitz import data_lipschitz_constant
from tasks.datasets import (
    LIPSCHITZ_FEATURES,
    LIPSCHITZ_NOISE,
    LIPSCHITZ_SAMPLES,
    REGRESSION_TASKS,
    STANDARDISED_TARGETS,
    TASK_NAMES,
    _load_cached,
    generate_lipschitz,
    lipschitz_target,
    load_task,
)
from tasks.models import MODEL_NAMES
from tasks.partitioning import partition
from tests.helpers import run_app


def _sorted_rows(*arrays: np.ndarray) -> np.ndarray:
    """Rows of x (with y as a last column) in lexicographic order: the pooled data of a split."""
    pooled = np.column_stack(arrays)
    return pooled[np.lexsort(pooled.T[::-1])]


def test_registered_as_an_offline_regression_task():
    assert "lipschitz" in TASK_NAMES and "lipschitz" in REGRESSION_TASKS
    assert "lipschitz" not in STANDARDISED_TARGETS  # f* stays 1-Lipschitz in the task's units


def test_shape_dtypes_split_and_raw_units():
    task = load_task("lipschitz")
    assert task.kind == "regression" and task.num_classes == 0 and task.num_outputs == 1
    assert task.input_shape == (LIPSCHITZ_FEATURES,) == (8,)
    assert task.default_model == "mlp" and task.default_model in MODEL_NAMES
    assert len(task.x_train) + len(task.x_test) == LIPSCHITZ_SAMPLES == 2000
    assert len(task.x_test) == int(np.ceil(0.2 * LIPSCHITZ_SAMPLES))  # as the bundled tasks
    assert task.x_train.dtype == task.x_test.dtype == np.float32
    assert task.y_train.dtype == task.y_test.dtype == np.float32
    for x in (task.x_train, task.x_test):
        assert x.min() >= -1.0 and x.max() <= 1.0 and x.max() > 0.99 and x.min() < -0.99
    assert not task.x_train.flags.writeable and not task.y_test.flags.writeable
    # neither features nor target standardised: f* >= 0 has mean about 1
    assert 0.9 < float(task.y_train.mean()) < 1.1
    assert 0.08 < float(task.y_train.var()) < 0.15


def test_deterministic_and_seed_only_moves_the_split():
    x, y = generate_lipschitz()
    x2, y2 = generate_lipschitz()
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert not np.allclose(generate_lipschitz(seed=1)[0], x)

    first = load_task("lipschitz", seed=0)
    _load_cached.cache_clear()
    again = load_task("lipschitz", seed=0)
    assert again is not first
    np.testing.assert_array_equal(again.x_train, first.x_train)
    np.testing.assert_array_equal(again.y_test, first.y_test)
    other = load_task("lipschitz", seed=1)
    assert not np.array_equal(other.y_test, first.y_test)
    # the same 2,000 points in both splits, only divided differently
    np.testing.assert_array_equal(
        _sorted_rows(
            np.concatenate([first.x_train, first.x_test]),
            np.concatenate([first.y_train, first.y_test]),
        ),
        _sorted_rows(
            np.concatenate([other.x_train, other.x_test]),
            np.concatenate([other.y_train, other.y_test]),
        ),
    )


def test_target_is_f_star_plus_small_gaussian_noise():
    task = load_task("lipschitz")
    for x, y in ((task.x_train, task.y_train), (task.x_test, task.y_test)):
        noise = y.astype(np.float64) - lipschitz_target(x)
        assert abs(noise.mean()) < 4 * LIPSCHITZ_NOISE / np.sqrt(len(noise))
        assert 0.9 * LIPSCHITZ_NOISE < noise.std() < 1.1 * LIPSCHITZ_NOISE
        assert np.abs(noise).max() < 5 * LIPSCHITZ_NOISE
    # the noise is small next to the signal: f* explains > 95 % of the variance
    assert LIPSCHITZ_NOISE**2 < 0.05 * float(task.y_train.var())


def test_f_star_is_one_lipschitz_and_the_constant_is_tight():
    rng = np.random.default_rng(0)
    x, _ = generate_lipschitz()
    assert data_lipschitz_constant(x, lipschitz_target(x)) <= 1.0 + 1e-12
    # close pairs, where the local slope (the gradient norm) shows
    a = rng.uniform(-1.0, 1.0, size=(20_000, LIPSCHITZ_FEATURES))
    step = rng.normal(size=a.shape)
    step *= 1e-4 / np.linalg.norm(step, axis=1, keepdims=True)
    slopes = np.abs(lipschitz_target(a + step) - lipschitz_target(a)) / 1e-4
    assert slopes.max() <= 1.0 + 1e-6
    # the gradient norm is (3 + cos^2(pi x2))^(1/2) / 2, which is 1 at x2 = 0 (along the
    # gradient); a smaller Lipschitz constant would not do
    b = rng.uniform(-1.0, 1.0, size=(200, LIPSCHITZ_FEATURES))
    b[:, 1] = 0.0
    b[:, 2:4] += 0.01 * (b[:, 2:4] == 0.5)  # stay off the kinks
    grad = np.stack(
        [
            (lipschitz_target(b + 1e-6 * e) - lipschitz_target(b - 1e-6 * e)) / 2e-6
            for e in np.eye(LIPSCHITZ_FEATURES)
        ],
        axis=1,
    )
    assert np.linalg.norm(grad, axis=1).max() > 0.999


def test_kmeans_split_is_heterogeneous_in_features():
    task = load_task("lipschitz")
    parts = partition("kmeans", 5, task.y_train, task.x_train, seed=0)
    assert sum(len(p) for p in parts) == len(task.x_train)
    centres = np.stack([task.x_train[p].mean(0) for p in parts])
    assert np.linalg.norm(centres, axis=1).min() > 0.2  # each client off the pooled mean 0


@pytest.mark.e2e
def test_ffgb_l_learns_it_in_process(tmp_path):
    rows = run_app(
        tmp_path,
        4,
        **{
            "algorithm": "ffgb-l",
            "task": "lipschitz",
            "partitioning": "kmeans",
            "num-server-rounds": 2,
            "ffgb.eta0": 1.0,
            "ffgb.lipschitz": 1.0,
            "ffgb.local-steps": 2,
            "ffgb.oracle-steps": 60,
            "ffgb.hidden": 16,
        },
    ).rows
    assert all(r["failures"] == 0 and r["participants"] == 4 for r in rows[1:])
    assert rows[0]["test_mse"] == pytest.approx(
        float(np.mean(load_task("lipschitz").y_test.astype(np.float64) ** 2)), rel=1e-5
    )  # f0 = 0
    assert rows[-1]["test_mse"] < 0.3 * rows[0]["test_mse"]
    assert rows[-1]["models_exchanged"] == 2 * 4 * 2  # N K a round


@pytest.mark.parametrize(
    "overrides",
    [
        {"algorithm": "fedavg", "learning-rate": 0.05},
        {
            "algorithm": "ffgb-c",
            "ffgb.grad-bound": 2.0,
            "ffgb.eta0": 1.0,
            "ffgb.local-steps": 1,
            "ffgb.oracle-steps": 30,
            "ffgb.hidden": 8,
        },
    ],
)
def test_other_regression_algorithms_run_on_it(tmp_path, overrides):
    rows = run_app(tmp_path, 3, **{"task": "lipschitz", "num-server-rounds": 2, **overrides}).rows
    assert all(r["failures"] == 0 for r in rows[1:])
    assert rows[-1]["test_mse"] < rows[0]["test_mse"]
