"""Small torch networks as a spec (config values) plus float32 weight arrays, never pickled.

Wire format, keys under a caller's prefix. Config: ``kind`` ("mlp"; a new layout gets a new
kind), ``sizes`` (list of int: inputs, hidden widths, outputs), ``activation`` ("relu", "tanh" or
"leaky_relu" with slope 0.01 as in the FFGB paper's MNIST learner) and, only when the output is
clipped to [-b, b] (FFGB.C's bounded learners), ``output_bound`` (float b). Arrays: ``w{i}``
(float32, (sizes[i+1], sizes[i])) and ``b{i}`` (float32, sizes[i+1]) for each linear layer i.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from functions.errors import DecodeError

KINDS = ("mlp",)
ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "leaky_relu": lambda: nn.LeakyReLU(0.01)}
MAX_LAYERS = 64  # bound on len(sizes) accepted from the wire


@dataclass(frozen=True)
class NetworkSpec:
    """Architecture of a multilayer perceptron: ``sizes`` = (in, hidden..., out)."""

    sizes: tuple[int, ...]
    activation: str = "relu"
    output_bound: float | None = None
    kind: str = "mlp"

    @property
    def n_params(self) -> int:
        return sum((a + 1) * b for a, b in zip(self.sizes[:-1], self.sizes[1:]))


class Network(nn.Sequential):
    """The module ``build`` makes: linear layers with the activation between them.

    ``predict`` maps numpy inputs to float64 outputs (n, out), so a network is a learner of an
    ensemble like a tree.
    """

    def __init__(self, spec: NetworkSpec) -> None:
        if spec.kind not in KINDS or spec.activation not in ACTIVATIONS:
            raise ValueError(f"unknown kind {spec.kind!r} or activation {spec.activation!r}")
        if len(spec.sizes) < 2 or any(size < 1 for size in spec.sizes):
            raise ValueError(f"need at least two positive layer sizes, got {spec.sizes}")
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(spec.sizes[:-1], spec.sizes[1:])):
            layers += [ACTIVATIONS[spec.activation]()] if i else []
            layers.append(nn.Linear(a, b))
        if spec.output_bound is not None:
            layers.append(nn.Hardtanh(-spec.output_bound, spec.output_bound))
        super().__init__(*layers)
        self.spec = spec

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self(torch.as_tensor(np.asarray(x, dtype=np.float32)))
        return out.numpy().astype(np.float64)


def build(spec: NetworkSpec) -> Network:
    """A freshly initialised network of the given architecture (seed torch for determinism)."""
    return Network(spec)


def encode_network(
    spec: NetworkSpec, module: nn.Module, prefix: str = ""
) -> tuple[dict[str, int | float | str | list[int]], dict[str, np.ndarray]]:
    """The spec as config values and the weights as float32 arrays (see the module docstring).

    ``module`` must have ``build(spec)``'s parameter names and shapes (``ValueError`` otherwise).
    """
    if isinstance(module, Network) and module.spec != spec:
        raise ValueError(f"module was built for {module.spec}, not {spec}")
    reference = _skeleton(spec).state_dict()
    state = module.state_dict()
    if list(state) != list(reference) or any(
        state[k].shape != reference[k].shape for k in reference
    ):
        raise ValueError(f"module parameters {list(state)} do not match the spec {spec}")
    config: dict[str, int | float | str | list[int]] = {
        prefix + "kind": spec.kind,
        prefix + "sizes": list(spec.sizes),
        prefix + "activation": spec.activation,
    }
    if spec.output_bound is not None:
        config[prefix + "output_bound"] = float(spec.output_bound)
    tensors = list(state.values())
    arrays = {}
    for i in range(len(spec.sizes) - 1):
        arrays[f"{prefix}w{i}"] = tensors[2 * i].detach().cpu().numpy().astype(np.float32)
        arrays[f"{prefix}b{i}"] = tensors[2 * i + 1].detach().cpu().numpy().astype(np.float32)
    return config, arrays


def decode_spec(config: Mapping[str, object], prefix: str, max_params: int) -> NetworkSpec:
    """Read and bound a network's spec from config values; ``DecodeError`` on any fault."""
    if not isinstance(config, Mapping):
        raise DecodeError(f"{prefix}network: expected a mapping, got {type(config).__name__}")
    keys = {k[len(prefix):] for k in config if isinstance(k, str) and k.startswith(prefix)}
    expected = {"kind", "sizes", "activation"} | ({"output_bound"} & keys)
    if keys != expected:
        raise DecodeError(f"{prefix}network: expected config keys {sorted(expected)}, got "
                          f"{sorted(keys)}")
    kind, sizes, activation = (config[prefix + k] for k in ("kind", "sizes", "activation"))
    if kind not in KINDS:
        raise DecodeError(f"{prefix}kind: unknown network kind {kind!r}")
    if activation not in ACTIVATIONS:
        raise DecodeError(f"{prefix}activation: unknown activation {activation!r}")
    if not (isinstance(sizes, list) and 2 <= len(sizes) <= MAX_LAYERS
            and all(type(s) is int and 1 <= s <= max_params for s in sizes)):
        raise DecodeError(f"{prefix}sizes: expected 2 to {MAX_LAYERS} ints in [1, {max_params}]")
    bound = config.get(prefix + "output_bound")
    if bound is not None and not (type(bound) in (int, float) and 0 < bound < np.inf):
        raise DecodeError(f"{prefix}output_bound: expected a positive finite number, got {bound!r}")
    spec = NetworkSpec(tuple(sizes), activation, None if bound is None else float(bound), kind)
    if spec.n_params > max_params:
        raise DecodeError(f"{prefix}network: {spec.n_params} parameters is more than {max_params}")
    return spec


def decode_network(
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    prefix: str = "",
    max_params: int = 10_000_000,
) -> Network:
    """Rebuild a network from ``encode_network`` output; ``DecodeError`` on any fault.

    Checks the spec (``decode_spec``), that the arrays under ``prefix`` are exactly the spec's
    ``w{i}``/``b{i}``, float32, of the spec's shapes, and finite.
    """
    spec = decode_spec(config, prefix, max_params)
    if not isinstance(arrays, Mapping):
        raise DecodeError(f"{prefix}network: expected a mapping of arrays")
    shapes = {}
    for i, (a, b) in enumerate(zip(spec.sizes[:-1], spec.sizes[1:])):
        shapes[f"w{i}"], shapes[f"b{i}"] = (b, a), (b,)
    keys = {k[len(prefix):] for k in arrays if isinstance(k, str) and k.startswith(prefix)}
    if keys != set(shapes):
        raise DecodeError(f"{prefix}network: expected arrays {sorted(shapes)}, got {sorted(keys)}")
    module = _skeleton(spec).to_empty(device="cpu")
    with torch.no_grad():
        for (name, shape), param in zip(shapes.items(), module.parameters()):
            array = arrays[prefix + name]
            if not isinstance(array, np.ndarray) or array.dtype != np.float32:
                raise DecodeError(f"{prefix}{name}: expected float32, got "
                                  f"{getattr(array, 'dtype', type(array).__name__)}")
            if array.shape != shape:
                raise DecodeError(f"{prefix}{name}: expected shape {shape}, got {array.shape}")
            if not np.all(np.isfinite(array)):
                raise DecodeError(f"{prefix}{name}: contains NaN or inf")
            param.copy_(torch.from_numpy(array))
    return module


def _skeleton(spec: NetworkSpec) -> Network:
    """The network's structure without allocating or initialising weights (no RNG draws)."""
    with torch.device("meta"):
        return Network(spec)
