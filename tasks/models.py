"""The networks of the papers, built with a seeded initialisation.

All return raw scores (logits, or the prediction for regression): losses add the softmax.
Layers are named (``fc1.weight``, ...) and their order is fixed, because the
``state_dict`` order is what travels between server and clients.

- mclr: multinomial logistic regression, Flatten + Linear (FedFW's MCLR).
- mlp: one hidden layer of 128 ReLU units.
- dnn: two hidden layers of 100 ReLU units. The FedFW paper trains "a DNN with two hidden
  layers" on Synthetic; its code's two-hidden-layer net (``DNN2``, pFedMe lineage) is
  100-100. (Its Synthetic run uses ``DNN(60, 20, 10)``, one hidden layer of 20.)
- mlp32: the FFGB paper's MNIST weak learner as a whole model (two hidden layers of 32,
  leaky ReLU 0.01): FedAvg with it is the paper's FedAvg baseline (section 4.1).
- cnn: FedFW's MNIST CNN: conv 5x5 (32) - max-pool 2 - conv 5x5 (64) - max-pool 2 -
  fc 128 - fc out, ReLU after each hidden layer; for any (C, H, W) input with H, W >= 16.
"""

from collections import OrderedDict

import torch
from torch import nn

from tasks.datasets import TaskData
from tasks.errors import ConfigError

MODEL_NAMES = ("mclr", "mlp", "mlp32", "dnn", "cnn")
MLP_HIDDEN = 128
DNN_HIDDEN = (100, 100)
FFGB_HIDDEN = (32, 32)
CNN_CHANNELS = (32, 64)
CNN_HIDDEN = 128
CNN_KERNEL = 5


def build_model(
    name: str, input_shape: tuple[int, ...], num_outputs: int, seed: int = 0
) -> nn.Module:
    """A freshly initialised ``name`` network; the same seed gives the same weights.

    The global torch RNG is left as it was.
    """
    if name not in MODEL_NAMES:
        raise ConfigError.choice("model", name, MODEL_NAMES)
    with torch.random.fork_rng(devices=[]):
        # the CPU generator alone: what torch.manual_seed seeds on a CPU run, without the
        # stack trace it captures for a lazy CUDA seed (a millisecond per model, per message)
        torch.default_generator.manual_seed(seed)
        if name == "cnn":
            return _cnn(tuple(input_shape), num_outputs)
        widths = {"mclr": (), "mlp": (MLP_HIDDEN,), "mlp32": FFGB_HIDDEN, "dnn": DNN_HIDDEN}[name]
        activation = nn.LeakyReLU(0.01) if name == "mlp32" else nn.ReLU()
        return _fully_connected(_numel(input_shape), widths, num_outputs, activation)


def model_for(name: str, task: TaskData, seed: int) -> nn.Module:
    """The run's model for ``task``: ``name``, or the task's default when empty."""
    return build_model(name or task.default_model, task.input_shape, task.num_outputs, seed)


def _numel(shape: tuple[int, ...]) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def _fully_connected(
    inputs: int, widths: tuple[int, ...], outputs: int, activation: nn.Module
) -> nn.Sequential:
    """Flatten, then Linear layers of the given hidden widths with ``activation`` in between."""
    layers: list[tuple[str, nn.Module]] = [("flatten", nn.Flatten())]
    for i, width in enumerate(widths, start=1):
        layers += [(f"fc{i}", nn.Linear(inputs, width)), (f"relu{i}", activation)]
        inputs = width
    layers.append((f"fc{len(widths) + 1}", nn.Linear(inputs, outputs)))
    return nn.Sequential(OrderedDict(layers))


def _cnn(input_shape: tuple[int, ...], outputs: int) -> nn.Sequential:
    """Two conv/pool stages then two fully connected layers, sized for the input."""
    height = width = 0
    if len(input_shape) == 3:
        channels, height, width = input_shape
        for _ in CNN_CHANNELS:  # valid convolution, then halving
            height, width = (height - CNN_KERNEL + 1) // 2, (width - CNN_KERNEL + 1) // 2
    if min(height, width) < 1:
        raise ConfigError.bound(
            "model",
            "cnn",
            f"used with images (channels, height, width) of at least 16x16, "
            f"not inputs of shape {input_shape}",
        )
    first, second = CNN_CHANNELS
    return nn.Sequential(
        OrderedDict(
            [
                ("conv1", nn.Conv2d(channels, first, CNN_KERNEL)),
                ("pool1", nn.MaxPool2d(2)),
                ("relu1", nn.ReLU()),
                ("conv2", nn.Conv2d(first, second, CNN_KERNEL)),
                ("pool2", nn.MaxPool2d(2)),
                ("relu2", nn.ReLU()),
                ("flatten", nn.Flatten()),
                ("fc1", nn.Linear(second * height * width, CNN_HIDDEN)),
                ("relu3", nn.ReLU()),
                ("fc2", nn.Linear(CNN_HIDDEN, outputs)),
            ]
        )
    )
