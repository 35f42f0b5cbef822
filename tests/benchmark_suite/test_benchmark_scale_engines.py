"""benchmarks.scale_engines' pure parts: the rows' comparison, the rounds' wall times and the
--run-config string (no engine runs here; `python -m benchmarks.scale_engines` runs both)."""

import math

import pytest

from benchmarks.scale_engines import compare_rows, round_seconds, run_config_arg


def _rows(changes=None):
    rows = [
        {"round": 0, "test_accuracy": 0.5, "bytes_up": 0, "wall_time_s": 1.0},
        {"round": 1, "test_accuracy": 0.7, "train_loss": 0.9, "bytes_up": 10, "wall_time_s": 3.0},
        {"round": 2, "test_accuracy": 0.8, "train_loss": 0.6, "bytes_up": 10, "wall_time_s": 3.5},
    ]
    for (t, key), value in (changes or {}).items():
        rows[t][key] = value
    return rows


def test_equal_rows_agree_whatever_the_clock():
    other = _rows()
    for r in other:
        r["wall_time_s"] *= 7
    got = compare_rows(_rows(), other)
    assert got["agree"] and got["rounds"] == [0, 1, 2]
    assert set(got["metrics"]) == {"test_accuracy", "train_loss", "bytes_up"}
    assert got["metrics"]["test_accuracy"] == {"rounds": 3, "max_abs_diff": 0.0, "equal": True}
    assert got["metrics"]["train_loss"]["rounds"] == 2


def test_a_difference_beyond_the_tolerance_is_reported_per_metric():
    changes = {(1, "test_accuracy"): 0.7 * (1 + 1e-12), (2, "train_loss"): 0.6 + 1e-3}
    got = compare_rows(_rows(), _rows(changes))
    assert not got["agree"]
    assert got["metrics"]["test_accuracy"]["equal"]  # 1e-12 relative is within 1e-9
    assert got["metrics"]["train_loss"]["equal"] is False
    assert got["metrics"]["train_loss"]["max_abs_diff"] == pytest.approx(1e-3)
    assert got["metrics"]["bytes_up"]["equal"]


def test_nan_agrees_only_with_nan_and_unshared_keys_or_rounds_break_agreement():
    assert compare_rows(_rows({(1, "train_loss"): math.nan}), _rows({(1, "train_loss"): math.nan}))[
        "agree"
    ]
    assert not compare_rows(_rows({(1, "train_loss"): math.nan}), _rows())["agree"]
    extra = compare_rows(_rows({(2, "fw_gap"): 0.1}), _rows())
    assert extra["only_first"] == ["fw_gap"] and not extra["agree"]
    short = compare_rows(_rows(), _rows()[:2])
    assert short["rounds_only_first"] == [2] and not short["agree"]
    strings = compare_rows(_rows({(0, "note"): "a"}), _rows({(0, "note"): "b"}))
    assert strings["metrics"]["note"] == {"rounds": 1, "max_abs_diff": None, "equal": False}


def test_round_seconds_are_the_clock_steps_of_training_rounds():
    assert round_seconds(_rows()) == {1: 2.0, 2: 0.5}


def test_run_config_arg_writes_toml_values():
    assert (
        run_config_arg(
            {
                "task": "synthetic",
                "synthetic.samples": 60000,
                "fraction-train": 1.0,
                "tensorboard": False,
            }
        )
        == "task='synthetic' synthetic.samples=60000 fraction-train=1.0 tensorboard=false"
    )
    with pytest.raises(ValueError):
        run_config_arg({"run-name": "it's"})
