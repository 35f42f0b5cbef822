"""Small torch networks as a spec (config values) plus float32 weight arrays, never pickled.

Wire format of one network, keys under a caller's prefix. Config: ``kind`` ("mlp"; a new layout
gets a new kind), ``sizes`` (list of int: inputs, hidden widths, outputs), ``activation``
("relu", "tanh" or "leaky_relu" with slope 0.01 as in the FFGB paper's MNIST learner) and, only
when the output is clipped to [-b, b] (FFGB.C's bounded learners), ``output_bound`` (float b).
Arrays: ``w{i}`` (float32, (sizes[i+1], sizes[i])) and ``b{i}`` (float32, sizes[i+1]) for each
linear layer i.

Many networks of one spec travel and run stacked: ``pack_modules`` / ``unpack_modules`` put each
array of the spec's layout in one array with a leading learner axis (used for the CNN kind too,
``functions.convnets``), and ``stacked_forward`` evaluates such a stack on shared inputs with one
matrix product per layer instead of one per network.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from functions.errors import DecodeError, check_float32

KINDS = ("mlp",)
ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "leaky_relu": lambda: nn.LeakyReLU(0.01)}
MAX_LAYERS = 64  # bound on the number of layers accepted from the wire

Config = dict[str, int | float | str | list[int]]
Shapes = dict[str, tuple[int, ...]]


def check_activation_and_bound(activation: object, output_bound: object) -> None:
    """``ValueError`` unless the activation is known and the bound is None or positive finite."""
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
    if output_bound is not None and not (
        type(output_bound) in (int, float) and 0 < output_bound < math.inf
    ):
        raise ValueError(f"output_bound: expected a positive finite number, got {output_bound!r}")


def positive_ints(values: object, name: str, least: int) -> tuple[int, ...]:
    """``values`` as a tuple of at least ``least`` positive ints; ``ValueError`` if not."""
    if not (
        isinstance(values, (tuple, list))
        and len(values) >= least
        and all(type(v) is int and v >= 1 for v in values)
    ):
        raise ValueError(f"{name}: expected at least {least} positive ints, got {values!r}")
    return tuple(values)


@dataclass(frozen=True)
class NetworkSpec:
    """Architecture of a multilayer perceptron: ``sizes`` = (in, hidden..., out).

    Construction validates it (``ValueError``), so every spec can be built.
    """

    sizes: tuple[int, ...]
    activation: str = "relu"
    output_bound: float | None = None
    kind: str = "mlp"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown network kind {self.kind!r}")
        object.__setattr__(self, "sizes", positive_ints(self.sizes, "sizes", 2))
        check_activation_and_bound(self.activation, self.output_bound)
        if self.output_bound is not None:
            object.__setattr__(self, "output_bound", float(self.output_bound))

    @property
    def n_features(self) -> int:
        return self.sizes[0]

    @property
    def n_outputs(self) -> int:
        return self.sizes[-1]

    @property
    def n_params(self) -> int:
        return sum((a + 1) * b for a, b in zip(self.sizes[:-1], self.sizes[1:]))

    @property
    def activation_size(self) -> int:
        """Floats one input makes at the widest layer (bounds the memory of a batched pass)."""
        return max(self.sizes)

    def array_shapes(self) -> Shapes:
        """Wire name -> shape of each parameter, in the module's parameter order."""
        shapes: Shapes = {}
        for i, (a, b) in enumerate(zip(self.sizes[:-1], self.sizes[1:])):
            shapes[f"w{i}"], shapes[f"b{i}"] = (b, a), (b,)
        return shapes


class Network(nn.Sequential):
    """The module ``build`` makes: linear layers with the activation between them.

    ``predict`` maps numpy inputs to float64 outputs (n, out), so a network is a learner of an
    ensemble like a tree.
    """

    def __init__(self, spec: NetworkSpec, arrays: Sequence[np.ndarray] | None = None) -> None:
        """Fresh weights drawn from torch's global generator, or ``arrays`` (the spec's, in
        ``array_shapes`` order, checked by the caller) copied without drawing anything."""
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(spec.sizes[:-1], spec.sizes[1:])):
            layers += [ACTIVATIONS[spec.activation]()] if i else []
            given = None if arrays is None else arrays[2 * i : 2 * i + 2]
            layers.append(nn.Linear(a, b) if given is None else _given_linear(*given))
        if spec.output_bound is not None:
            layers.append(nn.Hardtanh(-spec.output_bound, spec.output_bound))
        super().__init__(*layers)
        self.spec = spec

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self(torch.as_tensor(np.asarray(x, dtype=np.float32)))
        return out.numpy().astype(np.float64)


