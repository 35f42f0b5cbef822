"""The whole ServerApp + ClientApp path in-process, through Flower's message serialisation."""

from __future__ import annotations

import csv
import json
import logging
import math

import flwr
import pytest
import torch

from client_app.app import app as client_app
from server_app.app import InvalidRunConfig, run
from server_app.results import CLOCKS
from tasks.devices import device_facts
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.helpers import RUN_NAME, run_app

REQUIRED_ROW_KEYS = {
    "round",
    "test_accuracy",
    "test_loss",
    "train_loss",
    "bytes_up",
    "bytes_down",
    "wall_time_s",
    "failures",
}


def run_job(tmp_path, num_nodes=4, node_configs=None, **overrides):
    """Run the ServerApp against ``num_nodes`` in-process clients; return (grid, results dir).
    FedAvg unless told otherwise: these tests pin the frame's contracts on one model."""
    run = run_app(tmp_path, num_nodes, node_configs, **{"algorithm": "fedavg", **overrides})
    return run.grid, run.out_dir


def read_metrics(out_dir):
    return json.loads((out_dir / "metrics.json").read_text())


def model_bytes(grid) -> int:
    first_train = next(m for m in grid.down if m.metadata.message_type == "train")
    return sum(math.prod(a.shape) * 4 for a in first_train.content["arrays"].values())


def test_the_default_job_is_ffgb_on_digits(tmp_path):
    rows = run_app(tmp_path, 4, None, **{"num-server-rounds": 1}).rows
    config = json.loads((tmp_path / "job" / "config.json").read_text())["run_config"]
    assert (config["algorithm"], config["task"]) == ("ffgb", "digits")
    assert rows[-1]["ensemble_size"] == 4 * 3 and rows[-1]["test_accuracy"] > 0.8


def test_fedavg_digits_writes_the_results_contract(tmp_path):
    grid, out = run_job(tmp_path, **{"num-server-rounds": 3, "plots": True})
    metrics = read_metrics(out)
    rows = metrics["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2, 3]
    for row in rows[1:]:
        assert REQUIRED_ROW_KEYS <= row.keys()
    assert rows[-1]["test_accuracy"] > 0.85, rows[-1]
    assert rows[-1]["test_loss"] < rows[0]["test_loss"]
    config = json.loads((out / "config.json").read_text())
    assert config["num_nodes"] == 4 and config["run_config"]["algorithm"] == "fedavg"
    assert config["versions"]["flwr"] == flwr.__version__
    assert config["flower_app"] is None  # the in-process engine runs the checkout, no FAB
    with open(out / "metrics.csv") as handle:
        assert len(list(csv.DictReader(handle))) == 4
    assert (out / "test_accuracy_vs_round.png").stat().st_size > 1000
    assert (out / "test_accuracy_vs_bytes.png").stat().st_size > 1000
    assert metrics["summary"]["final_test_accuracy"] == rows[-1]["test_accuracy"]


def test_plots_false_writes_every_result_but_the_plots(tmp_path):
    """The in-process tests' default (``testing.inprocess_grid.run_config``): no PNG, the rest of
    the results folder as with plots."""
    _, out = run_job(tmp_path, **{"num-server-rounds": 1, "plots": False})
    assert not list(out.glob("*.png"))
    assert {"config.json", "metrics.json", "metrics.csv", "checkpoint.pb"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "config.json").read_text())["run_config"]["plots"] is False


def test_bytes_are_exactly_the_payload_sent(tmp_path):
    """An evaluate exchange after every round (``eval-with-train=false``); the next test: the
    evaluation riding on training."""
    grid, out = run_job(tmp_path, **{"num-server-rounds": 2, "eval-with-train": False})
    rows = read_metrics(out)["rounds"]
    per_model = model_bytes(grid)
    for row in rows[1:]:
        # train: the model + the "server-round" config int down; the model + two metrics up
        assert row["bytes_down_train"] == 4 * (per_model + 8)
        assert row["bytes_up_train"] == 4 * (per_model + 2 * 8)
    # evaluation: the model + "server-round" down, five evaluation sums up; round 1 also asks
    # every node who it is (query.node: an empty message down, two ints and its device's text up)
    assert rows[2]["bytes_down"] == 2 * 4 * (per_model + 8)
    assert rows[2]["bytes_up"] == 4 * (per_model + 2 * 8) + 4 * 5 * 8
    device = sum(len(text) for text in device_facts(torch.device("cpu")).values())
    assert rows[1]["bytes_up"] == rows[2]["bytes_up"] + 4 * (2 * 8 + device)
    assert rows[0]["bytes_up"] == rows[0]["bytes_down"] == 0
    # serialised content adds keys, shapes and a header per array, but not much for a model
    assert per_model * 4 < rows[1]["wire_bytes_down"] < 1.1 * rows[1]["bytes_down"] + 4 * 2000


def test_bytes_with_the_evaluation_riding_on_training_are_exactly_the_payload_sent(tmp_path):
    """``eval-with-train`` (the default): round t + 1's train messages also carry
    ``evaluate-first`` (a bool, 1 B) and their replies round t's five evaluation sums; the last
    round keeps its evaluate exchange. The model goes down once a round instead of twice."""
    grid, out = run_job(tmp_path, **{"num-server-rounds": 3})
    rows = read_metrics(out)["rounds"]
    per_model = model_bytes(grid)
    up_train, sums = 4 * (per_model + 2 * 8), 4 * 5 * 8
    assert rows[1]["bytes_down_train"] == 4 * (per_model + 8)
    assert rows[1]["bytes_up_train"] == up_train
    for row in rows[2:]:
        assert row["bytes_down_train"] == 4 * (per_model + 8 + 1)
        assert row["bytes_up_train"] == up_train + sums
    assert rows[2]["bytes_down"] == rows[2]["bytes_down_train"]
    assert rows[2]["bytes_up"] == rows[2]["bytes_up_train"]
    assert rows[3]["bytes_down"] == rows[3]["bytes_down_train"] + 4 * (per_model + 8)
    assert rows[3]["bytes_up"] == rows[3]["bytes_up_train"] + sums
    assert [m.metadata.message_type for m in grid.down].count("evaluate") == 4


