"""Split a training set among federated clients, deterministically given a seed.

Every scheme returns one sorted int64 index array per partition (indices into the
training arrays); partitions are disjoint and never empty.

Only ``dirichlet`` uses a Flower Datasets partitioner (``DirichletPartitioner``): it is the
one scheme the library implements as the papers use it. The others are written here:
flwr_datasets has no "fraction s iid, rest sorted by label" split (FFGB) and no
k-means split (FedFun); its ``PathologicalPartitioner`` gives each client c labels, but
its deterministic mode assigns overlapping windows (labels p..p+c-1), so with fewer
than num_classes clients whole labels go unused, and it splits each label in dataset
order; iid, by-class and the c-labels rule are a few lines of numpy each.

Regression targets (floating-point labels) are turned into 10 quantile bins
(``tasks.datasets.as_class_labels``) before a label-based scheme uses them; ``iid`` and ``kmeans``
ignore labels.
"""

import warnings
from collections.abc import Callable

import numpy as np
from sklearn.cluster import KMeans

from tasks.datasets import as_class_labels
from tasks.errors import ConfigError

PARTITIONING_NAMES = (
    "iid",
    "label-sort",
    "labels-per-client",
    "shifted-labels",
    "dirichlet",
    "kmeans",
    "by-class",
)
SHIFTED_LABELS_SIGMA = 1.0  # log-normal spread of the shares of a class among its holders


def partition(
    scheme: str,
    num_partitions: int,
    labels: np.ndarray,
    features: np.ndarray | None = None,
    seed: int = 0,
    *,
    s: float = 0.1,
    alpha: float = 0.5,
    labels_per_client: int = 3,
    num_classes: int | None = None,
) -> list[np.ndarray]:
    """Indices of each partition under ``scheme`` (see the module docstring and each helper).

    ``num_classes`` only matters for ``by-class``: the number of partitions it requires
    (default: the number of distinct labels present).
    """
    if scheme not in PARTITIONING_NAMES:
        raise ConfigError.choice("partitioning", scheme, PARTITIONING_NAMES)
    num_samples = len(labels)
    if num_partitions < 1:
        raise ConfigError.bound("num-partitions", num_partitions, "at least 1")
    if num_partitions > num_samples:
        raise ConfigError.bound(
            "num-partitions", num_partitions, f"at most the number of samples ({num_samples})"
        )
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        parts = _iid(num_samples, num_partitions, rng)
    elif scheme == "label-sort":
        parts = _label_sort(as_class_labels(labels), num_partitions, s, rng)
    elif scheme == "labels-per-client":
        parts = _labels_per_client(as_class_labels(labels), num_partitions, labels_per_client, rng)
    elif scheme == "shifted-labels":
        parts = _shifted_labels(as_class_labels(labels), num_partitions, labels_per_client, rng)
    elif scheme == "dirichlet":
        parts = _dirichlet(as_class_labels(labels), num_partitions, alpha, seed)
    elif scheme == "kmeans":
        parts = _kmeans(features, num_samples, num_partitions, seed)
    else:
        parts = _by_class(as_class_labels(labels), num_partitions, num_classes)
    parts = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ConfigError.bound(
            "num-partitions",
            num_partitions,
            f"small enough that partitioning={scheme!r} leaves no partition empty "
            f"(partitions {empty} would be)",
        )
    return parts


