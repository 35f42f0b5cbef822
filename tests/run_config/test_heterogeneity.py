"""Heterogeneity measures: exact cases for each estimator, then iid versus by-class on digits."""

import numpy as np
import pytest

from tasks.heterogeneity import heterogeneity_report, main, tv_classifier, tv_labels, wasserstein1


def test_w1_of_a_sample_with_itself_is_zero_and_of_a_shift_is_its_length():
    x = np.random.default_rng(0).normal(size=(200, 5))
    shift = np.array([3.0, 4.0, 0.0, 0.0, 0.0])
    assert wasserstein1(x, x, max_points=500) == pytest.approx(0.0, abs=1e-6)
    assert wasserstein1(x + shift, x, max_points=500) == pytest.approx(5.0, rel=1e-6)


def test_w1_subsamples_images_deterministically():
    x = np.random.default_rng(1).random((900, 1, 4, 4))
    first = wasserstein1(x[:600], x, max_points=100, seed=3)
    assert first == wasserstein1(x[:600], x, max_points=100, seed=3)
    assert first != wasserstein1(x[:600], x, max_points=100, seed=4)


def test_tv_classifier_is_near_zero_for_one_distribution_and_near_one_for_disjoint():
    rng = np.random.default_rng(2)
    same = tv_classifier(rng.normal(size=(400, 8)), rng.normal(size=(400, 8)), seed=0)
    apart = tv_classifier(rng.normal(size=(400, 8)) + 10.0, rng.normal(size=(400, 8)), seed=0)
    assert same < 0.15
    assert apart > 0.95


def test_tv_labels_is_half_the_l1_distance():
    assert tv_labels(np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3])) == pytest.approx(0.5)
    assert tv_labels(np.array([2, 2]), np.array([0, 1])) == pytest.approx(1.0)
    assert tv_labels(np.array([0, 1]), np.array([1, 0, 0, 1])) == pytest.approx(0.0)


def test_iid_is_less_heterogeneous_than_by_class_on_digits():
    iid = heterogeneity_report("digits", "iid", 10, seed=0, max_points=200)
    by_class = heterogeneity_report("digits", "by-class", 10, seed=0, max_points=200)
    for report in (iid, by_class):
        assert all(len(report[key]) == 10 for key in ("sizes", "w1", "tv", "tv_labels"))
        assert report["mean_w1"] == pytest.approx(np.mean(report["w1"]))
    assert iid["mean_w1"] < by_class["mean_w1"]
    assert iid["mean_tv"] < 0.2 < 0.6 < by_class["mean_tv"]
    assert iid["mean_tv_labels"] < 0.2 < by_class["mean_tv_labels"] == pytest.approx(0.9, abs=0.02)


def test_cli_prints_one_row_per_client_and_the_means(capsys):
    main(
        [
            "--task",
            "iris",
            "--partitioning",
            "label-sort",
            "--num-partitions",
            "3",
            "--s",
            "0.0",
            "--max-points",
            "50",
        ]
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert "partitioning=label-sort" in lines[0] and "'s': 0.0" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == ["0", "1", "2", "mean"]
    tv_labels_column = [float(line.split()[-1]) for line in lines[2:5]]
    assert min(tv_labels_column) > 0.5  # iris sorted by label over 3 clients: one class each
