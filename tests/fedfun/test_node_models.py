"""A FedFun node's model on the wire: exact round trips, and every malformed model refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from functions.errors import DecodeError
from functions.networks import NetworkSpec, build
from functions.node_models import (
    ModelLimits,
    NodeModel,
    decode_node_model,
    encode_node_model,
    reprefixed,
)
from tests.helpers import tree_from_constant

SPEC = NetworkSpec((4, 6, 3))
LIMITS = ModelLimits(4, 3)


def network_model(fisher: bool = False) -> NodeModel:
    torch.manual_seed(0)
    network = build(SPEC)
    weights = (
        tuple(np.full(shape, 0.5, np.float32) for shape in SPEC.array_shapes().values())
        if fisher
        else None
    )
    return NodeModel(network, weights)


def tree_model() -> NodeModel:
    return NodeModel(tree_from_constant(np.zeros(4), np.ones(4), np.array([0.2, 0.3, 0.5])))


def test_networks_trees_and_fisher_round_trip_exactly():
    x = np.random.default_rng(0).uniform(size=(20, 4))
    for model, limits in (
        (network_model(), LIMITS),
        (tree_model(), LIMITS),
        (network_model(True), ModelLimits(4, 3, spec=SPEC, fisher=True)),
    ):
        config, arrays = encode_node_model(model, "p3/")
        decoded = decode_node_model(config, arrays, "p3/", limits)
        assert decoded.kind == model.kind
        np.testing.assert_array_equal(decoded.predict(x), model.predict(x))
        if model.fisher is not None:
            assert all(np.array_equal(a, b) for a, b in zip(decoded.fisher, model.fisher))


def test_a_renamed_model_decodes_under_its_new_prefix_only():
    config, arrays = encode_node_model(network_model(), "self/")
    config, arrays = reprefixed(config, arrays, "self/", "p12/")
    decode_node_model(config, arrays, "p12/", LIMITS)
    with pytest.raises(DecodeError):
        decode_node_model(config, arrays, "p1/", LIMITS)


def _network_wire():
    return encode_node_model(network_model(), "m/")


@pytest.mark.parametrize(
    "mutate, limits",
    [
        (lambda c, a: c.update({"m/kind": "pickle"}), LIMITS),
        (lambda c, a: c.update({"m/sizes": [5, 6, 3]}), LIMITS),  # arrays no longer fit
        (lambda c, a: a.update({"m/w0": np.full((6, 4), np.nan, np.float32)}), LIMITS),
        (lambda c, a: a.update({"m/w0": np.zeros((6, 4), np.float64)}), LIMITS),
        (lambda c, a: a.pop("m/b1"), LIMITS),
        (lambda c, a: a.update({"m/extra": np.zeros(1, np.float32)}), LIMITS),
        (lambda c, a: c.update({"m/output_bound": 1.0}), LIMITS),
        (lambda c, a: None, ModelLimits(5, 3)),  # the task has 5 features
        (lambda c, a: None, ModelLimits(4, 3, spec=NetworkSpec((4, 7, 3)))),  # not the run's spec
        (lambda c, a: None, ModelLimits(4, 3, max_params=10)),
        (lambda c, a: None, ModelLimits(4, 3, spec=SPEC, fisher=True)),  # its Fisher is missing
        (
            lambda c, a: a.update({"m/fisher-w0": np.zeros((6, 4), np.float32)}),
            LIMITS,
        ),  # unexpected
    ],
)
def test_malformed_networks_are_refused(mutate, limits):
    config, arrays = _network_wire()
    mutate(config, arrays)
    with pytest.raises(DecodeError):
        decode_node_model(config, arrays, "m/", limits)


def test_a_negative_fisher_is_refused():
    model = network_model(True)
    config, arrays = encode_node_model(model, "m/")
    arrays["m/fisher-b0"] = -np.ones(6, np.float32)
    with pytest.raises(DecodeError, match="negative"):
        decode_node_model(config, arrays, "m/", ModelLimits(4, 3, spec=SPEC, fisher=True))


@pytest.mark.parametrize(
    "mutate, limits",
    [
        (lambda c, a: a.update({"t/lower": np.ones(4)}), LIMITS),  # lower >= upper
        (lambda c, a: a.update({"t/value": np.full((1, 3), np.inf)}), LIMITS),
        (lambda c, a: a.update({"t/feature": np.array([7], np.int32)}), LIMITS),
        (lambda c, a: c.update({"t/sizes": [4, 3]}), LIMITS),
        (lambda c, a: None, ModelLimits(4, 2)),  # three outputs, two expected
        (lambda c, a: None, ModelLimits(4, 3, spec=SPEC)),  # the baselines take no trees
        (lambda c, a: a.update({"t/fisher-w0": np.zeros((6, 4), np.float32)}), LIMITS),
    ],
)
def test_malformed_trees_are_refused(mutate, limits):
    config, arrays = encode_node_model(tree_model(), "t/")
    mutate(config, arrays)
    with pytest.raises(DecodeError):
        decode_node_model(config, arrays, "t/", limits)
