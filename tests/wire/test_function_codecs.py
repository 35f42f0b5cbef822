"""Codecs of trees, networks and ensemble deltas, through Flower's own records and serialisation."""

import math
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from functions.convnets import ConvNetSpec
from functions.convnets import build as build_cnn
from functions.ensembles import (
    Config,
    Ensemble,
    Limits,
    PredictionCache,
    average,
    pack_delta,
    unpack_delta,
)
from functions.errors import DecodeError
from functions.forest import pack_trees, unpack_trees
from functions.networks import NetworkSpec, build, decode_network, encode_network
from functions.params import arrays_to_record, record_to_arrays
from functions.records import payload_bytes, wire_bytes
from functions.trees import TreeArrays, check_tree, decode_tree, encode_tree, from_sklearn


def encode_delta(ensemble: Ensemble, since: int | None) -> tuple[Config, dict[str, np.ndarray]]:
    """The wire form of what a node at version ``since`` lacks (None: it holds nothing)."""
    return pack_delta(ensemble.snapshot() if since is None else ensemble.delta(since))


def apply_delta(
    ensemble: Ensemble | None,
    config: Mapping[str, object],
    arrays: Mapping[str, np.ndarray],
    limits: Limits = Limits(),
) -> Ensemble:
    """Decode a delta and apply it to ``ensemble`` (None: a node with nothing yet, full delta)."""
    delta = unpack_delta(config, arrays, limits)
    if ensemble is None:
        ensemble = Ensemble(np.zeros(delta.n_outputs), delta.n_features)
    return ensemble.apply(delta)


def payload_nbytes(config: Mapping[str, object], arrays: Mapping[str, np.ndarray]) -> int:
    """Payload bytes of an encoding as functions.records counts them in a message.

    Array data plus config values (8 per int or float, length of str/bytes); keys not counted.
    """
    content = RecordDict({"config": ConfigRecord(dict(config)), "arrays": arrays_to_record(arrays)})
    return payload_bytes(content)


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
    arrays.update(
        children_left=left,
        children_right=right,
        feature=np.where(left == -1, -2, 0).astype(np.int32),
        threshold=np.zeros(5),
        value=np.zeros((5, 2)),
    )


@pytest.mark.parametrize(
    "mutate, message",
    [
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
    ],
)
def test_tree_decoder_rejects(mutate, message):
    arrays = encoded_tree()
    mutate(arrays)
    with pytest.raises(DecodeError, match=message):
        decode_tree(arrays, "", 6, 2, max_nodes=100)


def test_tree_decoder_rejects_too_many_nodes():
    with pytest.raises(DecodeError, match="more than 14"):
        decode_tree(encoded_tree(), "", 6, 2, max_nodes=14)


# --- networks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        NetworkSpec((6, 64, 1)),
        NetworkSpec((6, 16, 16, 3), "tanh"),
        NetworkSpec((6, 32, 32, 2), "leaky_relu", output_bound=0.5),
    ],
)
def test_network_round_trip_gives_identical_outputs(spec):
    torch.manual_seed(0)
    net = build(spec)
    state = torch.random.get_rng_state()
    config, arrays = through_flower(*encode_network(spec, net, "n."))
    decoded = decode_network(config, arrays, "n.", max_params=10_000)
    assert torch.equal(torch.random.get_rng_state(), state)  # decoding draws no random numbers
    assert decoded.spec == spec and repr(decoded) == repr(net)  # the layers' sizes too
    assert all(p.requires_grad for p in decoded.parameters())
    for array in arrays.values():
        array[...] = 0  # the message's buffers: the network holds copies
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


@pytest.mark.parametrize(
    "mutate, message",
    [
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
    ],
)
def test_network_decoder_rejects(mutate, message):
    config, arrays = encoded_network()
    mutate(config, arrays)
    with pytest.raises(DecodeError, match=message):
        decode_network(config, arrays, max_params=500)


# --- ensembles ---------------------------------------------------------------------------------

Y = regression_targets(2)


def float32_tree(x, target, depth=3, seed=0):
    sk = DecisionTreeRegressor(max_depth=depth, random_state=seed).fit(x, target)
    return from_sklearn(sk, value_dtype=np.float32)


