"""Tasks: offline loaders, the synthetic generator and the online conversion (no downloads)."""

import datasets
import numpy as np
import pytest
from PIL import Image

from tasks import online
from tasks.datasets import TASK_NAMES, _load_cached, as_class_labels, load_task
from tasks.errors import ConfigError
from tasks.models import MODEL_NAMES
from tasks.synthetic import generate_synthetic


@pytest.fixture
def fresh_cache():
    """Tests that fake or clear cached tasks leave the process cache empty for the others."""
    _load_cached.cache_clear()
    yield
    _load_cached.cache_clear()


OFFLINE = (
    "digits",
    "iris",
    "wine",
    "breast-cancer",
    "diabetes",
    "mnist-5k",
    "synthetic",
    "lipschitz",
)
EXPECTED = {  # name: (total samples, shape of one example, classes)
    "digits": (1797, (64,), 10),
    "iris": (150, (4,), 3),
    "wine": (178, (13,), 3),
    "breast-cancer": (569, (30,), 2),
    "diabetes": (442, (10,), 0),
    "mnist-5k": (5000, (1, 28, 28), 10),
    "synthetic": (6000, (60,), 10),
    "lipschitz": (2000, (8,), 0),
}


def test_task_names_cover_offline_and_online():
    assert set(OFFLINE) | {"mnist", "cifar10"} == set(TASK_NAMES)
    assert TASK_NAMES[0] == "digits"


@pytest.mark.parametrize("name", OFFLINE)
def test_offline_task_shapes_dtypes_and_split(name):
    total, shape, classes = EXPECTED[name]
    task = load_task(name)
    assert task.name == name
    assert task.input_shape == shape
    assert task.num_classes == classes
    assert task.x_train.dtype == task.x_test.dtype == np.float32
    assert len(task.x_train) + len(task.x_test) == total
    assert len(task.x_test) == int(np.ceil(0.2 * total))
    assert task.x_train.shape[1:] == task.x_test.shape[1:]
    assert len(task.y_train) == len(task.x_train) and len(task.y_test) == len(task.x_test)
    assert np.isfinite(task.x_train).all() and np.isfinite(task.x_test).all()
    assert task.default_model in MODEL_NAMES
    if classes:
        assert task.kind == "classification" and task.num_outputs == classes
        assert task.y_train.dtype == task.y_test.dtype == np.int64
        assert task.y_train.min() >= 0 and task.y_train.max() < classes
    else:
        assert task.kind == "regression" and task.num_outputs == 1
        assert task.y_train.dtype == task.y_test.dtype == np.float32


def test_default_models():
    expected = {
        "digits": "mlp",
        "iris": "mlp",
        "mnist-5k": "mlp",
        "diabetes": "mlp",
        "synthetic": "mclr",
    }
    assert {name: load_task(name).default_model for name in expected} == expected


def test_loading_is_cached_deterministic_and_seeded(fresh_cache):
    first = load_task("digits", seed=3)
    assert load_task("digits", seed=3) is first
    _load_cached.cache_clear()
    again = load_task("digits", seed=3)
    assert again is not first
    np.testing.assert_array_equal(again.x_test, first.x_test)
    np.testing.assert_array_equal(again.y_train, first.y_train)
    other = load_task("digits", seed=4)
    assert not np.array_equal(other.y_test, first.y_test)


def test_cached_arrays_are_read_only():
    task = load_task("iris")
    with pytest.raises(ValueError):
        task.x_train[0, 0] = 1.0


def test_split_is_stratified():
    task = load_task("digits", test_fraction=0.25)
    train_counts = np.bincount(task.y_train, minlength=10)
    test_counts = np.bincount(task.y_test, minlength=10)
    expected = 0.25 * (train_counts + test_counts)
    assert np.abs(test_counts - expected).max() <= 1.0


def test_regression_split_is_stratified_by_decile():
    task = load_task("diabetes")
    bins = as_class_labels(np.concatenate([task.y_test, task.y_train]))
    test_counts = np.bincount(bins[: len(task.y_test)], minlength=10)
    expected = 0.2 * np.bincount(bins, minlength=10)
    assert np.abs(test_counts - expected).max() <= 1.5


def test_preprocessing():
    digits, mnist = load_task("digits"), load_task("mnist-5k")
    for task in (digits, mnist):
        assert task.x_train.min() >= 0.0 and task.x_train.max() <= 1.0
        assert task.x_train.max() > 0.9
    for name in ("iris", "wine", "breast-cancer", "diabetes"):
        x = load_task(name).x_train
        np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-4)
        np.testing.assert_allclose(x.std(axis=0), 1.0, atol=1e-3)
    y = load_task("diabetes").y_train
    assert abs(float(y.mean())) < 1e-4 and abs(float(y.std()) - 1.0) < 1e-3


def test_bad_names_and_values_are_config_errors():
    with pytest.raises(ConfigError, match="task='imagenet'.*digits"):
        load_task("imagenet")
    with pytest.raises(ConfigError, match="test-fraction"):
        load_task("digits", test_fraction=1.5)
    with pytest.raises(ConfigError, match="synthetic.alpha"):
        load_task("synthetic", synthetic_alpha=-1.0)


