"""Codecs of trees, networks and ensemble deltas, through Flower's own records and serialisation."""

import math

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from functions.ensembles import (
    Ensemble, Limits, PredictionCache, apply_delta, average, encode_delta, encode_learner,
    pack_delta, payload_nbytes, unpack_delta,
)
from functions.errors import DecodeError
from functions.networks import NetworkSpec, build, decode_network, encode_network
from functions.params import arrays_to_record, record_to_arrays
from functions.records import payload_bytes
from functions.trees import decode_tree, encode_tree, from_sklearn

RNG = np.random.default_rng(0)
X_TRAIN, X_TEST = RNG.normal(size=(300, 6)), RNG.normal(size=(200, 6)) * 1.5


def through_flower(config, arrays):
    """(config, arrays) after a RecordDict -> protobuf bytes -> RecordDict round trip."""
    content = RecordDict({"config": ConfigRecord(dict(config)), "arrays": arrays_to_record(arrays)})
    proto = ProtoRecordDict.FromString(recorddict_to_proto(content).SerializeToString())
    received = recorddict_from_proto(proto)
    return dict(received["config"]), record_to_arrays(received["arrays"])


def regression_targets(n_outputs):
    w = RNG.normal(size=(6, n_outputs))
    return np.sin(X_TRAIN @ w) + 0.1 * RNG.normal(size=(len(X_TRAIN), n_outputs))


# --- trees -------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 3, 8, None])
@pytest.mark.parametrize("n_outputs", [1, 3])
def test_regression_tree_predicts_exactly_like_sklearn(depth, n_outputs):
    y = regression_targets(n_outputs)
    sk = DecisionTreeRegressor(max_depth=depth, random_state=0).fit(X_TRAIN, y.squeeze())
    _, arrays = through_flower({}, encode_tree(from_sklearn(sk), "t."))
    tree = decode_tree(arrays, "t.", 6, n_outputs, max_nodes=10_000)
    expected = sk.predict(X_TEST).reshape(len(X_TEST), n_outputs)
    assert np.array_equal(tree.predict(X_TEST), expected)
    assert np.array_equal(tree.apply(X_TEST), sk.apply(X_TEST.astype(np.float32)))


@pytest.mark.parametrize("depth", [2, 5, None])
def test_classification_tree_predicts_exactly_like_sklearn(depth):
    labels = np.digitize(X_TRAIN[:, 0] + X_TRAIN[:, 1] ** 2, [-0.5, 0.5, 1.5])
    sk = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X_TRAIN, labels)
    _, arrays = through_flower({}, encode_tree(from_sklearn(sk)))
    tree = decode_tree(arrays, "", 6, 4, max_nodes=10_000)
    proba = tree.predict(X_TEST)
    assert np.array_equal(proba, sk.predict_proba(X_TEST))
    assert np.array_equal(sk.classes_[proba.argmax(axis=1)], sk.predict(X_TEST))


def test_tree_of_one_leaf_and_float32_values():
    sk = DecisionTreeRegressor().fit(X_TRAIN, np.full(len(X_TRAIN), 2.5))
    assert np.array_equal(from_sklearn(sk).predict(X_TEST), np.full((len(X_TEST), 1), 2.5))
    sk = DecisionTreeRegressor(max_depth=4).fit(X_TRAIN, regression_targets(1).ravel())
    small = from_sklearn(sk, value_dtype=np.float32)
    assert small.value.dtype == np.float32
    np.testing.assert_allclose(small.predict(X_TEST)[:, 0], sk.predict(X_TEST), rtol=1e-6)


def encoded_tree():
    sk = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X_TRAIN, regression_targets(2))
    return {k: v.copy() for k, v in encode_tree(from_sklearn(sk)).items()}


def set_item(key, index, value):
    def mutate(arrays):
        arrays[key][index] = value
    return mutate