def boost(ensemble, rounds, scale, seed=0):
    """Server history: each round adds a depth-3 tree fitted to the residual and a small MLP."""
    torch.manual_seed(seed)
    history = [ensemble]
    for r in range(rounds):
        tree = float32_tree(X_TRAIN, Y - ensemble.predict(X_TRAIN), seed=r)
        net = build(NetworkSpec((6, 8, 2), "tanh"))
        ensemble = ensemble.extend([tree, net], [0.5, 0.05 * (r + 1)], scale=scale)
        history.append(ensemble)
    return history


@pytest.mark.parametrize("scale", [1.0, 0.9])
def test_node_applying_every_delta_predicts_like_the_server(scale):
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=4, scale=scale)
    node, cache = None, PredictionCache(X_TEST)
    for server in history:
        config, arrays = through_flower(*encode_delta(server, node.version if node else None))
        node = apply_delta(node, config, arrays)
        assert node.version == server.version
        np.testing.assert_allclose(node.predict(X_TEST), server.predict(X_TEST), rtol=1e-12)
        cache.update(unpack_delta(config, arrays))
        np.testing.assert_allclose(cache.values, server.predict(X_TEST), rtol=1e-6, atol=1e-6)
    assert cache.version == history[-1].version == 8


def test_late_node_catches_up_and_collapsed_history_is_refused():
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=4, scale=0.8)
    cache = PredictionCache(X_TEST)
    first = through_flower(*encode_delta(history[1], None))
    node = apply_delta(None, *first)
    cache.update(unpack_delta(*first))
    skipped = through_flower(*encode_delta(history[4], node.version))  # versions 3..8 at once
    assert skipped[0]["since"] == 2 and skipped[0]["count"] == 6
    node = apply_delta(node, *skipped)
    cache.update(unpack_delta(*skipped))
    np.testing.assert_allclose(node.predict(X_TEST), history[4].predict(X_TEST), rtol=1e-12)
    np.testing.assert_allclose(cache.values, history[4].predict(X_TEST), rtol=1e-6, atol=1e-6)
    assert node.version == cache.version == history[4].version == 8
    assert math.isclose(history[4].delta(2).scale, 0.8**3)
    with pytest.raises(ValueError, match="boundary"):
        node.delta(4)  # learners 3..8 arrived as one delta: the node cannot start inside them
    with pytest.raises(ValueError, match="boundary"):
        history[4].delta(3)  # inside one update


def test_own_learners_left_out_give_the_same_values():
    """A node's own learners are not sent back; it adds own_factor times their values."""
    server = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=1, scale=1.0)[-1]
    rng = np.random.default_rng(1)
    increments = [
        [float32_tree(X_TRAIN, rng.normal(size=Y.shape), seed=i) for _ in range(2)]
        for i in range(3)
    ]
    weights = [-0.5, -0.25]
    merged = server.extend(
        [h for inc in increments for h in inc], [w / 3 for _ in increments for w in weights], 0.9
    )
    later = merged.extend([float32_tree(X_TRAIN, Y)], [0.1], 0.5)
    # float32-valued trees predict float32: the node keeps its values in float64
    own = sum(w * h.predict(X_TEST).astype(np.float64) for w, h in zip(weights, increments[1]))
    first = server.version + 3  # node 1's learners: sequence numbers first, first + 1
    delta = later.delta(
        server.version, omit=(first, 2), own_factor=later.scales_after(server.version) / 3
    )
    assert delta.own_count == 2 and len(delta.learners) == 5 and delta.version == later.version
    config, arrays = through_flower(*pack_delta(delta))
    cache = PredictionCache(X_TEST, server.version, server.predict(X_TEST))
    values = cache.update(unpack_delta(config, arrays), own)
    np.testing.assert_allclose(values, later.predict(X_TEST), rtol=1e-6, atol=1e-6)
    full = PredictionCache(X_TEST, server.version, server.predict(X_TEST))
    full.update(unpack_delta(*through_flower(*encode_delta(later, server.version))))
    np.testing.assert_allclose(values, full.values, rtol=1e-12, atol=1e-12)  # same as no omission
    assert cache.version == full.version == later.version
    assert payload_nbytes(*pack_delta(delta)) < payload_nbytes(*encode_delta(later, server.version))
    with pytest.raises(DecodeError, match="own learners"):
        PredictionCache(X_TEST, server.version, server.predict(X_TEST)).update(delta)
    with pytest.raises(DecodeError, match="own learners"):
        PredictionCache(X_TEST, server.version, server.predict(X_TEST)).update(delta, own[:5])
    with pytest.raises(DecodeError, match="own learners"):
        server.apply(delta)
    with pytest.raises(ValueError, match="not after"):
        later.delta(merged.version, omit=(first, 2))


