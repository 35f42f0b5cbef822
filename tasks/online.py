"""Image datasets from the Hugging Face Hub (the ids Flower Datasets uses), as numpy arrays.

Loaded with ``datasets.load_dataset`` and decoded through the ``numpy`` format, so
torchvision is never needed. Images become float32 in [0, 1], channels first.
The datasets' own train/test splits are used.
"""

from dataclasses import dataclass

import datasets
import numpy as np


@dataclass(frozen=True)
class OnlineSpec:
    """Where a dataset lives and which columns hold the images and the labels."""

    dataset_id: str
    image_key: str
    label_key: str


ONLINE_DATASETS = {
    "mnist": OnlineSpec("ylecun/mnist", "image", "label"),
    "cifar10": OnlineSpec("uoft-cs/cifar10", "img", "label"),
}


def to_numpy(
    split: datasets.Dataset, image_key: str, label_key: str
) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, C, H, W) float32 in [0, 1] and labels int64 from one split of uint8 images."""
    columns = split.with_format("numpy")[:]
    images = np.asarray(columns[image_key])
    if images.dtype != np.uint8:
        raise ValueError(f"column {image_key!r} must hold 8-bit images, got {images.dtype}")
    if images.ndim == 3:  # (N, H, W): grey-scale
        images = images[:, None]
    elif images.ndim == 4:  # (N, H, W, C)
        images = images.transpose(0, 3, 1, 2)
    else:
        raise ValueError(f"column {image_key!r} has shape {images.shape}; expected images")
    x = np.ascontiguousarray(images, dtype=np.float32) / np.float32(255.0)
    return x, np.asarray(columns[label_key], dtype=np.int64)


def convert(
    dataset: datasets.DatasetDict, spec: OnlineSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """x_train, y_train, x_test, y_test and the number of classes of a train/test DatasetDict."""
    x_train, y_train = to_numpy(dataset["train"], spec.image_key, spec.label_key)
    x_test, y_test = to_numpy(dataset["test"], spec.image_key, spec.label_key)
    label_feature = dataset["train"].features[spec.label_key]
    if isinstance(label_feature, datasets.ClassLabel):
        num_classes = label_feature.num_classes
    else:
        num_classes = int(max(y_train.max(), y_test.max())) + 1
    return x_train, y_train, x_test, y_test, num_classes


def load_online(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Download (or read from the Hugging Face cache) and convert one of ``ONLINE_DATASETS``."""
    spec = ONLINE_DATASETS[name]
    try:
        dataset = datasets.load_dataset(spec.dataset_id)
    except Exception as err:  # network failures surface as many different types
        raise RuntimeError(
            f"could not load the online dataset {spec.dataset_id!r} for task {name!r}: it needs "
            f"access to the Hugging Face Hub or a copy in the local cache ({err})"
        ) from err
    return convert(dataset, spec)
