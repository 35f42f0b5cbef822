"""Batched evaluation of many learners (functions/batched.py) against a loop over predict.

Trees must agree bit for bit (same float64 products, added in learner order); MLPs and CNNs to
float32 rounding (stacked products round differently), rtol = atol = 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.tree import DecisionTreeRegressor

from functions import batched, convnets, forest, networks
from functions.batched import weighted_sum
from functions.convnets import ConvNetSpec
from functions.networks import NetworkSpec
from functions.trees import from_sklearn

RNG = np.random.default_rng(3)
X = RNG.normal(size=(70, 2 * 10 * 10)).astype(np.float32)  # 70 inputs: 2 x 10 x 10 images
N_OUT = 3
MLP = NetworkSpec((200, 9, 7, N_OUT), "leaky_relu")
BOUNDED = NetworkSpec((200, 5, N_OUT), "tanh", output_bound=0.3)
LINEAR = NetworkSpec((200, N_OUT))  # no hidden layer
CNN = ConvNetSpec((2, 10, 10), N_OUT, channels=(4, 3), kernel=3, hidden=(6,))
CNN_BOUNDED = ConvNetSpec(
    (2, 10, 10), N_OUT, channels=(5,), kernel=5, hidden=(), activation="relu", output_bound=0.2
)  # one conv, no hidden layer


def tree(depth: int | None, seed: int):
    target = np.random.default_rng(seed).normal(size=(len(X), N_OUT))
    sk = DecisionTreeRegressor(max_depth=depth, random_state=seed).fit(X, target)
    return from_sklearn(sk, value_dtype=np.float32)


def leaf(value: float):
    """A tree of one node (depth 0): a constant."""
    sk = DecisionTreeRegressor().fit(X, np.full((len(X), N_OUT), value))
    return from_sklearn(sk, value_dtype=np.float32)


def nets(spec, count: int, seed: int) -> list:
    torch.manual_seed(seed)
    module = networks if isinstance(spec, NetworkSpec) else convnets
    return [module.build(spec) for _ in range(count)]


def mixed_learners() -> list:
    """Runs of every kind, of several lengths, with bounded outputs, a spec recurring later."""
    return [
        tree(3, 0),
        tree(5, 1),
        tree(1, 2),
        *nets(MLP, 4, 0),
        *nets(BOUNDED, 1, 1),
        tree(2, 3),
        *nets(CNN, 3, 2),
        *nets(MLP, 1, 3),
        *nets(LINEAR, 2, 4),
        *nets(CNN_BOUNDED, 2, 5),
        tree(None, 4),
    ]


def loop(learners, weights, x, initial=None):
    out = np.zeros((len(x), N_OUT)) if initial is None else np.array(initial, dtype=np.float64)
    for weight, learner in zip(weights, learners):
        out += weight * learner.predict(x).astype(np.float64)
    return out


# CHUNK_BYTES // (4 * widest layer) = (network, input) pairs a chunk: 64 MiB = everything at
# once; 600 B = one network on one input; 28,000 B = 35 inputs for the MLP (2 row chunks);
# 40,000 B = 50 inputs (uneven: 50 + 20); 112,000 B = 2 MLPs on all 70 inputs
@pytest.mark.parametrize("chunk_bytes", [64 << 20, 600, 28_000, 40_000, 112_000])
def test_weighted_sum_equals_the_loop(monkeypatch, chunk_bytes):
    monkeypatch.setattr(batched, "CHUNK_BYTES", chunk_bytes)
    learners = mixed_learners()
    weights = list(RNG.normal(size=len(learners)))
    initial = RNG.normal(size=(len(X), N_OUT))
    got = weighted_sum(learners, weights, X, N_OUT, initial)
    np.testing.assert_allclose(got, loop(learners, weights, X, initial), rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float64 and got.shape == (len(X), N_OUT)
    no_initial = weighted_sum(learners, weights, X, N_OUT)
    np.testing.assert_allclose(no_initial, loop(learners, weights, X), rtol=1e-5, atol=1e-5)


def test_initial_is_not_modified_and_float64_inputs_work():
    learners = mixed_learners()[:8]
    weights = [1.0] * len(learners)
    initial = np.ones((len(X), N_OUT))
    got = weighted_sum(learners, weights, X.astype(np.float64), N_OUT, initial)
    assert np.array_equal(initial, np.ones((len(X), N_OUT)))
    np.testing.assert_allclose(got, loop(learners, weights, X, initial), rtol=1e-5, atol=1e-5)


def test_output_bound_is_applied_in_the_batched_pass():
    bounded = nets(BOUNDED, 3, 7) + nets(CNN_BOUNDED, 3, 8)
    for learners, bound in ((bounded[:3], 0.3), (bounded[3:], 0.2)):
        values = [h.predict(X) for h in learners]
        assert any(np.isclose(np.abs(v), bound).any() for v in values)  # the clip is active
        for k, learner in enumerate(learners):
            single = weighted_sum([learner], [1.0], X, N_OUT)
            np.testing.assert_allclose(single, values[k], rtol=1e-5, atol=1e-5)
            assert np.abs(single).max() <= bound + 1e-7
        got = weighted_sum(learners, [0.5, -1.0, 2.0], X, N_OUT)
        np.testing.assert_allclose(got, loop(learners, [0.5, -1.0, 2.0], X), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_entries", [1 << 20, 70, 150])  # all trees; 1 tree; 2 trees a chunk
def test_trees_are_bit_identical_to_the_loop(monkeypatch, chunk_entries):
    monkeypatch.setattr(forest, "CHUNK_ENTRIES", chunk_entries)
    trees = [tree(d, s) for s, d in enumerate([1, 3, 6, 4, 2, None])] + [leaf(0.1)]
    assert trees[-1].depth == 0 and trees[5].depth > 6
    weights = [0.5, -1.25, 2.0, 0.1, -0.3, 1e-3, 7.0]
    initial = RNG.normal(size=(len(X), N_OUT))
    assert np.array_equal(weighted_sum(trees, weights, X, N_OUT), loop(trees, weights, X))
    assert np.array_equal(
        weighted_sum(trees, weights, X, N_OUT, initial), loop(trees, weights, X, initial)
    )
    x64 = RNG.normal(size=(33, X.shape[1]))  # float64 inputs: trees cast them to float32
    assert np.array_equal(weighted_sum(trees, weights, x64, N_OUT), loop(trees, weights, x64))


def test_tree_terms_in_a_mixed_run_are_bit_identical():
    """Networks between trees do not change how the tree terms are added."""
    trees = [tree(3, 10), tree(4, 11)]
    mlp = nets(MLP, 1, 12)
    weights = [0.3, -0.7, 1.1]
    with_net = weighted_sum([trees[0], mlp[0], trees[1]], weights, X, N_OUT)
    expected = 0.3 * trees[0].predict(X).astype(np.float64)
    expected += weighted_sum(mlp, [-0.7], X, N_OUT)
    expected += 1.1 * trees[1].predict(X).astype(np.float64)
    assert np.array_equal(with_net, expected)


def test_empty_ensembles_and_inputs():
    initial = RNG.normal(size=(len(X), N_OUT))
    assert np.array_equal(weighted_sum([], [], X, N_OUT, initial), initial)
    assert np.array_equal(weighted_sum([], [], X, N_OUT), np.zeros((len(X), N_OUT)))
    learners = mixed_learners()
    empty = weighted_sum(learners, [1.0] * len(learners), X[:0], N_OUT)
    assert empty.shape == (0, N_OUT)


def test_stacked_forwards_equal_each_network():
    x = torch.from_numpy(X)
    for spec, seed in (
        (MLP, 0),
        (BOUNDED, 1),
        (LINEAR, 2),
        (CNN, 3),
        (CNN_BOUNDED, 4),
        (NetworkSpec((200, 4, 4, 4, N_OUT), "tanh"), 5),
    ):
        learners = nets(spec, 4, seed)
        params = [torch.stack(t) for t in zip(*(m.state_dict().values() for m in learners))]
        module = networks if isinstance(spec, NetworkSpec) else convnets
        with torch.no_grad():
            stacked = module.stacked_forward(spec, params, x)
        assert stacked.shape == (4, len(X), N_OUT) and stacked.dtype == torch.float32
        for k, learner in enumerate(learners):
            np.testing.assert_allclose(stacked[k].numpy(), learner.predict(X), rtol=1e-5, atol=1e-6)
            with torch.no_grad():  # one network alone is the same as its module
                alone = module.stacked_forward(spec, [p[k : k + 1] for p in params], x)
            np.testing.assert_allclose(alone[0].numpy(), learner.predict(X), rtol=1e-5, atol=1e-6)


def test_shape_errors_are_value_errors():
    learners = mixed_learners()[:2]
    with pytest.raises(ValueError, match="weights"):
        weighted_sum(learners, [1.0], X, N_OUT)
    with pytest.raises(ValueError, match="expected 200 -> 4"):
        weighted_sum(learners, [1.0, 1.0], X, 4)
    with pytest.raises(ValueError, match="expected 199 -> 3"):
        weighted_sum(learners, [1.0, 1.0], X[:, :199], N_OUT)
    with pytest.raises(ValueError, match="initial values"):
        weighted_sum(learners, [1.0, 1.0], X, N_OUT, np.zeros((2, N_OUT)))
    with pytest.raises(ValueError, match="initial values"):
        weighted_sum(learners, [1.0, 1.0], X, N_OUT, np.zeros((len(X), N_OUT + 1)))
    with pytest.raises(ValueError, match="inputs of shape"):
        weighted_sum(learners, [1.0, 1.0], X[0], N_OUT)
    for kind in (nets(MLP, 1, 0), nets(CNN, 1, 0)):
        with pytest.raises(ValueError, match="learner 1 maps 200 -> 3, expected 200 -> 2"):
            weighted_sum([*nets(NetworkSpec((200, 2)), 1, 0), *kind], [1.0, 1.0], X, 2)
        with pytest.raises(ValueError, match="learner 0 maps 200 -> 3, expected 100 -> 3"):
            weighted_sum(kind, [1.0], X[:, :100], N_OUT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_networks_terms_are_the_cpus_to_float_rounding():
    learners = mixed_learners()
    weights = list(RNG.normal(size=len(learners)))
    cpu = weighted_sum(learners, weights, X, N_OUT)
    cuda = weighted_sum(learners, weights, X, N_OUT, device=torch.device("cuda"))
    np.testing.assert_allclose(cuda, cpu, rtol=1e-4, atol=1e-4)
    assert all(p.device.type == "cpu" for h in learners[3:5] for p in h.parameters())