def test_scale_zero_replaces_the_function_and_behind_nodes_need_a_snapshot():
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=2, scale=1.0)
    distilled = history[-1].extend([float32_tree(X_TRAIN, Y, depth=5)], [1.0], scale=0.0)
    assert distilled.offset == 4 and distilled.version == 5 and len(distilled.learners) == 1
    np.testing.assert_allclose(
        distilled.predict(X_TEST), distilled.learners[0].predict(X_TEST), rtol=1e-12
    )
    replacement = through_flower(*encode_delta(distilled, 4))
    assert replacement[0]["scale"] == 0.0 and not replacement[0]["full"]
    node = apply_delta(history[-1], *replacement)
    assert node.offset == 4 and node.version == 5
    np.testing.assert_allclose(node.predict(X_TEST), distilled.predict(X_TEST), rtol=1e-12)
    cache = PredictionCache(X_TEST, 4, history[-1].predict(X_TEST))
    cache.update(unpack_delta(*replacement))
    np.testing.assert_allclose(cache.values, distilled.predict(X_TEST), rtol=1e-6, atol=1e-6)
    for behind in (0, 2):  # a node behind the offset: its learners are gone, it needs a snapshot
        with pytest.raises(ValueError, match="boundary"):
            distilled.delta(behind)
    fresh = apply_delta(None, *through_flower(*encode_delta(distilled, None)))
    assert fresh.offset == 4 and fresh.version == 5
    np.testing.assert_allclose(fresh.predict(X_TEST), distilled.predict(X_TEST), rtol=1e-12)
    behind = PredictionCache(X_TEST, 2, history[1].predict(X_TEST))
    behind.update(unpack_delta(*through_flower(*encode_delta(distilled, None))))
    assert behind.version == 5
    np.testing.assert_allclose(behind.values, distilled.predict(X_TEST), rtol=1e-6, atol=1e-6)
    later = distilled.extend([float32_tree(X_TRAIN, Y, seed=9)], [0.5], scale=0.5)
    assert math.isclose(later.delta(4).scale, 0.0) and later.delta(5).scale == 0.5


def test_average_of_client_increments_is_the_average_function():
    server = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=1, scale=1.0)[-1]
    clients = [apply_delta(None, *through_flower(*encode_delta(server, None))) for _ in range(3)]
    locals_ = [boost(c, rounds=2, scale=0.95, seed=i)[-1] for i, c in enumerate(clients)]
    uploads = [unpack_delta(*through_flower(*encode_delta(g, server.version))) for g in locals_]
    merged = average(server, uploads, [1 / 3] * 3)
    expected = sum(g.predict(X_TEST) for g in locals_) / 3
    np.testing.assert_allclose(merged.predict(X_TEST), expected, rtol=1e-12, atol=1e-12)
    assert merged.version == server.version + 3 * 4
    with pytest.raises(ValueError, match="increment"):
        average(server, [server.snapshot()], [1.0])


