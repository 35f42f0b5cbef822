"""The ensemble sync FFGB, its one-shot FFGB.L and the frame tests share: what each node is
sent, and learners packed once however many nodes receive them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.tree import DecisionTreeRegressor

import functions.ensembles as ensembles
from functions.ensembles import (
    Delta,
    Ensemble,
    PackCache,
    PredictionCache,
    pack_delta,
    unpack_delta,
)
from functions.networks import NetworkSpec
from functions.params import record_to_arrays
from functions.trees import from_sklearn
from oracles.weak_learning import new_network
from strategies.ensemble_sync import EnsembleSync, SyncSlot

RNG = np.random.default_rng(0)
X = RNG.normal(size=(400, 3))
OUTPUTS = 2


def tree(leaves: int, seed: int):
    y = np.random.default_rng(seed).normal(size=(len(X), OUTPUTS))
    sk = DecisionTreeRegressor(max_leaf_nodes=leaves, random_state=seed).fit(X, y)
    return from_sklearn(sk, value_dtype=np.float32)


def increment(version: int, learners: list) -> Delta:
    return Delta(version, 1.0, tuple(learners), tuple(0.5 for _ in learners), X.shape[1], OUTPUTS)


def same_packing(a: tuple, b: tuple) -> bool:
    (config_a, arrays_a), (config_b, arrays_b) = a, b
    return (
        config_a == config_b
        and arrays_a.keys() == arrays_b.keys()
        and all(
            arrays_a[k].dtype == arrays_b[k].dtype and np.array_equal(arrays_a[k], arrays_b[k])
            for k in arrays_a
        )
    )


@pytest.mark.parametrize("kind", ["trees", "networks"])
def test_a_delta_packed_from_the_cache_is_the_delta_packed_whole(kind):
    if kind == "trees":  # 3 .. 401 nodes: the sizes dtype of a run depends on its largest tree
        learners = [tree(leaves, seed) for seed, leaves in enumerate([2, 5, 201, 3])]
    else:
        spec = NetworkSpec((X.shape[1], 4, OUTPUTS))
        learners = [new_network(spec, seed) for seed in range(4)]
    cache = PackCache()
    for part in (learners[:1], learners[2:], learners):  # packs made for other deltas, reused
        delta = increment(0, part)
        assert same_packing(pack_delta(delta, cache), pack_delta(delta))
    config, arrays = pack_delta(increment(0, learners), cache)
    state = torch.random.get_rng_state()
    decoded = unpack_delta(config, arrays)
    assert torch.equal(torch.random.get_rng_state(), state)  # decoding draws no random numbers
    assert np.array_equal(
        ensembles.weighted_sum(decoded.learners, decoded.weights, X, OUTPUTS),
        ensembles.weighted_sum(learners, [0.5] * 4, X, OUTPUTS),
    )


def four_nodes_one_round(sync: EnsembleSync) -> list[SyncSlot]:
    slots = [SyncSlot() for _ in range(4)]
    for slot in slots:
        sync.records_for(slot)
    sync.average(
        [
            (slot, increment(0, [tree(4, 10 * i), tree(3, 10 * i + 1)]))
            for i, slot in enumerate(slots)
        ]
    )
    return slots


def test_each_node_gets_the_others_learners_and_how_its_own_entered():
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots = four_nodes_one_round(sync)
    delta = sync.delta_for(slots[1])
    assert (delta.since, delta.own_count, delta.own_factor) == (0, 2, 0.25)
    own = sync.ensemble.learners[2:4]
    assert len(delta.learners) == 6 and not set(map(id, own)) & set(map(id, delta.learners))
    assert sync.delta_for(slots[1]).own_count == 0  # own learners are left out once


def test_a_node_that_failed_or_holds_an_old_version_gets_everything():
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots = four_nodes_one_round(sync)
    slots[0].needs_sync = True  # its reply was an error
    assert sync.delta_for(slots[0]).full
    sync.rebuild(sync.ensemble.learners, [1.0] * 8)  # a new version with no history
    assert sync.delta_for(slots[2]).full
    slots[3].lose()
    assert sync.delta_for(slots[3]).full and slots[3].own_count == 0


def test_a_distilled_student_replaces_the_ensemble_and_every_node_forgets_its_own():
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots = four_nodes_one_round(sync)
    before = sync.replace(tree(2, 99), slots)
    assert before == 8 and sync.ensemble.offset == 8 and len(sync.ensemble.learners) == 1
    assert all(slot.own_count == 0 for slot in slots)
    delta = sync.delta_for(slots[0])  # it held version 0, from before the replacement
    assert delta.full and (delta.since, len(delta.learners)) == (8, 1)


def test_a_rounds_learners_are_packed_once_for_all_recipients(monkeypatch):
    packed = []
    original = ensembles._pack_group
    monkeypatch.setattr(
        ensembles,
        "_pack_group",
        lambda group, prefix: packed.append(len(group)) or original(group, prefix),
    )
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots = four_nodes_one_round(sync)
    packed.clear()
    received = [sync.records_for(slot)[2] for slot in slots]
    assert received == [6, 6, 6, 6]  # (N - 1) K learners each
    assert packed == [1] * 8  # N K packs, one learner each, not N (N - 1) K


def test_a_shared_downlink_is_one_set_of_records_that_moves_every_node_to_the_same_function():
    """``share``: the nodes at one version get the same record objects (own learners included,
    N K), packed once; a node's values after it equal those after its per-node delta plus its
    own learners' values, to rounding."""
    per_node = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    shared = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots_a, slots_b = four_nodes_one_round(per_node), four_nodes_one_round(shared)
    received = [shared.records_for(slot, share=True) for slot in slots_b]
    assert all(r[0] is received[0][0] and r[1] is received[0][1] for r in received)
    assert [r[2] for r in received] == [8] * 4 and all(s.own_count == 0 for s in slots_b)
    assert all(s.version == shared.ensemble.version for s in slots_b)
    whole = unpack_delta(dict(received[0][0]), record_to_arrays(received[0][1]))
    assert (whole.since, whole.own_count, whole.version) == (0, 0, 8)
    start = np.zeros((len(X), OUTPUTS))
    for node, slot in enumerate(slots_a):
        config, arrays, count = per_node.records_for(slot)
        mine = unpack_delta(dict(config), record_to_arrays(arrays))
        own = ensembles.weighted_sum(
            [tree(4, 10 * node), tree(3, 10 * node + 1)], [0.5, 0.5], X, OUTPUTS
        )
        expected = PredictionCache(X, 0, start.copy()).update(mine, own)
        assert count == 6 and np.allclose(
            PredictionCache(X, 0, start.copy()).update(whole), expected, rtol=0, atol=1e-12
        )


def test_a_shared_downlink_is_packed_once_per_version_and_rebuilt_for_a_new_ensemble():
    sync = EnsembleSync(Ensemble.constant(np.zeros(OUTPUTS), X.shape[1]))
    slots = four_nodes_one_round(sync)
    slots[0].needs_sync = True  # its reply was an error: the whole ensemble, its own records
    first = [sync.records_for(slot, share=True) for slot in slots]
    assert first[0][0]["full"] and not first[1][0]["full"]
    assert first[1][1] is first[2][1] is first[3][1] and first[0][1] is not first[1][1]
    sync.average([(slot, increment(8, [tree(2, 50 + i)])) for i, slot in enumerate(slots)])
    second = [sync.records_for(slot, share=True) for slot in slots]
    assert second[0][1] is second[3][1] is not first[1][1]
    assert (second[0][0]["since"], second[0][2]) == (8, 4)