def cycle(arrays):
    """Nodes 0-2 form a tree; nodes 3 and 4 hang off node 3 itself (in-degree 1, unreachable)."""
    left, right = np.array([1, -1, -1, 4, -1], np.int32), np.array([2, -1, -1, 3, -1], np.int32)
    arrays.update(children_left=left, children_right=right,
                  feature=np.where(left == -1, -2, 0).astype(np.int32),
                  threshold=np.zeros(5), value=np.zeros((5, 2)))


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.pop("value"), "expected keys"),
    (lambda a: a.update(extra=np.zeros(1)), "expected keys"),
    (lambda a: a.update(children_left=a["children_left"].astype(np.int64)), "int32"),
    (lambda a: a.update(value=a["value"].astype(np.float16)), "float32/64"),
    (lambda a: a.update(value=a["value"][:, :1]), "outputs"),
    (lambda a: a.update(feature=a["feature"][:-1]), "lengths"),
    (cycle, "reachable"),
    (set_item("children_left", 0, 99), "outside"),
    (set_item("children_left", 0, 0), "outside"),
    (set_item("children_right", 0, 1), "parent"),
    (set_item("feature", -1, 0), "leaf"),
    (set_item("children_right", -1, 3), "leaf"),
    (set_item("feature", 0, 6), "split feature"),
    (set_item("threshold", 0, np.nan), "threshold"),
    (set_item("value", (1, 0), np.inf), "value"),
])
def test_tree_decoder_rejects(mutate, message):
    arrays = encoded_tree()
    mutate(arrays)
    with pytest.raises(DecodeError, match=message):
        decode_tree(arrays, "", 6, 2, max_nodes=100)


def test_tree_decoder_rejects_too_many_nodes():
    with pytest.raises(DecodeError, match="more than 14"):
        decode_tree(encoded_tree(), "", 6, 2, max_nodes=14)


# --- networks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    NetworkSpec((6, 64, 1)),
    NetworkSpec((6, 16, 16, 3), "tanh"),
    NetworkSpec((6, 32, 32, 2), "leaky_relu", output_bound=0.5),
])
def test_network_round_trip_gives_identical_outputs(spec):
    torch.manual_seed(0)
    net = build(spec)
    state = torch.random.get_rng_state()
    config, arrays = through_flower(*encode_network(spec, net, "n."))
    decoded = decode_network(config, arrays, "n.", max_params=10_000)
    assert torch.equal(torch.random.get_rng_state(), state)  # decoding draws no random numbers
    assert decoded.spec == spec
    assert np.array_equal(decoded.predict(X_TEST), net.predict(X_TEST))
    with torch.no_grad():
        x = torch.as_tensor(X_TEST, dtype=torch.float32)
        assert torch.equal(decoded(x), net(x))


def test_encode_network_refuses_a_module_of_another_architecture():
    with pytest.raises(ValueError):
        encode_network(NetworkSpec((6, 8, 1)), build(NetworkSpec((6, 9, 1))))
    with pytest.raises(ValueError):
        encode_network(NetworkSpec((6, 8, 1)), torch.nn.Linear(6, 1))


def encoded_network():
    torch.manual_seed(1)
    spec = NetworkSpec((6, 8, 2), "tanh")
    return encode_network(spec, build(spec))


@pytest.mark.parametrize("mutate, message", [
    (lambda c, a: a.update(w0=a["w0"].T.copy()), "shape"),
    (lambda c, a: a.update(w1=a["w1"][:, :-1].copy()), "shape"),
    (lambda c, a: a.update(b0=a["b0"].astype(np.float64)), "float32"),
    (lambda c, a: a.pop("b1"), "expected arrays"),
    (lambda c, a: a.update(w2=np.zeros((1, 1), np.float32)), "expected arrays"),
    (lambda c, a: a["w0"].__setitem__((0, 0), np.nan), "NaN"),
    (lambda c, a: c.update(activation="gelu"), "unknown activation"),
    (lambda c, a: c.update(kind="cnn"), "unknown network kind"),
    (lambda c, a: c.update(sizes=[6, 0, 2]), "sizes"),
    (lambda c, a: c.update(sizes=[6, True, 2]), "sizes"),
    (lambda c, a: c.update(sizes=[6]), "sizes"),
    (lambda c, a: c.update(sizes=[6, 100, 2]), "parameters"),
    (lambda c, a: c.update(output_bound=math.inf), "output_bound"),
    (lambda c, a: c.pop("activation"), "config keys"),
])
def test_network_decoder_rejects(mutate, message):
    config, arrays = encoded_network()
    mutate(config, arrays)
    with pytest.raises(DecodeError, match=message):
        decode_network(config, arrays, max_params=500)