def test_mixed_groups_round_trip():
    torch.manual_seed(0)
    x = RNG.normal(size=(40, 2 * 12 * 12))
    cnn_spec = ConvNetSpec((2, 12, 12), 3, channels=(4, 5), kernel=3, hidden=(7,))
    learners = [
        float32_tree(x, RNG.normal(size=(40, 3))),
        float32_tree(x, RNG.normal(size=(40, 3))),
        build(NetworkSpec((288, 5, 3), "leaky_relu")),
        build_cnn(cnn_spec),
        build_cnn(cnn_spec),
        float32_tree(x, RNG.normal(size=(40, 3)), depth=1),
    ]
    ensemble = Ensemble.constant([0.0, 1.0, 2.0], 288).extend(learners, [1, -2, 3, -4, 5, -6])
    config, arrays = through_flower(*encode_delta(ensemble, None))
    assert config["groups"] == 4 and config["g2.kind"] == "cnn" and config["g2.count"] == 2
    assert [config[f"g{i}.kind"] for i in range(4)] == ["tree", "mlp", "cnn", "tree"]
    assert config["g0.count"] == 2 and config["g1.count"] == 1 and config["g3.count"] == 1
    back = apply_delta(None, config, arrays)
    np.testing.assert_allclose(back.predict(x), ensemble.predict(x), rtol=1e-6, atol=1e-6)
    assert back.weights == ensemble.weights and np.array_equal(back.base, ensemble.base)
    for sent, received in zip(ensemble.learners, back.learners):  # each learner exactly
        assert type(received) is type(sent) and received.spec == sent.spec
        assert np.array_equal(received.predict(x), sent.predict(x))
        if not isinstance(sent, TreeArrays):
            for a, b in zip(sent.state_dict().values(), received.state_dict().values()):
                assert torch.equal(a, b)


def test_packed_trees_round_trip_exactly_through_flower():
    """Trees of several shapes (one leaf, deep, classifier probabilities) in one group."""
    rng = np.random.default_rng(5)
    target = rng.normal(size=(len(X_TRAIN), 3))
    trees = [float32_tree(X_TRAIN, target, depth=d, seed=d) for d in (1, 3, 8, None)]
    trees.insert(
        1,
        from_sklearn(
            DecisionTreeRegressor().fit(X_TRAIN, np.ones((300, 3))), value_dtype=np.float32
        ),
    )  # a single leaf
    assert trees[1].n_nodes == 1
    ensemble = Ensemble.constant(np.zeros(3), 6).extend(trees, [1.0, -0.5, 0.25, 2.0, -1.0])
    config, arrays = through_flower(*encode_delta(ensemble, 0))
    assert config["groups"] == 1 and set(arrays) == {
        "weights",
        "g0.sizes",
        "g0.feature",
        "g0.threshold",
        "g0.value",
    }
    back = unpack_delta(config, arrays)
    for sent, received in zip(trees, back.learners):
        assert received.n_nodes == sent.n_nodes and received.depth == sent.depth
        assert np.array_equal(received.predict(X_TEST), sent.predict(X_TEST))
        assert np.array_equal(received.predict(X_TRAIN), sent.predict(X_TRAIN))


def chain_tree(depth: int, n_features: int, n_outputs: int) -> TreeArrays:
    """A tree that splits only its right child: depth ``depth`` with 2 depth + 1 nodes."""
    n = 2 * depth + 1
    left, right = np.full(n, -1, np.int32), np.full(n, -1, np.int32)
    feature, threshold = np.full(n, -2, np.int32), np.full(n, -2.0, np.float32)
    for level in range(depth):
        node = 2 * level
        left[node], right[node] = node + 1, node + 2
        feature[node], threshold[node] = level % n_features, float(level)
    values = np.arange(n * n_outputs, dtype=np.float32).reshape(n, n_outputs)
    return TreeArrays(left, right, feature, threshold, values, n_features)


def test_decoded_trees_pass_the_full_tree_check_with_the_depth_it_finds():
    """unpack_trees builds trees without check_tree: its vectorised checks and depths must
    agree with check_tree on every tree, chains and single leaves included."""
    rng = np.random.default_rng(11)
    trees = [chain_tree(d, 6, 3) for d in (0, 1, 2, 37)]
    trees += [
        float32_tree(X_TRAIN, rng.normal(size=(len(X_TRAIN), 3)), depth=d, seed=d)
        for d in (1, 2, 5, 9, None)
    ]
    received = unpack_trees(pack_trees(trees), "", len(trees), 6, 3, 10_000)
    for sent, back in zip(trees, received):
        assert back.depth == check_tree(back) == sent.depth
        assert np.array_equal(back.predict(X_TEST), sent.predict(X_TEST))


def test_trees_must_be_float32_valued_to_be_packed():
    sk = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X_TRAIN, regression_targets(2))
    ensemble = Ensemble.constant(np.zeros(2), 6).extend([from_sklearn(sk)], [1.0])
    with pytest.raises(ValueError, match="float32"):
        encode_delta(ensemble, 0)
    encode_delta(
        Ensemble.constant(np.zeros(2), 6).extend([from_sklearn(sk, value_dtype=np.float32)], [1.0]),
        0,
    )


