"""Synthetic(alpha, beta): the multinomial-logistic data of FedProx, reused by pFedMe and FedFW.

Generating group k (a "user" in those papers) has its own model and input mean:
u_k ~ N(0, alpha), W_k ~ N(u_k, 1) (60 x 10), b_k ~ N(u_k, 1) (10);
B_k ~ N(0, beta), v_k ~ N(B_k, 1) (60); x ~ N(v_k, Sigma), Sigma = diag(j^-1.2), j = 1..60;
y = argmax softmax(x W_k + b_k). N(m, s) has standard deviation s, as in their code
(``np.random.normal(m, s)``). alpha controls how much the models differ between groups,
beta how much the inputs do.

Their "Synthetic-IID" variant shares one W, b ~ N(0, 1) and uses v_k = B_k (all coordinates).
Here alpha = beta = 0 selects that variant by default (so (0, 0) means IID, not FedProx's
"Synthetic(0,0)", which still draws a model per group); pass ``iid`` to choose explicitly.

Choices that are ours: samples are split evenly over the groups (their group sizes are
log-normal), and numpy's ``default_rng(seed)`` makes the draw deterministic.
"""

import numpy as np

from tasks.errors import ConfigError

NUM_FEATURES = 60
NUM_CLASSES = 10
NUM_GROUPS = 10
NUM_SAMPLES = 6000


def generate_synthetic(
    alpha: float,
    beta: float,
    num_samples: int = NUM_SAMPLES,
    num_groups: int = NUM_GROUPS,
    seed: int = 0,
    iid: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (float32, N x 60), labels (int64) and generating-group ids (int64).

    Samples come group after group; groups get num_samples / num_groups samples each.
    """
    if alpha < 0:
        raise ConfigError.bound("synthetic.alpha", alpha, "at least 0")
    if beta < 0:
        raise ConfigError.bound("synthetic.beta", beta, "at least 0")
    if num_samples < num_groups:
        raise ConfigError.bound(
            "synthetic.samples", num_samples, f"at least the number of groups ({num_groups})"
        )
    if iid is None:
        iid = alpha == 0 and beta == 0
    rng = np.random.default_rng(seed)
    std_x = np.arange(1, NUM_FEATURES + 1, dtype=np.float64) ** -0.6  # sqrt(j^-1.2)
    shared_w = rng.normal(0.0, 1.0, (NUM_FEATURES, NUM_CLASSES))
    shared_b = rng.normal(0.0, 1.0, NUM_CLASSES)
    xs, ys = [], []
    sizes = [len(c) for c in np.array_split(np.arange(num_samples), num_groups)]
    for size in sizes:
        u = rng.normal(0.0, alpha)
        big_b = rng.normal(0.0, beta)
        if iid:
            w, b, mean = shared_w, shared_b, np.full(NUM_FEATURES, big_b)
        else:
            w = rng.normal(u, 1.0, (NUM_FEATURES, NUM_CLASSES))
            b = rng.normal(u, 1.0, NUM_CLASSES)
            mean = rng.normal(big_b, 1.0, NUM_FEATURES)
        x = mean + rng.standard_normal((size, NUM_FEATURES)) * std_x
        xs.append(x)
        ys.append(np.argmax(x @ w + b, axis=1))
    groups = np.repeat(np.arange(num_groups), sizes)
    return (
        np.concatenate(xs).astype(np.float32),
        np.concatenate(ys).astype(np.int64),
        groups.astype(np.int64),
    )