# --- ensembles ---------------------------------------------------------------------------------

Y = regression_targets(2)


def boost(ensemble, rounds, scale, seed=0):
    """Server history: each round adds a depth-3 tree fitted to the residual and a small MLP."""
    torch.manual_seed(seed)
    history = [ensemble]
    for r in range(rounds):
        residual = Y - ensemble.predict(X_TRAIN)
        sk = DecisionTreeRegressor(max_depth=3, random_state=r).fit(X_TRAIN, residual)
        tree = from_sklearn(sk)
        net = build(NetworkSpec((6, 8, 2), "tanh"))
        ensemble = ensemble.extend([tree, net], [0.5, 0.05 * (r + 1)], scale=scale)
        history.append(ensemble)
    return history


@pytest.mark.parametrize("scale", [1.0, 0.9])
def test_node_applying_every_delta_predicts_exactly_like_the_server(scale):
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=4, scale=scale)
    node, cache = None, PredictionCache(X_TEST)
    for server in history:
        config, arrays = through_flower(*encode_delta(server, node.version if node else 0))
        node = apply_delta(node, config, arrays)
        assert node.version == server.version
        assert np.array_equal(node.predict(X_TEST), server.predict(X_TEST))
        cache.update(unpack_delta(config, arrays))
        if scale == 1.0:
            assert np.array_equal(cache.values, server.predict(X_TEST))
        else:
            np.testing.assert_allclose(cache.values, server.predict(X_TEST), rtol=1e-12, atol=1e-12)
    assert cache.version == history[-1].version == 8


def test_late_node_catches_up_and_collapsed_history_is_refused():
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=4, scale=0.8)
    node = apply_delta(None, *through_flower(*encode_delta(history[1], 0)))
    node = apply_delta(node, *through_flower(*encode_delta(history[4], node.version)))
    np.testing.assert_allclose(node.predict(X_TEST), history[4].predict(X_TEST), rtol=1e-12)
    assert math.isclose(history[4].delta(2).scale, 0.8 ** 3)
    with pytest.raises(ValueError, match="boundary"):
        node.delta(4)  # learners 3..8 arrived as one delta: the node cannot start inside them
    with pytest.raises(ValueError, match="boundary"):
        history[4].delta(3)  # inside one update


def test_average_of_client_deltas_is_the_average_function():
    server = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=1, scale=1.0)[-1]
    clients = [apply_delta(None, *through_flower(*encode_delta(server, 0))) for _ in range(3)]
    locals_ = [boost(c, rounds=2, scale=0.95, seed=i)[-1] for i, c in enumerate(clients)]
    uploads = [unpack_delta(*through_flower(*encode_delta(g, server.version))) for g in locals_]
    merged = average(server, uploads, [1 / 3] * 3)
    expected = sum(g.predict(X_TEST) for g in locals_) / 3
    np.testing.assert_allclose(merged.predict(X_TEST), expected, rtol=1e-12, atol=1e-12)
    assert merged.version == server.version + 3 * 4
    start = Ensemble.constant([0.0, 0.0], 6)
    firsts = [unpack_delta(*encode_delta(boost(start, 1, 0.5, seed=i)[-1], 0)) for i in range(2)]
    merged = average(start, firsts, [0.25, 0.75])
    np.testing.assert_allclose(merged.predict(X_TEST),
                               0.25 * boost(start, 1, 0.5, 0)[-1].predict(X_TEST)
                               + 0.75 * boost(start, 1, 0.5, 1)[-1].predict(X_TEST), rtol=1e-12)