def test_payload_bytes_are_what_the_records_hold():
    tree = float32_tree(X_TRAIN, regression_targets(1))
    assert tree.n_nodes == 15
    assert payload_nbytes({}, encode_tree(tree)) == 15 * (4 + 4 + 4 + 4 + 4)  # 300, one tree
    net = build(NetworkSpec((10, 64, 1)))
    weights, spec = (10 * 64 + 64 + 64 + 1) * 4, len("mlp") + 3 * 8 + len("relu")
    assert payload_nbytes(*encode_network(net.spec, net)) == weights + spec  # 3076 + 31
    config, arrays = encode_delta(Ensemble.constant([0.0], 6).extend([tree], [0.1]), None)
    content = RecordDict({"c": ConfigRecord(config), "a": arrays_to_record(arrays)})
    # packed: sizes (uint8) + features (uint8) + 7 float32 thresholds + 8 float32 leaf values,
    # the weight and the base; header: 9 numbers, one bool, "tree", g0.count
    packed = 1 + 15 + 7 * 4 + 8 * 4 + 8 + 8
    assert payload_nbytes(config, arrays) == payload_bytes(content) == packed + 9 * 8 + 1 + 4 + 8


def format1_layout(trees, weights):
    """The same trees as wire format 1 sent them: keys l{k}.*, five arrays per tree."""
    config = {
        "format": 1,
        "since": 0,
        "count": len(trees),
        "scale": 1.0,
        "n_features": trees[0].n_features,
        "n_outputs": trees[0].n_outputs,
    }
    arrays = {}
    for k, (tree, weight) in enumerate(zip(trees, weights), 1):
        config[f"l{k}.weight"], config[f"l{k}.kind"] = weight, "tree"
        arrays.update(encode_tree(tree, f"l{k}."))
    return config, arrays


def test_fifty_trees_are_five_arrays_on_the_wire():
    """The issue's figure: 50 depth-3 trees were 250 arrays, 17.4 kB payload, 64.2 kB wire.

    Here 50 depth-3 trees on 64 features with 10 outputs (digits-sized), as one increment."""
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(500, 64)), rng.normal(size=(500, 10))
    trees = [float32_tree(x, y + i, seed=i) for i in range(50)]
    weights = [0.1] * 50
    config, arrays = encode_delta(Ensemble.constant(np.zeros(10), 64).extend(trees, weights), 0)
    assert not config["full"] and "base" not in arrays  # an increment carries no base
    assert len(arrays) == 5  # weights + sizes, feature, threshold, value
    content = RecordDict({"c": ConfigRecord(config), "a": arrays_to_record(arrays)})
    payload, wire = payload_bytes(content), wire_bytes(content)
    nodes = sum(t.n_nodes for t in trees)
    leaves = sum(int((t.children_left == -1).sum()) for t in trees)
    # sizes and features as uint8, float32 thresholds and leaf values, float64 weights; header:
    # 8 numbers, a bool, groups, "tree" and g0.count
    expected = 50 + nodes + 4 * (nodes - leaves) + 4 * 10 * leaves + 8 * 50
    assert payload == expected + 8 * 8 + 1 + 8 + len("tree") + 8
    old = RecordDict(
        {
            "c": ConfigRecord(format1_layout(trees, weights)[0]),
            "a": arrays_to_record(format1_layout(trees, weights)[1]),
        }
    )
    old_payload, old_wire = payload_bytes(old), wire_bytes(old)
    print(
        f"\n50 depth-3 trees, 64 features, 10 outputs: format 2 payload {payload:,} B, wire "
        f"{wire:,} B ({len(arrays)} arrays); format 1 layout of the same trees: payload "
        f"{old_payload:,} B, wire {old_wire:,} B ({len(old['a'])} arrays)"
    )
    assert wire <= 1.1 * payload
    assert payload < old_payload / 2 and wire < old_wire / 4


