"""Models: output shapes for every task's default model, seeded builds, stable parameter order."""

import pytest
import torch

from tasks.datasets import load_task
from tasks.errors import ConfigError
from tasks.models import MODEL_NAMES, build_model

OFFLINE = ("digits", "iris", "wine", "breast-cancer", "diabetes", "mnist-5k", "synthetic")


@pytest.mark.parametrize("name", OFFLINE)
def test_default_model_forward_shape(name):
    task = load_task(name)
    model = build_model(task.default_model, task.input_shape, task.num_outputs)
    out = model(torch.from_numpy(task.x_test[:5].copy()))
    assert out.shape == (5, task.num_outputs) and out.dtype == torch.float32


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_every_model_accepts_images(name, shape):
    model = build_model(name, shape, 10)
    assert model(torch.zeros(4, *shape)).shape == (4, 10)


def test_same_seed_same_weights_other_seed_other_weights():
    for name in MODEL_NAMES:
        shape = (1, 28, 28) if name == "cnn" else (60,)
        a, b, c = (build_model(name, shape, 10, seed=s).state_dict() for s in (5, 5, 6))
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not torch.equal(a["fc1.weight"], c["fc1.weight"])


def test_build_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    build_model("mlp", (64,), 10, seed=1)
    assert torch.equal(state, torch.get_rng_state())


def test_parameter_order_and_sizes():
    layers = {
        "mclr": [(10, 60)],
        "mlp": [(128, 60), (10, 128)],
        "dnn": [(100, 60), (100, 100), (10, 100)],
    }
    for name, shapes in layers.items():
        state = build_model(name, (60,), 10).state_dict()
        expected = [f"fc{i + 1}.{kind}" for i in range(len(shapes)) for kind in ("weight", "bias")]
        assert list(state) == expected
        assert [tuple(state[f"fc{i + 1}.weight"].shape) for i in range(len(shapes))] == shapes
    cnn = build_model("cnn", (1, 28, 28), 10).state_dict()
    weights = [k for k in cnn if k.endswith("weight")]
    assert weights == ["conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"]
    assert tuple(cnn["fc1.weight"].shape) == (128, 64 * 4 * 4)


def test_bad_model_requests_are_config_errors():
    with pytest.raises(ConfigError, match="model='resnet'.*mclr"):
        build_model("resnet", (64,), 10)
    with pytest.raises(ConfigError, match="model='cnn'.*\\(64,\\)"):
        build_model("cnn", (64,), 10)
    with pytest.raises(ConfigError, match="model='cnn'"):
        build_model("cnn", (1, 8, 8), 10)