def test_synthetic_is_deterministic_and_sized():
    x, y, groups = generate_synthetic(1.0, 1.0, num_samples=1000, num_groups=10, seed=5)
    x2, y2, _ = generate_synthetic(1.0, 1.0, num_samples=1000, num_groups=10, seed=5)
    x3, _, _ = generate_synthetic(1.0, 1.0, num_samples=1000, num_groups=10, seed=6)
    assert x.shape == (1000, 60) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert not np.allclose(x, x3)
    assert np.bincount(groups).tolist() == [100] * 10
    assert y.min() >= 0 and y.max() < 10
    assert len(load_task("synthetic", synthetic_samples=500).y_train) == 400


def _group_spread(alpha: float, beta: float) -> tuple[float, float]:
    """Mean label-frequency TV of a group from the pool, and mean distance of group means."""
    x, y, groups = generate_synthetic(alpha, beta, seed=0)
    pooled = np.bincount(y, minlength=10) / len(y)
    tv = np.mean(
        [
            0.5
            * np.abs(np.bincount(y[groups == k], minlength=10) / np.sum(groups == k) - pooled).sum()
            for k in range(10)
        ]
    )
    means = np.stack([x[groups == k].mean(axis=0) for k in range(10)])
    return float(tv), float(np.linalg.norm(means - means.mean(axis=0), axis=1).mean())


def test_synthetic_heterogeneity_follows_alpha_beta():
    tv_iid, spread_iid = _group_spread(0.0, 0.0)
    tv_het, spread_het = _group_spread(1.0, 1.0)
    assert tv_iid < 0.1 < 0.4 < tv_het
    assert spread_iid < 0.2 < 2.0 < spread_het


def test_synthetic_covariance_decays_like_j_to_the_minus_1_2():
    x, _, _ = generate_synthetic(0.0, 0.0, num_samples=20000, seed=1)
    variances = x.var(axis=0)
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(variances, expected, rtol=0.1)


def _grey_dataset(n: int) -> datasets.Dataset:
    images = [Image.fromarray(np.full((28, 28), 10 * i, dtype=np.uint8)) for i in range(n)]
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}
    )
    return datasets.Dataset.from_dict({"image": images, "label": list(range(n))}, features=features)


def test_online_conversion_of_grey_pil_images():
    x, y = online.to_numpy(_grey_dataset(4), "image", "label")
    assert x.shape == (4, 1, 28, 28) and x.dtype == np.float32
    np.testing.assert_allclose(x[3, 0, 5, 7], 30 / 255, rtol=1e-6)
    assert y.tolist() == [0, 1, 2, 3] and y.dtype == np.int64


def test_online_conversion_of_colour_arrays_is_channels_first(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    features = datasets.Features(
        {
            "img": datasets.Image(),
            "label": datasets.ClassLabel(names=[str(i) for i in range(10)]),
        }
    )
    split = datasets.Dataset.from_dict(
        {"img": [Image.fromarray(p) for p in pixels], "label": [9, 8, 7, 6, 5]}, features=features
    )
    datasets.DatasetDict({"train": split, "test": split.select([0, 1])}).save_to_disk(tmp_path)
    x_train, y_train, x_test, y_test, classes = online.convert(
        datasets.load_from_disk(str(tmp_path)), online.ONLINE_DATASETS["cifar10"]
    )
    assert x_train.shape == (5, 3, 32, 32) and x_test.shape == (2, 3, 32, 32)
    np.testing.assert_allclose(x_train, pixels.transpose(0, 3, 1, 2) / 255.0, rtol=1e-6)
    assert y_train.tolist() == [9, 8, 7, 6, 5] and y_test.tolist() == [9, 8]
    assert classes == 10


def test_online_without_network_is_a_clear_runtime_error(monkeypatch):
    def offline(dataset_id, *args, **kwargs):
        raise ConnectionError(f"Couldn't reach '{dataset_id}' on the Hub")

    monkeypatch.setattr(online.datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="ylecun/mnist"):
        load_task("mnist")
    with pytest.raises(RuntimeError, match="uoft-cs/cifar10"):
        online.load_online("cifar10")


def test_online_task_uses_converted_splits(monkeypatch, fresh_cache):
    split = _grey_dataset(6)
    monkeypatch.setattr(
        online.datasets,
        "load_dataset",
        lambda dataset_id: datasets.DatasetDict({"train": split, "test": split.select([0, 1])}),
    )
    task = load_task("mnist", seed=123)
    assert task.input_shape == (1, 28, 28) and task.num_classes == 10
    assert len(task.y_train) == 6 and len(task.y_test) == 2
    assert task.default_model == "mlp" and task.kind == "classification"


def test_centred_image_scaling_maps_pixels_to_minus_one_one():
    unit, centred = load_task("mnist-5k"), load_task("mnist-5k", image_scaling="centred")
    assert unit.x_train.min() == 0.0 and unit.x_train.max() == 1.0
    assert centred.x_train.min() == -1.0 and centred.x_train.max() == 1.0
    np.testing.assert_allclose(centred.x_test, 2 * unit.x_test - 1, atol=1e-6)
    assert not centred.x_train.flags.writeable
    assert load_task("mnist-5k", image_scaling="centred") is centred  # cached
    assert load_task("digits", image_scaling="centred") is load_task("digits")  # images only
    with pytest.raises(ConfigError, match="image-scaling"):
        load_task("mnist-5k", image_scaling="standard")