def delta_parts():
    history = boost(Ensemble.constant(Y.mean(axis=0), 6), rounds=2, scale=0.9)
    config, arrays = encode_delta(history[2], 2)
    return history[1], dict(config), dict(arrays)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c, a: c.update(format=1), "format"),
        (lambda c, a: c.update(full=1), "full"),
        (lambda c, a: c.update(since=3), "continues version 3"),
        (lambda c, a: c.update({"g5.count": 1}), "unexpected config key 'g5.count'"),
        (lambda c, a: c.update({"l3.weight": 1.0}), "unexpected config key"),
        (lambda c, a: c.update(count=3), "weights: expected finite float64 of shape \\(3,\\)"),
        (lambda c, a: c.update(groups=1), "unexpected config key 'g1"),
        (lambda c, a: c.update({"g0.count": 2}), "g0.sizes: expected shape"),
        (lambda c, a: c.pop("g1.count"), "g1.count"),
        (lambda c, a: a.update(weights=np.array([0.5, np.nan])), "weights"),
        (lambda c, a: a.update(weights=np.array([0.5, 0.1], np.float32)), "weights"),
        (lambda c, a: c.update(scale=math.inf), "scale"),
        (lambda c, a: c.update(own_factor=0.5), "own_factor without own learners"),
        (lambda c, a: c.update({"g0.kind": "forest"}), "unknown or missing learner kind"),
        (lambda c, a: c.update(n_outputs=3), "outputs|shape"),
        (lambda c, a: c.update({"g1.sizes": [5, 8, 2]}), "g1.network maps 5 -> 2"),
        (lambda c, a: a.update({"g1.w0": a["g1.w0"][:, :, :5].copy()}), "g1.w0: expected shape"),
        (lambda c, a: a["g1.w0"].__setitem__((0, 0, 0), np.nan), "g1.w0: contains NaN"),
        (lambda c, a: a.update(base=np.zeros(2)), "unexpected array key"),
        (lambda c, a: a.pop("g0.value"), "g0.tree: expected"),
        (lambda c, a: a["g0.threshold"].__setitem__(0, np.inf), "g0.threshold"),
        (
            lambda c, a: a.update({"g0.feature": np.full_like(a["g0.feature"], 255)}),
            "do not form one full binary tree",
        ),
        (lambda c, a: c.update(count=True), "count"),
        (lambda c, a: c.update(format="2"), "format"),
        (lambda c, a: c.pop("format"), "format"),
        (lambda c, a: c.pop("scale"), "scale"),
        (
            lambda c, a: (c.update(count=5), a.update(weights=np.ones(5))),
            "the groups hold 2 learners, count says 5",
        ),
        (
            lambda c, a: (c.update({"count": 3, "g0.count": 2}), a.update(weights=np.ones(3))),
            "g0.sizes: expected shape \\(2,\\)",
        ),
        (lambda c, a: c.update({"g0.count": 0}), "g0.count: expected an int"),
        (lambda c, a: c.update({"g0.count": 4}), "g0.count: expected an int in \\[1, 2\\]"),
        (lambda c, a: c.update({"g0.count": 1.0}), "g0.count: expected an int"),
        (lambda c, a: (c.update(count=3, groups=3), a.update(weights=np.ones(3))), "g2.count"),
        (lambda c, a: c.update(groups=5), "groups: 5 groups for 2 learners"),
        (lambda c, a: c.update(groups=0), "groups"),
        (lambda c, a: a.pop("weights"), "weights"),
        (lambda c, a: a.update(weights=np.array([0.5, np.inf])), "weights"),
        (lambda c, a: a.update(weights=np.ones(2, np.int64)), "weights"),
        (lambda c, a: a.update({"g0.extra": np.zeros(1)}), "g0.tree: expected config keys"),
        (lambda c, a: a.update({"g1.w9": np.zeros((2, 1), np.float32)}), "g1.expected arrays"),
        (lambda c, a: a.update({"g9.w0": np.zeros(1)}), "unexpected array key 'g9.w0'"),
        (lambda c, a: a.update(extra=np.zeros(1)), "unexpected array key 'extra'"),
        (lambda c, a: c.update({"g0.depth": 3}), "g0.tree: expected config keys"),
        (lambda c, a: c.pop("g1.activation"), "g1.network: expected config keys"),
        (lambda c, a: c.update({"g1.sizes": [6, 8, 3]}), "g1.network maps 6 -> 3, expected 6 -> 2"),
        (lambda c, a: c.update({"g1.kind": "cnn"}), "g1"),
        (
            lambda c, a: a.update({"g1.b1": a["g1.b1"].astype(np.float64)}),
            "g1.b1: expected float32",
        ),
        (
            lambda c, a: a.update({"g1.b0": np.concatenate([a["g1.b0"]] * 2)}),
            "g1.b0: expected shape \\(1, 8\\)",
        ),
        (lambda c, a: a["g1.b0"].__setitem__((0, 0), np.inf), "g1.b0: contains NaN or inf"),
        (lambda c, a: a["g0.value"].__setitem__((0, 0), np.nan), "g0.value: contains NaN"),
        (lambda c, a: a.update({"g0.value": a["g0.value"].astype(np.float64)}), "g0.value"),
        (
            lambda c, a: a.update({"g0.feature": a["g0.feature"].astype(np.float32)}),
            "g0.feature: expected an integer array",
        ),
        (lambda c, a: a["g0.feature"].__setitem__(0, 6), "g0.feature: a split feature is outside"),
        (lambda c, a: a["g0.feature"].__setitem__(0, 255), "tree 0 do not form one full binary"),
        (lambda c, a: a["g0.feature"].__setitem__(-1, 0), "do not form one full binary tree"),
        (
            lambda c, a: a.update(
                {"g0.sizes": a["g0.sizes"] - 1, "g0.feature": a["g0.feature"][:-1]}
            ),
            "do not form one full binary tree",
        ),
        (lambda c, a: a.update({"g0.sizes": np.zeros(1, np.uint8)}), "g0.sizes: a tree has fewer"),
    ],
)
def test_delta_decoder_rejects(mutate, message):
    node, config, arrays = delta_parts()
    arrays = {k: v.copy() for k, v in arrays.items()}
    mutate(config, arrays)
    with pytest.raises(DecodeError, match=message):
        apply_delta(node, config, arrays)


