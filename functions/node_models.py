"""A FedFun node's whole local model as it travels: an MLP or a KDDT, never pickled.

Wire format, keys under a caller's prefix (``p<partition id>/`` for a neighbour's model, ``own/``
for a node's own, ``self/`` in a train reply). Config: ``kind`` ("mlp" or "kddt"); an MLP adds its
spec (``functions.networks``). Arrays: the network's ``w{i}``/``b{i}`` (float32), or the tree's
arrays and its domain box (``functions.kddt``); DFedFish adds the diagonal Fisher of each weight
array under ``fisher-w{i}``/``fisher-b{i}`` (float32, non-negative, the weight's shape).

Nodes may use different architectures (FSR compares functions only), so a decoder checks a
network's input and output widths and a size bound, not one spec; the parametric baselines check
the run's spec on top (``ModelLimits.spec``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from functions.errors import DecodeError, check_float32
from functions.kddt import KDDT, decode_kddt, encode_kddt
from functions.networks import Network, NetworkSpec, decode_network, encode_network

MLP, TREE = "mlp", "kddt"
FISHER = "fisher-"

Config = dict[str, int | float | str | list[int]]


@dataclass(frozen=True)
class ModelLimits:
    """What a decoder accepts: the task's widths, size bounds, and for parametric runs the spec."""

    n_features: int
    n_outputs: int
    max_params: int = 1_000_000
    max_nodes: int = 4_001
    spec: NetworkSpec | None = None  # the baselines: every node has this architecture
    fisher: bool = False  # DFedFish: the Fisher diagonal travels with the weights

    @property
    def max_bytes(self) -> int:
        """An upper bound on the array bytes of one model within these limits, at 8 bytes a
        number: a network's weights (and Fisher diagonal), or a tree's nodes and domain box."""
        params = self.spec.n_params if self.spec is not None else self.max_params
        tree = self.max_nodes * (3 + self.n_outputs) + 2 * self.n_features
        return 8 * max(2 * params, tree)


@dataclass(frozen=True, eq=False)
class NodeModel:
    """A node's function, and for DFedFish the diagonal Fisher of its weights."""

    function: Network | KDDT
    fisher: tuple[np.ndarray, ...] | None = None

    @property
    def kind(self) -> str:
        return TREE if isinstance(self.function, KDDT) else MLP

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Outputs (n, q), float64, at inputs in the domain's coordinates."""
        return self.function.predict(x)


def encode_node_model(model: NodeModel, prefix: str) -> tuple[Config, dict[str, np.ndarray]]:
    """Config values and arrays of ``model`` under ``prefix`` (see the module docstring)."""
    if model.kind == TREE:
        return {prefix + "kind": TREE}, encode_kddt(model.function, prefix)
    config, arrays = encode_network(model.function.spec, model.function, prefix)
    if model.fisher is not None:
        names = list(model.function.spec.array_shapes())
        arrays.update(
            {
                f"{prefix}{FISHER}{name}": np.asarray(f, np.float32)
                for name, f in zip(names, model.fisher)
            }
        )
    return config, arrays


def decode_node_model(
    config: Mapping[str, object], arrays: Mapping[str, np.ndarray], prefix: str, limits: ModelLimits
) -> NodeModel:
    """The model under ``prefix``; ``DecodeError`` on anything malformed or out of bounds."""
    kind = config.get(prefix + "kind")
    model_arrays = {
        k: v
        for k, v in arrays.items()
        if k.startswith(prefix) and not k.startswith(prefix + FISHER)
    }
    if kind == TREE:
        if set(k for k in config if k.startswith(prefix)) != {prefix + "kind"}:
            raise DecodeError(f"{prefix}kddt: unexpected config keys")
        if len(model_arrays) != sum(k.startswith(prefix) for k in arrays):
            raise DecodeError(f"{prefix}kddt: a tree carries no Fisher arrays")
        if limits.spec is not None:
            raise DecodeError(f"{prefix}: expected the run's network {limits.spec}, got a tree")
        return NodeModel(
            decode_kddt(model_arrays, prefix, limits.n_features, limits.n_outputs, limits.max_nodes)
        )
    if kind != MLP:
        raise DecodeError(f"{prefix}kind: expected {MLP!r} or {TREE!r}, got {kind!r}")
    network = decode_network(config, model_arrays, prefix, limits.max_params)
    spec = network.spec
    if spec.n_features != limits.n_features or spec.n_outputs != limits.n_outputs:
        raise DecodeError(
            f"{prefix}network maps {spec.n_features} -> {spec.n_outputs}, expected "
            f"{limits.n_features} -> {limits.n_outputs}"
        )
    if spec.output_bound is not None:
        raise DecodeError(f"{prefix}network: FedFun networks have no output bound")
    if limits.spec is not None and spec != limits.spec:
        raise DecodeError(f"{prefix}network is not the run's {limits.spec}")
    return NodeModel(network, _fisher(arrays, prefix, spec, limits.fisher))


def _fisher(
    arrays: Mapping[str, np.ndarray], prefix: str, spec: NetworkSpec, expected: bool
) -> tuple[np.ndarray, ...] | None:
    """The Fisher diagonal under ``prefix + FISHER``: exactly the spec's arrays, finite, >= 0."""
    keys = {k for k in arrays if k.startswith(prefix + FISHER)}
    shapes = spec.array_shapes()
    if not expected:
        if keys:
            raise DecodeError(f"{prefix}: unexpected Fisher arrays")
        return None
    if keys != {f"{prefix}{FISHER}{name}" for name in shapes}:
        raise DecodeError(f"{prefix}: expected a Fisher array per weight array")
    fisher = tuple(
        check_float32(arrays[f"{prefix}{FISHER}{name}"], f"{prefix}{FISHER}{name}", shape)
        for name, shape in shapes.items()
    )
    if any((f < 0).any() for f in fisher):
        raise DecodeError(f"{prefix}: a Fisher entry is negative")
    return fisher


def require_unit_cube(model: NodeModel) -> NodeModel:
    """``model``, unless it is a KDDT on another domain than the unit cube, where every node maps
    the agreed box and fits its trees (its neighbours could not evaluate it: ``DecodeError``)."""
    if model.kind == TREE and not (
        np.all(model.function.lower == 0) and np.all(model.function.upper == 1)
    ):
        raise DecodeError(
            "a KDDT on another domain than the agreed one, the unit cube of "
            "the agreed box (its neighbours could not evaluate it)"
        )
    return model


def reprefixed(
    config: Mapping[str, object], arrays: Mapping[str, np.ndarray], old: str, new: str
) -> tuple[Config, dict[str, np.ndarray]]:
    """The keys under ``old`` moved under ``new`` (the relay renames a reply for its neighbours)."""
    return (
        {new + k[len(old) :]: v for k, v in config.items() if k.startswith(old)},
        {new + k[len(old) :]: v for k, v in arrays.items() if k.startswith(old)},
    )


def torch_function(
    model: NodeModel, device: torch.device
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``model`` as a function of float32 tensors without gradients (an FSR anchor, a teacher)."""
    if model.kind == MLP:
        network = model.function.to(device).eval()

        def forward(z: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return network(z)

        return forward

    def tree(z: torch.Tensor) -> torch.Tensor:
        values = model.function.predict(z.detach().cpu().numpy().astype(np.float64))
        return torch.as_tensor(values, dtype=torch.float32, device=z.device)

    return tree
