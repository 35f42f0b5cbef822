"""A fitted tree's node values recomputed from the rows that reach each node: the exact
least-squares means (what a CART node holds) or second-order (Newton) values.

Newton values (ours, not the FFGB paper's, whose oracle is a least-squares fit): with the tree's
shape fitted by least squares to the target (the functional gradient plus the residual), each
node's value becomes sum(target) / (sum(hessian) + l2) per output, the diagonal Newton step of
the loss on the node's rows. This is XGBoost's leaf value (with its default L2 weight 1) and
scikit-learn's ``GradientBoostingClassifier`` leaf update, for the cross-entropy loss, whose
hessian p (1 - p) shrinks where the model is already sure; for the square loss it is the mean
shrunk by n / (n + l2).
"""

from __future__ import annotations

import numpy as np

from functions.trees import LEAF, TreeArrays

NEWTON_L2 = 1.0  # XGBoost's default `lambda`


def node_sums(tree: TreeArrays, x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Sum over the rows of ``x`` reaching each node of ``weights`` (n, c): (n_nodes, c)."""
    sums = np.zeros((tree.n_nodes, weights.shape[1]))
    np.add.at(sums, tree.apply(x), weights)
    left, right = tree.children_left, tree.children_right
    levels = [np.array([0])]
    while (inner := levels[-1][left[levels[-1]] != LEAF]).size:
        levels.append(np.concatenate([left[inner], right[inner]]))
    for level in reversed(levels):  # the deepest level first: children before their parents
        inner = level[left[level] != LEAF]
        sums[inner] = sums[left[inner]] + sums[right[inner]]
    return sums


def with_values(tree: TreeArrays, value: np.ndarray) -> TreeArrays:
    """``tree`` with node values ``value`` (n_nodes, c), rounded to float32 (as they travel)."""
    return TreeArrays(
        tree.children_left,
        tree.children_right,
        tree.feature,
        tree.threshold,
        np.asarray(value, dtype=np.float32),
        tree.n_features,
    )


def mean_values(tree: TreeArrays, x: np.ndarray, target: np.ndarray) -> TreeArrays:
    """Every node's value the float64 mean of ``target`` over its rows (CART's node values)."""
    counts = node_sums(tree, x, np.ones((len(x), 1)))
    return with_values(tree, node_sums(tree, x, target) / np.maximum(counts, 1.0))


def newton_values(
    tree: TreeArrays, x: np.ndarray, target: np.ndarray, hessian: np.ndarray, l2: float = NEWTON_L2
) -> TreeArrays:
    """Every node's value sum(target) / (sum(hessian) + l2) over its rows, per output."""
    return with_values(tree, node_sums(tree, x, target) / (node_sums(tree, x, hessian) + l2))
