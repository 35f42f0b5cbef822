"""The FFGB paper's CIFAR weak learner: a small LeNet (the PyTorch tutorial's, 32-32 dense layers).

Layers: for each entry c of ``channels``: conv (c filters, ``kernel`` x ``kernel``, no padding)
-> activation -> 2x2 max-pool; then flatten -> linear layers of widths ``hidden`` with the
activation after each -> linear to ``n_outputs`` [-> Hardtanh(-b, b) when ``output_bound``].
The default activation is leaky ReLU with slope 0.01, as in the authors' code. The network takes
FLAT inputs (n, C*H*W) and reshapes them inside, so it shares the learner interface
``predict(x (n, n_features)) -> (n, n_outputs)`` with trees and MLPs (floats: networks give
float64, trees the dtype of their leaf values; ``functions.batched`` sums in float64).

Wire format of the spec, keys under a caller's prefix: ``kind`` ("cnn"), ``input_shape`` [C, H, W],
``channels``, ``kernel``, ``hidden`` (lists of int / int), ``activation`` and, when clipped,
``output_bound``; the number of outputs is the caller's (the ensemble header carries it). Arrays,
in ``array_shapes`` order: ``cw{i}`` (c_i, c_{i-1}, k, k) and ``cb{i}`` (c_i,) per conv layer,
``w{i}`` (out, in) and ``b{i}`` (out,) per linear layer, float32 (stacked by
``functions.networks.pack_modules``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from functions.errors import DecodeError
from functions.networks import (
    ACTIVATIONS,
    MAX_LAYERS,
    Config,
    Shapes,
    allocated,
    bounded_spec,
    check_activation_and_bound,
    positive_ints,
    prefixed_config,
    spec_keys,
)

PREDICT_ROWS = 4096  # inputs per forward pass in ``predict`` (bounds its memory)
SPEC_KEYS = ("kind", "input_shape", "channels", "kernel", "hidden", "activation")


@dataclass(frozen=True)
class ConvNetSpec:
    """Architecture of the LeNet-style learner; construction validates it (``ValueError``)."""

    input_shape: tuple[int, int, int]
    n_outputs: int
    channels: tuple[int, ...] = (6, 16)
    kernel: int = 5
    hidden: tuple[int, ...] = (32, 32)
    activation: str = "leaky_relu"
    output_bound: float | None = None
    kind: ClassVar[str] = "cnn"

    def __post_init__(self) -> None:
        shape = positive_ints(self.input_shape, "input_shape", 3)
        if len(shape) != 3:
            raise ValueError(f"input_shape: expected (channels, height, width), got {shape}")
        object.__setattr__(self, "input_shape", shape)
        object.__setattr__(self, "channels", positive_ints(self.channels, "channels", 1))
        object.__setattr__(self, "hidden", positive_ints(self.hidden, "hidden", 0))
        positive_ints((self.n_outputs, self.kernel), "n_outputs and kernel", 2)
        check_activation_and_bound(self.activation, self.output_bound)
        if self.output_bound is not None:
            object.__setattr__(self, "output_bound", float(self.output_bound))
        if min(self._image_sizes()[-1]) < 1:
            raise ValueError(
                f"a {shape[1]}x{shape[2]} image is too small for "
                f"{len(self.channels)} conv ({self.kernel}x{self.kernel}) and "
                f"2x2 pool stages"
            )

    def _image_sizes(self) -> list[tuple[int, int]]:
        """(height, width) entering each conv stage, and after the last one."""
        sizes = [self.input_shape[1:]]
        for _ in self.channels:
            height, width = sizes[-1]
            sizes.append(((height - self.kernel + 1) // 2, (width - self.kernel + 1) // 2))
        return sizes

    @property
    def n_features(self) -> int:
        return math.prod(self.input_shape)

    @property
    def flat_size(self) -> int:
        """Features entering the first linear layer."""
        return self.channels[-1] * math.prod(self._image_sizes()[-1])

    @property
    def activation_size(self) -> int:
        """Floats one input makes at the widest layer (bounds the memory of a batched pass)."""
        convs = [
            c * (h - self.kernel + 1) * (w - self.kernel + 1)
            for c, (h, w) in zip(self.channels, self._image_sizes())
        ]
        return max(*convs, *self.hidden, self.n_outputs)

    @property
    def n_params(self) -> int:
        return sum(math.prod(shape) for shape in self.array_shapes().values())

    def array_shapes(self) -> Shapes:
        """Wire name -> shape of each parameter, in the module's parameter order."""
        shapes: Shapes = {}
        previous = self.input_shape[0]
        for i, channels in enumerate(self.channels):
            shapes[f"cw{i}"] = (channels, previous, self.kernel, self.kernel)
            shapes[f"cb{i}"] = (channels,)
            previous = channels
        widths = (self.flat_size, *self.hidden, self.n_outputs)
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            shapes[f"w{i}"], shapes[f"b{i}"] = (b, a), (b,)
        return shapes