def _iid(num_samples: int, num_partitions: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle, then cut into near-equal contiguous pieces."""
    return np.array_split(rng.permutation(num_samples), num_partitions)


def _label_sort(
    labels: np.ndarray, num_partitions: int, s: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """FFGB paper: a random fraction s spread iid, the rest sorted by label and dealt in order.

    Ties within a label are in random order. The iid share gives its remainder to the first
    partitions and the sorted share to the last ones, so no partition is empty when
    num_partitions <= num_samples.
    """
    if not 0.0 <= s <= 1.0:
        raise ConfigError.bound("partitioning.s", s, "between 0 and 1")
    order = rng.permutation(len(labels))
    num_iid = int(round(s * len(labels)))
    iid_part, rest = order[:num_iid], order[num_iid:]
    rest = rest[np.argsort(labels[rest], kind="stable")]
    iid_chunks = np.array_split(iid_part, num_partitions)
    sorted_chunks = np.array_split(rest[::-1], num_partitions)[::-1]
    return [np.concatenate([a, b[::-1]]) for a, b in zip(iid_chunks, sorted_chunks)]


def _labels_per_client(
    labels: np.ndarray, num_partitions: int, per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """FedFW paper: client p holds the c classes (p*c + i) mod K, i < c, of the sorted classes.

    Dealing labels in strides of c covers min(num_partitions * c, K) classes and uses each
    class at most once more than any other. The samples of a class are shuffled and split
    evenly among the clients holding it; classes no client holds are left out.
    """
    return _deal_classes(
        labels,
        num_partitions,
        per_client,
        rng,
        holds=lambda p, k, n: any((p * per_client + i) % n == k for i in range(per_client)),
        shares=lambda members, holders, _: np.array_split(members, holders),
    )


def _shifted_labels(
    labels: np.ndarray, num_partitions: int, per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """The FedFW authors' non-IID users: user u holds the c classes (u + j) mod K, j < c, of the
    sorted classes, with unequal sizes: a class's samples are shared among its holders in
    log-normal proportions (sigma ``SHIFTED_LABELS_SIGMA``), each holder getting at least one.

    The authors' generator (not in their repository) draws user sizes from a log-normal plus
    300-3000 samples per label from the full MNIST; here the proportions follow a log-normal and
    every sample of a held class is used, so the split fits a small dataset such as mnist-5k.
    """
    return _deal_classes(
        labels,
        num_partitions,
        per_client,
        rng,
        holds=lambda u, k, n: any((u + j) % n == k for j in range(per_client)),
        shares=_log_normal_shares,
    )


def _log_normal_shares(
    members: np.ndarray, holders: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """``members`` in ``holders`` chunks of log-normal relative sizes, each at least one."""
    if len(members) < holders:
        raise ConfigError.bound(
            "num-partitions", holders, "small enough that each holder of a class gets a sample"
        )
    weights = rng.lognormal(0.0, SHIFTED_LABELS_SIGMA, size=holders)
    extra = np.floor(weights / weights.sum() * (len(members) - holders)).astype(int)
    extra[: len(members) - holders - extra.sum()] += 1  # the rounding remainder
    return np.split(members, np.cumsum(1 + extra)[:-1])


def _deal_classes(
    labels: np.ndarray,
    num_partitions: int,
    per_client: int,
    rng: np.random.Generator,
    holds: Callable[[int, int, int], bool],
    shares: Callable[[np.ndarray, int, np.random.Generator], list[np.ndarray]],
) -> list[np.ndarray]:
    """Each class's shuffled samples cut into ``shares`` among the partitions p that
    ``holds(p, k, K)`` class number k of K; a class nobody holds is left out."""
    classes = np.unique(labels)
    if not 1 <= per_client <= len(classes):
        raise ConfigError.bound(
            "partitioning.labels-per-client",
            per_client,
            f"between 1 and the number of classes ({len(classes)})",
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    for k, cls in enumerate(classes):
        holders = [p for p in range(num_partitions) if holds(p, k, len(classes))]
        if not holders:
            continue
        members = rng.permutation(np.flatnonzero(labels == cls))
        for p, chunk in zip(holders, shares(members, len(holders), rng)):
            parts[p].append(chunk)
    return [np.concatenate(chunks) if chunks else np.zeros(0, np.int64) for chunks in parts]


def _dirichlet(
    labels: np.ndarray, num_partitions: int, alpha: float, seed: int
) -> list[np.ndarray]:
    """Per-class proportions ~ Dir(alpha), via flwr_datasets' DirichletPartitioner.

    ``min_partition_size`` is 10 samples, or half the average partition size when that is
    smaller, and at least 1; the partitioner resamples up to 10 times to meet it.
    """
    if not alpha > 0:
        raise ConfigError.bound("partitioning.alpha", alpha, "greater than 0")
    # Imported here: flwr_datasets pulls in Hugging Face datasets (seconds to import).
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner

    num_samples = len(labels)
    partitioner = DirichletPartitioner(
        num_partitions=num_partitions,
        partition_by="label",
        alpha=float(alpha),
        min_partition_size=max(1, min(10, num_samples // (2 * num_partitions))),
        seed=seed,
    )
    partitioner.dataset = Dataset.from_dict({"label": labels, "index": np.arange(num_samples)})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # one warning per resampling
            return [
                np.asarray(partitioner.load_partition(p)["index"]) for p in range(num_partitions)
            ]
    except ValueError as err:
        raise ConfigError.bound(
            "partitioning.alpha",
            alpha,
            f"large enough to give each of the {num_partitions} partitions samples ({err})",
        ) from err


def _kmeans(
    features: np.ndarray | None, num_samples: int, num_partitions: int, seed: int
) -> list[np.ndarray]:
    """FedFun paper: client p = the p-th k-means cluster of the (flattened) features."""
    if features is None or len(features) != num_samples:
        raise ValueError("partitioning='kmeans' needs the features, one row per label")
    flat = np.asarray(features, dtype=np.float64).reshape(num_samples, -1)
    assignment = KMeans(n_clusters=num_partitions, random_state=seed).fit_predict(flat)
    return [np.flatnonzero(assignment == p) for p in range(num_partitions)]


def _by_class(labels: np.ndarray, num_partitions: int, num_classes: int | None) -> list[np.ndarray]:
    """FedFun paper: one client per class (client p holds class p of the sorted classes)."""
    classes = np.unique(labels) if num_classes is None else np.arange(num_classes)
    if num_partitions != len(classes):
        raise ConfigError.bound(
            "num-partitions",
            num_partitions,
            f"equal to the number of classes ({len(classes)}) for partitioning='by-class'",
        )
    return [np.flatnonzero(labels == cls) for cls in classes]
