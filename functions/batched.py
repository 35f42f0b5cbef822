"""Evaluate many weighted learners at once: sum_k w_k h_k(x) for trees, MLPs and CNNs.

Learners are split into maximal runs of consecutive learners with the same spec. A run of trees
is walked as one forest (``functions.forest``); a run of networks is evaluated stacked (one
matrix product or convolution per layer for many networks, ``stacked_forward`` of
``functions.networks`` / ``functions.convnets``), in chunks of learners and inputs so that the
widest layer's activations stay under ``CHUNK_BYTES``. Terms are added to the output in learner
order, in float64: for trees the result is bit-identical to a loop over ``predict``; networks
agree with it to float32 rounding (the batched products round differently). Networks run on the
``device`` given (a node's GPU: the learners it receives each round are its largest cost there
after its own fits), on the CPU with the process's thread setting (the apps set one thread).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from functions import convnets, networks
from functions.convnets import ConvNet, ConvNetSpec
from functions.forest import add_weighted
from functions.learners import Learner, learner_spec, same_spec_runs
from functions.networks import Network, NetworkSpec
from functions.sealed_learners import SealedSpec
from functions.trees import TreeSpec

CPU = torch.device("cpu")
CHUNK_BYTES = 64 << 20  # float32 activations of the widest layer per chunk


def weighted_sum(
    learners: Sequence[Learner],
    weights: Sequence[float],
    x: np.ndarray,
    n_outputs: int,
    initial: np.ndarray | None = None,
    device: torch.device = CPU,
) -> np.ndarray:
    """``initial + sum_k weights[k] * learners[k](x)`` as a new float64 (n, n_outputs) array.

    ``initial`` defaults to zeros; terms are added in learner order. ``ValueError`` if a
    learner's inputs or outputs do not match ``x`` and ``n_outputs``.
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"expected inputs of shape (n, n_features), got {x.shape}")
    if len(learners) != len(weights):
        raise ValueError(f"{len(learners)} learners but {len(weights)} weights")
    out = np.zeros((len(x), n_outputs)) if initial is None else np.array(initial, np.float64)
    if out.shape != (len(x), n_outputs):
        raise ValueError(f"initial values of shape {out.shape}, expected {(len(x), n_outputs)}")
    for start, stop in same_spec_runs(learners):
        spec = learner_spec(learners[start])
        if (spec.n_features, spec.n_outputs) != (x.shape[1], n_outputs):
            raise ValueError(
                f"learner {start} maps {spec.n_features} -> {spec.n_outputs}, "
                f"expected {x.shape[1]} -> {n_outputs}"
            )
        if isinstance(spec, SealedSpec):
            raise ValueError(f"learner {start} is sealed: only the nodes can open and evaluate it")
        if isinstance(spec, TreeSpec):
            add_weighted(out, learners[start:stop], weights[start:stop], x)
        else:
            _add_networks(out, spec, learners[start:stop], weights[start:stop], x, device)
    return out


def _add_networks(
    out: np.ndarray,
    spec: NetworkSpec | ConvNetSpec,
    modules: Sequence[Network | ConvNet],
    weights: Sequence[float],
    x: np.ndarray,
    device: torch.device,
) -> None:
    """out += sum_k weights[k] * modules[k](x), stacked in chunks of networks and inputs, the
    products on ``device``."""
    forward = (
        networks.stacked_forward if isinstance(spec, NetworkSpec) else convnets.stacked_forward
    )
    pairs = max(1, CHUNK_BYTES // (4 * spec.activation_size))  # (network, input) pairs a chunk
    rows = max(1, min(len(x), pairs))
    per_chunk = max(1, pairs // rows)
    inputs = torch.tensor(x, dtype=torch.float32, device=device)
    with torch.no_grad():
        for first in range(0, len(modules), per_chunk):
            chunk = modules[first : first + per_chunk]
            params = [
                torch.stack(tensors).to(device)
                for tensors in zip(*(module.state_dict().values() for module in chunk))
            ]
            for row in range(0, len(x), rows):
                outputs = forward(spec, params, inputs[row : row + rows]).cpu().numpy()
                for weight, output in zip(weights[first : first + per_chunk], outputs):
                    out[row : row + rows] += weight * output.astype(np.float64)