def test_payload_bytes_are_what_the_records_hold():
    sk = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X_TRAIN, regression_targets(1))
    tree = from_sklearn(sk)
    assert tree.n_nodes == 15
    assert payload_nbytes({}, encode_tree(tree)) == 15 * (4 + 4 + 4 + 4 + 8)  # 360
    net = build(NetworkSpec((10, 64, 1)))
    weights, spec = (10 * 64 + 64 + 64 + 1) * 4, len("mlp") + 3 * 8 + len("relu")
    assert payload_nbytes(*encode_network(net.spec, net)) == weights + spec  # 3076 + 31
    ensemble = Ensemble.constant([0.0], 6).extend([tree], [0.1])
    config, arrays = encode_delta(ensemble, 0)
    content = RecordDict({"c": ConfigRecord(config), "a": arrays_to_record(arrays)})
    assert payload_nbytes(config, arrays) == payload_bytes(content) == 360 + 6 * 8 + 8 + 4 + 8
    assert encode_learner(tree, "x.")[0] == {"x.kind": "tree"}


def delta_parts():
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=2, scale=0.9)
    config, arrays = encode_delta(history[2], 2)
    return history[1], dict(config), dict(arrays)


@pytest.mark.parametrize("mutate, message", [
    (lambda c, a: c.update(since=1), "unexpected config key 'l4"),
    (lambda c, a: c.update(since=3), "unexpected config key 'l3"),
    (lambda c, a: c.update({"l5.weight": 1.0}), "unexpected config key"),
    (lambda c, a: c.update(count=3), "l5.weight"),
    (lambda c, a: [c.pop(k) for k in list(c) if k.startswith("l3.")], "weight"),
    (lambda c, a: c.update({"l3.weight": math.nan}), "l3.weight"),
    (lambda c, a: c.update({"l4.weight": math.inf}), "l4.weight"),
    (lambda c, a: c.update(scale=math.inf), "scale"),
    (lambda c, a: c.update({"l3.kind": "forest"}), "unknown or missing learner kind"),
    (lambda c, a: c.update(format=2), "format"),
    (lambda c, a: c.update(n_outputs=3), "outputs"),
    (lambda c, a: c.update({"l4.sizes": [5, 8, 2]}), "l4.network maps 5 -> 2"),
    (lambda c, a: a.update({"l4.w0": a["l4.w0"][:, :5].copy()}), "l4.w0: expected shape"),
    (lambda c, a: a.update(base=np.zeros(2)), "unexpected array key"),
    (lambda c, a: a["l3.threshold"].__setitem__(0, np.inf), "l3.tree: a split threshold"),
    (lambda c, a: c.update(count=True), "count"),
])
def test_delta_decoder_rejects(mutate, message):
    node, config, arrays = delta_parts()
    arrays = {k: v.copy() for k, v in arrays.items()}
    mutate(config, arrays)
    with pytest.raises(DecodeError, match=message):
        apply_delta(node, config, arrays)


def test_delta_that_does_not_continue_the_node_is_refused():
    node, config, arrays = delta_parts()  # node at version 2, delta of learners 3..4
    synced = apply_delta(None, *encode_delta(node, 0))
    older = Ensemble.constant(Y.mean(axis=0), 6)
    with pytest.raises(DecodeError, match="node is at 0"):
        apply_delta(older, config, arrays)
    ahead = apply_delta(synced, config, arrays)
    with pytest.raises(DecodeError, match="node is at 4"):
        apply_delta(ahead, config, arrays)
    with pytest.raises(DecodeError, match="cache is at 0"):
        PredictionCache(X_TEST).update(unpack_delta(config, arrays))


def test_delta_decoder_rejects_over_limit_ensembles_and_bad_bases():
    node, config, arrays = delta_parts()
    with pytest.raises(DecodeError, match="more than 3"):
        apply_delta(node, config, arrays, Limits(max_learners=3))
    with pytest.raises(DecodeError, match="more than 10"):
        apply_delta(node, config, arrays, Limits(max_nodes=10))
    full_config, full_arrays = pack_delta(node.delta(0))
    for bad in (np.zeros(2, np.float32), np.array([0.0, np.nan]), np.zeros(3)):
        with pytest.raises(DecodeError, match="base"):
            apply_delta(None, full_config, {**full_arrays, "base": bad})