def test_a_full_delta_with_scale_or_own_learners_is_refused():
    node, _, _ = delta_parts()
    config, arrays = pack_delta(node.snapshot())
    for change in ({"scale": 0.5}, {"own_count": 1, "own_factor": 0.5}):
        with pytest.raises(DecodeError, match="full delta"):
            unpack_delta({**config, **change}, arrays)


def test_a_cnn_spec_too_large_for_its_image_is_refused():
    spec = ConvNetSpec((1, 12, 12), 2, channels=(3,), kernel=3, hidden=(4,))
    config, arrays = encode_delta(
        Ensemble.constant([0.0, 0.0], 144).extend([build_cnn(spec)], [1.0]), None
    )
    unpack_delta(config, arrays)
    with pytest.raises(DecodeError, match="too small"):
        unpack_delta({**config, "g0.channels": [3, 3, 3]}, arrays)
    with pytest.raises(DecodeError, match="too small"):
        unpack_delta({**config, "g0.kernel": 13}, arrays)
    with pytest.raises(DecodeError, match="g0.network maps 156 -> 2, expected 144 -> 2"):
        unpack_delta({**config, "g0.input_shape": [1, 12, 13]}, arrays)
    with pytest.raises(DecodeError, match="g0.cw0: expected shape"):
        unpack_delta({**config, "g0.input_shape": [2, 12, 6]}, arrays)  # 144 inputs, 2 channels


def test_delta_that_does_not_continue_the_node_is_refused():
    node, config, arrays = delta_parts()  # node at version 2, delta of learners 3..4
    synced = apply_delta(None, *encode_delta(node, None))
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
    with pytest.raises(DecodeError, match="parameters is more than 20"):
        apply_delta(node, config, arrays, Limits(max_params=20))
    with pytest.raises(DecodeError, match="n_features"):
        apply_delta(node, config, arrays, Limits(max_features=5))
    with pytest.raises(DecodeError, match="n_outputs"):
        apply_delta(node, config, arrays, Limits(max_outputs=1))
    apply_delta(node, config, arrays, Limits(max_learners=4, max_nodes=15, max_params=90))
    full_config, full_arrays = pack_delta(node.snapshot())
    for bad in (np.zeros(2, np.float32), np.array([0.0, np.nan]), np.zeros(3)):
        with pytest.raises(DecodeError, match="base"):
            apply_delta(None, full_config, {**full_arrays, "base": bad})
