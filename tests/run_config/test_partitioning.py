"""Partitioners: disjoint, complete where they should be, seeded, and shaped as the papers say."""

import numpy as np
import pytest

from tasks.datasets import as_class_labels, load_task
from tasks.errors import ConfigError
from tasks.partitioning import PARTITIONING_NAMES, partition

DIGITS = load_task("digits")
LABELS, FEATURES = DIGITS.y_train, DIGITS.x_train


def _split(scheme: str, seed: int = 0, num_partitions: int = 10, **params) -> list[np.ndarray]:
    return partition(scheme, num_partitions, LABELS, FEATURES, seed, **params)


def _label_tv(part: np.ndarray, labels: np.ndarray = LABELS) -> float:
    pooled = np.bincount(labels, minlength=10) / len(labels)
    local = np.bincount(labels[part], minlength=10) / len(part)
    return float(0.5 * np.abs(local - pooled).sum())


@pytest.mark.parametrize("scheme", PARTITIONING_NAMES)
def test_partitions_are_sorted_disjoint_non_empty_and_complete(scheme):
    parts = _split(scheme)
    assert len(parts) == 10
    assert all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    assert all(np.all(np.diff(p) > 0) for p in parts)
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined) == len(LABELS)  # 10 clients x 3 labels cover all
    assert joined.min() >= 0 and joined.max() < len(LABELS)