def _given_linear(weight: np.ndarray, bias: np.ndarray) -> nn.Linear:
    """An ``nn.Linear`` holding copies of ``weight`` (out, in) and ``bias`` (out,), made without
    its constructor, which first draws initial weights: from torch's global generator on the
    CPU, or through slow decompositions on the meta device (``torch.nn.utils.skip_init``'s way:
    3 ms a layer stack, a third of the default job's time went to decoding learners)."""
    layer = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(layer)
    layer.out_features, layer.in_features = weight.shape
    layer.weight = nn.Parameter(torch.tensor(weight))
    layer.bias = nn.Parameter(torch.tensor(bias))
    return layer


def build(spec: NetworkSpec) -> Network:
    """A freshly initialised network of the given architecture (seed torch for determinism)."""
    return Network(spec)


def prefixed_config(prefix: str, values: Config, output_bound: float | None) -> Config:
    """A spec's config ``values`` under ``prefix``, in their order, then ``output_bound`` where
    the output is clipped (``spec_keys`` reads them back)."""
    config: Config = {prefix + key: value for key, value in values.items()}
    if output_bound is not None:
        config[prefix + "output_bound"] = output_bound
    return config


def spec_config(spec: NetworkSpec, prefix: str = "") -> Config:
    """The spec as config values (see the module docstring)."""
    values: Config = {"kind": spec.kind, "sizes": list(spec.sizes), "activation": spec.activation}
    return prefixed_config(prefix, values, spec.output_bound)


def module_arrays(module: nn.Module, shapes: Shapes) -> list[np.ndarray]:
    """The module's parameters as float32 arrays, checked against ``shapes`` (``ValueError``)."""
    tensors = list(module.state_dict().values())
    if len(tensors) != len(shapes) or any(
        tuple(t.shape) != shape for t, shape in zip(tensors, shapes.values())
    ):
        raise ValueError(
            f"module parameters {[tuple(t.shape) for t in tensors]} do not match "
            f"the spec's {list(shapes.values())}"
        )
    return [t.detach().cpu().numpy().astype(np.float32) for t in tensors]


def encode_network(
    spec: NetworkSpec, module: nn.Module, prefix: str = ""
) -> tuple[Config, dict[str, np.ndarray]]:
    """The spec as config values and the weights as float32 arrays (see the module docstring).

    ``module`` must have ``build(spec)``'s parameter shapes (``ValueError`` otherwise).
    """
    if isinstance(module, Network) and module.spec != spec:
        raise ValueError(f"module was built for {module.spec}, not {spec}")
    shapes = spec.array_shapes()
    arrays = dict(zip((prefix + name for name in shapes), module_arrays(module, shapes)))
    return spec_config(spec, prefix), arrays


class _Sized(Protocol):
    @property
    def n_params(self) -> int: ...


SpecT = TypeVar("SpecT", bound=_Sized)


def spec_keys(
    config: Mapping[str, object], prefix: str, required: Iterable[str], what: str
) -> set[str]:
    """The keys of a spec's ``config`` under ``prefix`` (without it): exactly ``required``, and
    ``output_bound`` where the output is clipped; ``DecodeError`` naming ``what`` otherwise."""
    keys = {k[len(prefix) :] for k in config if isinstance(k, str) and k.startswith(prefix)}
    expected = set(required) | ({"output_bound"} & keys)
    if keys != expected:
        raise DecodeError(
            f"{prefix}{what}: expected config keys {sorted(expected)}, got {sorted(keys)}"
        )
    return keys


def bounded_spec(make: Callable[[], SpecT], max_params: int, what: str, invalid: str) -> SpecT:
    """The spec ``make()`` builds from checked config values; ``DecodeError`` when it refuses
    them (``invalid`` then its reason) or has more than ``max_params`` parameters (naming
    ``what``), so that no spec from the wire allocates more than the caller allows."""
    try:
        spec = make()
    except ValueError as err:
        raise DecodeError(f"{invalid}{err}") from None
    if spec.n_params > max_params:
        raise DecodeError(f"{what}: {spec.n_params} parameters is more than {max_params}")
    return spec