class ConvNet(nn.Module):
    """The module of a ``ConvNetSpec``; ``forward`` takes flat (n, C*H*W) or (n, C, H, W)."""

    def __init__(self, spec: ConvNetSpec) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        previous = spec.input_shape[0]
        for channels in spec.channels:
            layers += [
                nn.Conv2d(previous, channels, spec.kernel),
                ACTIVATIONS[spec.activation](),
                nn.MaxPool2d(2),
            ]
            previous = channels
        self.features = nn.Sequential(*layers)
        widths = (spec.flat_size, *spec.hidden, spec.n_outputs)
        head: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            head += [ACTIVATIONS[spec.activation]()] if i else []
            head.append(nn.Linear(a, b))
        if spec.output_bound is not None:
            head.append(nn.Hardtanh(-spec.output_bound, spec.output_bound))
        self.head = nn.Sequential(*head)
        self.spec = spec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.reshape(len(x), *self.spec.input_shape)).flatten(1))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Outputs (n, n_outputs), float64, of float32 forward passes, ``PREDICT_ROWS`` a pass."""
        x = torch.as_tensor(np.asarray(x, dtype=np.float32))
        with torch.no_grad():
            parts = [self(x[i : i + PREDICT_ROWS]) for i in range(0, len(x), PREDICT_ROWS)]
        if not parts:
            return np.zeros((0, self.spec.n_outputs))
        return torch.cat(parts).numpy().astype(np.float64)


def build(spec: ConvNetSpec) -> ConvNet:
    """A freshly initialised network of the given architecture (seed torch for determinism)."""
    return ConvNet(spec)


def loaded(spec: ConvNetSpec, arrays: Sequence[np.ndarray]) -> ConvNet:
    """The network with ``arrays`` (the spec's, in ``array_shapes`` order) as its weights,
    without random draws (built on the meta device, then allocated)."""
    with torch.device("meta"):
        skeleton = ConvNet(spec)
    return allocated(skeleton, arrays)


def spec_config(spec: ConvNetSpec, prefix: str = "") -> Config:
    """The spec as config values, without ``n_outputs`` (see the module docstring)."""
    values: Config = {
        "kind": spec.kind,
        "input_shape": list(spec.input_shape),
        "channels": list(spec.channels),
        "kernel": spec.kernel,
        "hidden": list(spec.hidden),
        "activation": spec.activation,
    }
    return prefixed_config(prefix, values, spec.output_bound)


def decode_spec(
    config: Mapping[str, object], prefix: str, n_outputs: int, max_params: int
) -> ConvNetSpec:
    """Read and bound a CNN spec from config values (exactly its keys under ``prefix``).

    Checks the key set, list lengths (at most ``MAX_LAYERS``), sizes in [1, max_params], what
    ``ConvNetSpec`` checks and the parameter count; ``DecodeError`` on any fault.
    """
    keys = spec_keys(config, prefix, SPEC_KEYS, "cnn")
    fields = {key: config[prefix + key] for key in keys}
    for key in ("input_shape", "channels", "hidden"):
        value = fields[key]
        if not (
            isinstance(value, list)
            and len(value) <= MAX_LAYERS
            and all(type(v) is int and 1 <= v <= max_params for v in value)
        ):
            raise DecodeError(
                f"{prefix}{key}: expected at most {MAX_LAYERS} ints in "
                f"[1, {max_params}], got {value!r}"
            )
    if fields["kind"] != ConvNetSpec.kind:
        raise DecodeError(f"{prefix}kind: expected 'cnn', got {fields['kind']!r}")
    if type(fields["kernel"]) is not int or not 1 <= fields["kernel"] <= max_params:
        raise DecodeError(f"{prefix}kernel: expected an int in [1, {max_params}]")
    return bounded_spec(
        lambda: ConvNetSpec(
            tuple(fields["input_shape"]),
            n_outputs,
            tuple(fields["channels"]),
            fields["kernel"],
            tuple(fields["hidden"]),
            fields["activation"],
            fields.get("output_bound"),
        ),
        max_params,
        f"{prefix}cnn",
        f"{prefix}cnn: ",
    )


def stacked_forward(
    spec: ConvNetSpec, params: Sequence[torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Outputs (L, n, n_outputs) of L networks of ``spec`` on the same flat inputs ``x``, float32.

    ``params`` are the spec's arrays in ``array_shapes`` order, each stacked over the L networks.
    The first convolution of all networks is one convolution with L times the filters; later ones
    are grouped convolutions (one group per network); the dense layers are batched products.
    """
    count, n_convs = params[0].shape[0], len(spec.channels)
    activation = ACTIVATIONS[spec.activation]()
    h = x.reshape(len(x), *spec.input_shape)
    for i in range(n_convs):
        weight, bias = params[2 * i], params[2 * i + 1]
        h = nn.functional.conv2d(
            h,
            weight.reshape(-1, *weight.shape[2:]),
            bias.reshape(-1),
            groups=1 if i == 0 else count,
        )
        h = nn.functional.max_pool2d(activation(h), 2)
    h = h.reshape(len(x), count, -1).transpose(0, 1)  # (L, n, flat), per network's flatten order
    dense = params[2 * n_convs :]
    for i in range(len(dense) // 2):
        h = torch.baddbmm(
            dense[2 * i + 1].unsqueeze(1), activation(h) if i else h, dense[2 * i].transpose(1, 2)
        )
    if spec.output_bound is not None:
        h = nn.functional.hardtanh(h, -spec.output_bound, spec.output_bound)
    return h