def test_same_seed_gives_same_numbers(tmp_path):
    _, first = run_job(tmp_path / "a", **{"num-server-rounds": 2})
    _, second = run_job(tmp_path / "b", **{"num-server-rounds": 2})

    def strip(rows):
        return [{k: v for k, v in r.items() if k not in CLOCKS} for r in rows]

    assert strip(read_metrics(first)["rounds"]) == strip(read_metrics(second)["rounds"])
    _, other = run_job(tmp_path / "c", **{"num-server-rounds": 2, "seed": 1})
    assert strip(read_metrics(other)["rounds"]) != strip(read_metrics(first)["rounds"])


def test_fedprox_sends_mu_and_trains(tmp_path):
    grid, out = run_job(
        tmp_path,
        **{
            "algorithm": "fedprox",
            "fedprox.mu": 0.5,
            "num-server-rounds": 2,
            "partitioning": "label-sort",
        },
    )
    trains = [m for m in grid.down if m.metadata.message_type == "train"]
    assert trains and all(m.content["config"]["proximal-mu"] == 0.5 for m in trains)
    assert read_metrics(out)["rounds"][-1]["test_accuracy"] > 0.5


def test_federated_evaluation_when_server_has_no_test_set(tmp_path):
    grid, out = run_job(tmp_path, **{"central-evaluation": False, "num-server-rounds": 2})
    rows = read_metrics(out)["rounds"]
    assert "test_accuracy" not in rows[0]
    assert rows[-1]["test_accuracy"] > 0.8 and rows[-1]["train_loss"] > 0
    assert any(m.metadata.message_type == "evaluate" for m in grid.down)


def test_regression_task_reports_mse(tmp_path):
    _, out = run_job(
        tmp_path, **{"task": "diabetes", "num-server-rounds": 2, "learning-rate": 0.05}
    )
    rows = read_metrics(out)["rounds"]
    assert "test_mse" in rows[-1] and rows[-1]["test_mse"] < rows[0]["test_mse"]


def test_a_failing_node_is_counted_and_the_run_goes_on(tmp_path):
    broken = [{}, {}, {}, {"partition-id": 99}]
    _, out = run_job(tmp_path, node_configs=broken, **{"num-server-rounds": 2})
    rows = read_metrics(out)["rounds"]
    # its query.node answer fails in round 1; without a usable answer it never enters the
    # roster, so it is sent nothing more
    assert [r["failures"] for r in rows[1:]] == [1, 0]
    assert rows[-1]["test_accuracy"] > 0.8


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"algorithm": "nope"}, "algorithm='nope' is not valid; allowed values: fedavg, fedprox"),
        ({"task": "imagenet"}, "task='imagenet' is not valid; allowed values: digits"),
        ({"partitioning": "zipf"}, "partitioning='zipf' is not valid"),
        ({"num-server-rounds": -1}, "num-server-rounds=-1 is not valid; it must be >= 1"),
        ({"partitioning.s": 1.5}, "partitioning.s=1.5 is not valid; it must be in [0, 1]"),
    ],
)
def test_bad_config_stops_before_training_with_one_line(tmp_path, caplog, overrides, fragment):
    caplog.set_level(logging.ERROR, logger="flwr")
    with pytest.raises(InvalidRunConfig):
        grid, _ = run_job(tmp_path, **overrides)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and fragment in errors[0], errors
    assert "\n" not in errors[0]


class SilentNodeGrid(LocalGrid):
    """Records the timeout of every exchange; the node of partition ``silent`` never answers
    (as a dead SuperNode: no reply at all by the deadline)."""

    silent = 3

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timeouts: list[float | None] = []

    def send_and_receive(self, messages, *, timeout=None):
        self.timeouts.append(timeout)
        dead = self.node_ids[self.silent]
        replies = super().send_and_receive(messages, timeout=timeout)
        return [r for r in replies if r.metadata.src_node_id != dead]


def test_every_exchange_waits_reply_timeout_and_a_silent_node_is_a_failure(tmp_path):
    config = run_config(
        **{
            "output-dir": str(tmp_path),
            "run-name": RUN_NAME,
            "algorithm": "fedavg",
            "num-server-rounds": 2,
            "reply-timeout": 7.5,
        }
    )
    grid = SilentNodeGrid(client_app, config, 4)
    run(grid, server_context(config))
    assert grid.timeouts and set(grid.timeouts) == {7.5}
    rows = read_metrics(tmp_path / RUN_NAME)["rounds"]
    # its query.node answer never comes: it is left out of the roster and sent nothing more
    assert [r["failures"] for r in rows[1:]] == [1, 0]
    assert rows[-1]["test_accuracy"] > 0.8
    # and the health line says so: 3 nodes took part, not the 4 connected
    line = json.loads((tmp_path / RUN_NAME / "config.json").read_text())["outcome"]["line"]
    silent = grid.node_ids[SilentNodeGrid.silent]
    assert (
        f"3 nodes, 1 left out: node {silent}: no answer to query.node within reply-timeout, "
        f"no node for partition {SilentNodeGrid.silent}, 0 warnings" in line
    ), line


def test_a_reply_timeout_that_is_not_positive_stops_before_training(tmp_path):
    with pytest.raises(InvalidRunConfig, match="reply-timeout=0.0"):
        run_job(tmp_path, **{"reply-timeout": 0.0})