def decode_spec(config: Mapping[str, object], prefix: str, max_params: int) -> NetworkSpec:
    """Read and bound a network's spec from config values; ``DecodeError`` on any fault."""
    if not isinstance(config, Mapping):
        raise DecodeError(f"{prefix}network: expected a mapping, got {type(config).__name__}")
    spec_keys(config, prefix, ("kind", "sizes", "activation"), "network")
    sizes = config[prefix + "sizes"]
    if not (
        isinstance(sizes, list)
        and 2 <= len(sizes) <= MAX_LAYERS
        and all(type(s) is int and 1 <= s <= max_params for s in sizes)
    ):
        raise DecodeError(f"{prefix}sizes: expected 2 to {MAX_LAYERS} ints in [1, {max_params}]")
    return bounded_spec(
        lambda: NetworkSpec(
            tuple(sizes),
            config[prefix + "activation"],
            config.get(prefix + "output_bound"),
            config[prefix + "kind"],
        ),
        max_params,
        f"{prefix}network",
        prefix,
    )


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
    shapes = spec.array_shapes()
    keys = {k[len(prefix) :] for k in arrays if isinstance(k, str) and k.startswith(prefix)}
    if keys != set(shapes):
        raise DecodeError(f"{prefix}network: expected arrays {sorted(shapes)}, got {sorted(keys)}")
    checked = [
        check_float32(arrays[prefix + name], prefix + name, shape) for name, shape in shapes.items()
    ]
    return Network(spec, checked)


def pack_modules(
    modules: Sequence[nn.Module], shapes: Shapes, prefix: str = ""
) -> dict[str, np.ndarray]:
    """Each parameter of ``modules`` (all of layout ``shapes``) stacked over the modules."""
    per_module = [module_arrays(module, shapes) for module in modules]
    return {
        prefix + name: np.stack([arrays[i] for arrays in per_module])
        for i, name in enumerate(shapes)
    }


def unpack_modules(
    arrays: Mapping[str, np.ndarray],
    prefix: str,
    shapes: Shapes,
    count: int,
    load: Callable[[Sequence[np.ndarray]], nn.Module],
) -> list[nn.Module]:
    """``count`` modules from stacked arrays (``pack_modules`` output); ``DecodeError`` on a fault.

    Checks that each ``prefix + name`` is finite float32 of shape (count, *shapes[name]); the
    caller checks the key set. ``load`` makes one module from its arrays in ``shapes`` order
    (without random draws).
    """
    stacked = [
        check_float32(arrays[prefix + name], prefix + name, (count, *shape))
        for name, shape in shapes.items()
    ]
    return [load([array[k] for array in stacked]) for k in range(count)]


def stacked_forward(
    spec: NetworkSpec, params: Sequence[torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Outputs (L, n, out) of L networks of ``spec`` on the same inputs ``x`` (n, in), float32.

    ``params`` are the spec's arrays in ``array_shapes`` order, each stacked over the L networks.
    The first layer of all networks is one matrix product; later layers are batched products.
    """
    count, n_layers = params[0].shape[0], len(spec.sizes) - 1
    activation = ACTIVATIONS[spec.activation]()
    width = spec.sizes[1]
    h = nn.functional.linear(x, params[0].reshape(count * width, -1), params[1].reshape(-1))
    h = h.reshape(len(x), count, width).transpose(0, 1)
    for i in range(1, n_layers):
        h = torch.baddbmm(
            params[2 * i + 1].unsqueeze(1), activation(h), params[2 * i].transpose(1, 2)
        )
    if spec.output_bound is not None:
        h = nn.functional.hardtanh(h, -spec.output_bound, spec.output_bound)
    return h


def allocated(skeleton: nn.Module, arrays: Sequence[np.ndarray]) -> nn.Module:
    """``skeleton`` (a module on the meta device) allocated on the CPU with ``arrays`` as its
    parameters, in order."""
    module = skeleton.to_empty(device="cpu")
    with torch.no_grad():
        for array, param in zip(arrays, module.parameters()):
            param.copy_(torch.from_numpy(array))
    return module
