"""Batched evaluation of many learners (functions/batched.py) against a loop over predict."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.tree import DecisionTreeRegressor

from functions import batched, convnets, networks
from functions.batched import weighted_sum
from functions.convnets import ConvNetSpec
from functions.networks import NetworkSpec
from functions.trees import from_sklearn

RNG = np.random.default_rng(3)
X = RNG.normal(size=(70, 2 * 10 * 10)).astype(np.float32)


def tree(depth: int, seed: int):  # noqa: ANN201
    target = RNG.normal(size=(len(X), 3))
    sk = DecisionTreeRegressor(max_depth=depth, random_state=seed).fit(X, target)
    return from_sklearn(sk, value_dtype=np.float32)


def mixed_learners() -> list:
    torch.manual_seed(0)
    mlp = NetworkSpec((200, 9, 7, 3), "leaky_relu")
    bounded = NetworkSpec((200, 5, 3), "tanh", output_bound=0.3)
    cnn = ConvNetSpec((2, 10, 10), 3, channels=(4, 3), kernel=3, hidden=(6,))
    return [tree(3, 0), tree(5, 1), tree(1, 2), *(networks.build(mlp) for _ in range(4)),
            networks.build(bounded), tree(2, 3), *(convnets.build(cnn) for _ in range(3)),
            networks.build(mlp)]


def loop(learners, weights, x, initial):  # noqa: ANN001, ANN201
    out = np.array(initial, dtype=np.float64)
    for weight, learner in zip(weights, learners):
        out += weight * learner.predict(x).astype(np.float64)
    return out


@pytest.mark.parametrize("chunk_bytes", [64 << 20, 600])
def test_weighted_sum_equals_the_loop(monkeypatch, chunk_bytes):
    monkeypatch.setattr(batched, "CHUNK_BYTES", chunk_bytes)  # small: many chunks of both axes
    learners = mixed_learners()
    weights = list(RNG.normal(size=len(learners)))
    initial = RNG.normal(size=(len(X), 3))
    got = weighted_sum(learners, weights, X, 3, initial)
    np.testing.assert_allclose(got, loop(learners, weights, X, initial), rtol=1e-5, atol=1e-5)


def test_trees_alone_are_bit_identical_to_the_loop():
    trees = [tree(d, s) for s, d in enumerate([1, 3, 6, 4, 2])]
    weights = [0.5, -1.25, 2.0, 0.1, -0.3]
    got = weighted_sum(trees, weights, X, 3)
    assert np.array_equal(got, loop(trees, weights, X, np.zeros((len(X), 3))))


def test_stacked_forwards_equal_each_network():
    for learners in (mixed_learners()[3:7], mixed_learners()[9:12]):
        spec = learners[0].spec
        params = [torch.stack(t) for t in zip(*(m.state_dict().values() for m in learners))]
        module = networks if isinstance(spec, NetworkSpec) else convnets
        with torch.no_grad():
            stacked = module.stacked_forward(spec, params, torch.from_numpy(X)).numpy()
        for k, learner in enumerate(learners):
            np.testing.assert_allclose(stacked[k], learner.predict(X), rtol=1e-5, atol=1e-6)


def test_shape_errors_are_value_errors():
    learners = mixed_learners()[:2]
    with pytest.raises(ValueError, match="weights"):
        weighted_sum(learners, [1.0], X, 3)
    with pytest.raises(ValueError, match="expected 200 -> 4"):
        weighted_sum(learners, [1.0, 1.0], X, 4)
    with pytest.raises(ValueError, match="initial values"):
        weighted_sum(learners, [1.0, 1.0], X, 3, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="inputs of shape"):
        weighted_sum(learners, [1.0, 1.0], X[0], 3)
