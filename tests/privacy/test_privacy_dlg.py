"""The DLG benchmark (``benchmarks.dlg``) attacks what the project sends: its LMO is the
project's, its unrolled FFGB fit is the project's fit, the zero pixels it reads off are the
image's, and the raw gradient leaks the image where an l1 extreme point does not."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from benchmarks import dlg
from functions.networks import NetworkSpec
from oracles.boosting import StepSizes
from oracles.lmo import Constraint, lmo_per_tensor
from oracles.schedules import FWSchedule
from oracles.torch_grad import loss_and_grad
from oracles.weak_learning import OracleSettings, fit_seed
from tasks.datasets import load_task
from tasks.models import build_model

SCHEDULE = FWSchedule("convex", 0.01, 1)


@pytest.fixture(scope="module")
def digits():
    return load_task("digits")


def _example(task, index: int) -> dlg.Example:
    return dlg.Example(np.array(task.x_train[index : index + 1]), int(task.y_train[index]))


@pytest.mark.parametrize("kind", ["l1", "l2", "box"])
def test_the_attacks_lmo_is_the_projects(kind):
    constraint = Constraint(kind, 10.0)
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal((6, 5)) for _ in range(20)]
    cases += [np.zeros((6, 5)), np.array([0.0, -2.0, 2.0, 1.0]), np.array([0.0, 0.0, 3.0])]
    for g in cases:
        ours = dlg.torch_lmo(constraint, torch.as_tensor(g)).numpy()
        # l2: the same formula, the norm summed in another order
        np.testing.assert_allclose(ours, constraint.lmo(g), rtol=1e-12 if kind == "l2" else 0)


@pytest.mark.parametrize("kind", ["l1", "l2", "box"])
def test_the_attacked_point_is_the_lmo_of_the_gradient(digits, kind):
    model = build_model("mlp", digits.input_shape, 10, seed=0)
    example, constraint = _example(digits, 0), Constraint(kind, 10.0)
    points = dlg.observe_fedfw(model, example, constraint, "per-tensor", SCHEDULE, 10)
    weights = [p.detach().numpy() for p in model.parameters()]
    _, grad = loss_and_grad(model, weights, example.x, np.array([example.label]), "classification")
    for point, expected in zip(points, lmo_per_tensor(constraint, grad)):
        np.testing.assert_allclose(point, expected, rtol=1e-6, atol=0)
    image, label = example.x.astype(np.float64), np.eye(10)[[example.label]] * 50.0
    if kind != "l2":  # the true image makes the received point to the bit
        assert dlg.reproduces(model, constraint, points, image, label)


def test_dlg_recovers_the_image_from_the_gradient_not_from_the_l1_point(digits):
    model = build_model("mclr", digits.input_shape, 10, seed=0)
    example = _example(digits, 1)
    truth = example.x.astype(np.float64)
    gradient = dlg.observe_fedavg(model, example, 0.3, 0)
    from_gradient = dlg.attack(dlg.gradient_match(model, gradient), truth, 10, 5, seed=0)
    l1 = Constraint("l1", 10.0)
    points = dlg.observe_fedfw(model, example, l1, "per-tensor", SCHEDULE, 10)
    from_point = dlg.attack(dlg.l1_match(model, points), truth, 10, 5, seed=0)
    assert from_gradient.psnr[-1] > 60.0 and from_gradient.label == example.label
    assert from_point.psnr[-1] < 12.0  # below the mean training image's 11-13 dB
    # though the dummy makes the very point the node sent
    assert dlg.reproduces(model, l1, points, from_point.image, from_point.label_logits)


def test_the_unrolled_fit_is_ffgbs_fit_and_its_still_weights_are_the_zero_pixels(digits):
    example = _example(digits, 0)
    message = dlg.observe_ffgb(
        NetworkSpec((64, 32, 32, 10), "leaky_relu"),
        example,
        10,
        OracleSettings(steps=20),
        StepSizes("experiment", 3, 10.0).etas(0),
        partial(fit_seed, 0, 0, 0),
    )
    truth = torch.as_tensor(example.x, dtype=dlg.DTYPE)
    label = 50.0 * torch.nn.functional.one_hot(torch.tensor([example.label]), 10).to(dlg.DTYPE)
    match = dlg.learner_match(message, 10)
    assert float(match(truth, label).detach()) < 1e-8
    assert float(match(truth * 0.9, label).detach()) > 1e-3
    np.testing.assert_array_equal(dlg.learner_zero_inputs(message), example.x[0] == 0)


def test_a_box_point_shows_the_zero_pixels(digits):
    model = build_model("mlp", digits.input_shape, 10, seed=0)
    for index in range(3):
        example = _example(digits, index)
        points = dlg.observe_fedfw(
            model, example, Constraint("box", 0.1), "per-tensor", SCHEDULE, 10
        )
        np.testing.assert_array_equal(dlg.box_zero_inputs(points), example.x[0] == 0)