@pytest.mark.parametrize("scheme", PARTITIONING_NAMES)
def test_same_seed_same_partition(scheme):
    for a, b in zip(_split(scheme, seed=7), _split(scheme, seed=7)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("scheme", [s for s in PARTITIONING_NAMES if s != "by-class"])
def test_another_seed_another_partition(scheme):
    first, second = _split(scheme, seed=0), _split(scheme, seed=1)
    assert any(not np.array_equal(a, b) for a, b in zip(first, second))


def test_by_class_gives_client_p_class_p():
    for p, part in enumerate(_split("by-class")):
        assert set(LABELS[part].tolist()) == {p}
        assert len(part) == np.sum(LABELS == p)


def test_iid_sizes_are_balanced():
    sizes = [len(p) for p in _split("iid")]
    assert max(sizes) - min(sizes) <= 1
    assert max(_label_tv(p) for p in _split("iid")) < 0.2


def test_label_sort_without_iid_share_gives_contiguous_label_ranges():
    parts = _split("label-sort", s=0.0)
    ranges = [(LABELS[p].min(), LABELS[p].max()) for p in parts]
    for (_, high), (low, _) in zip(ranges, ranges[1:]):
        assert high <= low
    assert all(len(np.unique(LABELS[p])) <= 2 for p in parts)
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1


def test_label_sort_with_only_iid_share_looks_iid():
    parts = _split("label-sort", s=1.0)
    assert all(len(np.unique(LABELS[p])) == 10 for p in parts)
    assert max(_label_tv(p) for p in parts) < 0.2


def test_label_sort_heterogeneity_decreases_with_s():
    tv = {s: np.mean([_label_tv(p) for p in _split("label-sort", s=s)]) for s in (0.0, 0.3, 0.7)}
    assert tv[0.0] > tv[0.3] > tv[0.7]
    assert tv[0.0] > 0.7


def test_label_sort_never_empties_a_partition():
    labels = np.array([0, 0, 1, 1, 2, 2, 3])
    parts = partition("label-sort", 7, labels, seed=0, s=0.5)
    assert [len(p) for p in parts] == [1] * 7


@pytest.mark.parametrize("per_client", [1, 2, 3, 5])
def test_labels_per_client_limits_labels_and_covers_all(per_client):
    parts = _split("labels-per-client", labels_per_client=per_client)
    assert all(len(np.unique(LABELS[p])) == per_client for p in parts)
    assert set(np.concatenate([LABELS[p] for p in parts]).tolist()) == set(range(10))


def test_labels_per_client_with_few_clients_covers_as_many_labels_as_possible():
    parts = _split("labels-per-client", num_partitions=2, labels_per_client=3)
    held = [set(LABELS[p].tolist()) for p in parts]
    assert held == [{0, 1, 2}, {3, 4, 5}]
    assert sum(len(p) for p in parts) == np.isin(LABELS, range(6)).sum()


def test_shifted_labels_gives_user_u_labels_u_to_u_plus_c_with_unequal_sizes():
    parts = _split("shifted-labels", num_partitions=10, labels_per_client=3)
    assert [sorted(set(LABELS[p].tolist())) for p in parts] == [
        sorted({u % 10, (u + 1) % 10, (u + 2) % 10}) for u in range(10)
    ]
    assert sum(len(p) for p in parts) == len(LABELS)  # every sample of a held class is used
    sizes = [len(p) for p in parts]
    assert max(sizes) > 1.3 * min(sizes)  # log-normal shares, not an even split


def test_dirichlet_skew_grows_as_alpha_shrinks():
    skewed = np.mean([_label_tv(p) for p in _split("dirichlet", alpha=0.1)])
    mild = np.mean([_label_tv(p) for p in _split("dirichlet", alpha=100.0)])
    assert skewed > 0.4 > 0.15 > mild


def test_kmeans_clusters_are_compact():
    def within(parts):
        return sum(((FEATURES[p] - FEATURES[p].mean(axis=0)) ** 2).sum() for p in parts)

    assert within(_split("kmeans")) < 0.8 * within(_split("iid"))


def test_kmeans_flattens_images():
    mnist = load_task("mnist-5k")
    parts = partition("kmeans", 3, mnist.y_train[:300], mnist.x_train[:300], seed=0)
    assert sum(len(p) for p in parts) == 300


def test_regression_targets_are_binned_for_label_schemes():
    diabetes = load_task("diabetes")
    bins = as_class_labels(diabetes.y_train)
    assert np.bincount(bins).min() >= 0.9 * len(bins) / 10  # ties in the target
    parts = partition("label-sort", 5, diabetes.y_train, seed=0, s=0.0)
    bounds = [(bins[p].min(), bins[p].max()) for p in parts]
    assert all(high <= low for (_, high), (low, _) in zip(bounds, bounds[1:]))
    by_class = partition("by-class", 10, diabetes.y_train)
    assert [len(np.unique(bins[p])) for p in by_class] == [1] * 10
    assert len(partition("dirichlet", 4, diabetes.y_train, alpha=1.0)) == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scheme": "shards"}, r"partitioning='shards'.*label-sort"),
        ({"scheme": "label-sort", "s": 1.5}, r"partitioning\.s=1\.5"),
        ({"scheme": "label-sort", "s": -0.1}, r"partitioning\.s"),
        ({"scheme": "dirichlet", "alpha": 0.0}, r"partitioning\.alpha=0\.0"),
        (
            {"scheme": "labels-per-client", "labels_per_client": 11},
            r"partitioning\.labels-per-client=11",
        ),
        (
            {"scheme": "labels-per-client", "labels_per_client": 0},
            r"partitioning\.labels-per-client=0",
        ),
        ({"scheme": "iid", "num_partitions": 0}, r"num-partitions=0"),
        ({"scheme": "iid", "num_partitions": 2000}, r"num-partitions=2000.*1437"),
        ({"scheme": "by-class", "num_partitions": 5}, r"num-partitions=5.*\(10\)"),
    ],
)
def test_bad_settings_raise_config_errors_naming_the_key(kwargs, message):
    kwargs = {"num_partitions": 10, **kwargs}
    with pytest.raises(ConfigError, match=message):
        partition(labels=LABELS, features=FEATURES, **kwargs)


def test_impossible_split_is_an_error_not_an_empty_client():
    labels = np.array([0, 0, 0, 0, 1])
    with pytest.raises(ConfigError, match="num-partitions=4.*empty"):
        partition("labels-per-client", 4, labels, labels_per_client=1)
    with pytest.raises(ValueError, match="features"):
        partition("kmeans", 2, labels)
