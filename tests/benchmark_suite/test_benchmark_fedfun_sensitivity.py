"""FedFun Tables 6-7's score ratio (``benchmarks.fedfun_sensitivity``): a fixed grid point's
pick over the tuned pick, by the paper's selection rule, averaged over seeds."""

from __future__ import annotations

import pytest

from benchmarks.fedfun_sensitivity import task_ratios


def run(train_test: list[tuple[float, float]]) -> dict:
    return {
        "rows": [
            {"round": r, "train_accuracy_mean": train, "test_accuracy_mean": test}
            for r, (train, test) in enumerate(train_test, 1)
        ]
    }


def test_the_ratio_is_the_fixed_points_pick_over_the_tuned_pick():
    results = {
        "a0": run([(0.5, 0.6), (0.9, 0.8)]),  # the tuned pick: train 0.9 -> test 0.8
        "b0": run([(0.7, 0.4), (0.6, 0.9)]),  # its own pick: train 0.7 -> test 0.4
        "a1": run([(0.8, 0.5)]),
        "b1": run([(0.9, 1.0)]),  # seed 1: b is the tuned pick
    }
    grid = [{"fedfun.psr-lambda": 1.0}, {"fedfun.psr-lambda": 10.0}]
    seeds = [[("a0", grid[0]), ("b0", grid[1])], [("a1", grid[0]), ("b1", grid[1])]]
    ratios = task_ratios(results, "psr", seeds)
    assert ratios["plam1"] == pytest.approx((0.8 / 0.8 + 0.5 / 1.0) / 2)
    assert ratios["plam10"] == pytest.approx((0.4 / 0.8 + 1.0 / 1.0) / 2)
