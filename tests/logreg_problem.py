"""The small convex test problem shared by the FedFW and FedDR maths tests.

Binary logistic regression with an intercept, parameters [w (10,), b (1,)], on 3 clients
whose features are shifted in different coordinates and whose labels use different offsets
(non-IID). D is the l1 ball of radius 2 applied per tensor; it binds at the optimum.
"""

import numpy as np

from oracles.lmo import make_constraint

N_CLIENTS, DIM, N_SAMPLES = 3, 10, 100
L1_BALL = make_constraint("l1", 2.0)


def client_data(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(features, labels) of each client."""
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(DIM)
    data = []
    for i in range(N_CLIENTS):
        shift = np.zeros(DIM)
        shift[3 * i : 3 * i + 3] = 2.0
        features = rng.standard_normal((N_SAMPLES, DIM)) + shift
        logits = features @ w_true - (i - 1)
        labels = (rng.random(N_SAMPLES) < 1 / (1 + np.exp(-logits))).astype(float)
        data.append((features, labels))
    return data


DATA = client_data()


def loss(x, features, labels) -> float:
    """Mean logistic loss of x = [w, b]."""
    z = features @ x[0] + x[1][0]
    return float(np.mean(np.logaddexp(0.0, z) - labels * z))


def grad(x, features, labels) -> list[np.ndarray]:
    """Gradient of ``loss`` with respect to [w, b]."""
    z = features @ x[0] + x[1][0]
    r = (1 / (1 + np.exp(-z)) - labels) / len(labels)
    return [features.T @ r, np.array([r.sum()])]
