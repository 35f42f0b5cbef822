"""The results writer, payload accounting and the metered grid."""

import csv
import json

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from functions.records import payload_bytes
from server_app.recording import format_row
from server_app.results import ResultsWriter


def test_writer_keeps_every_round_on_disk_and_plots(tmp_path):
    writer = ResultsWriter(tmp_path / "run", {"run_config": {"seed": 0}})
    writer.add_round({"round": 0, "test_accuracy": 0.1, "bytes_up": 0, "bytes_down": 0})
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["rounds"][0]["test_accuracy"] == 0.1  # written before the run ends
    writer.add_round({"round": 1, "test_accuracy": 0.5, "bytes_up": 10, "bytes_down": 20,
                      "fw_gap": 0.3})
    plots = writer.finish({"final_test_accuracy": 0.5})
    assert sorted(p.name for p in plots) == ["bytes_vs_round.png", "test_accuracy_vs_bytes.png",
                                             "test_accuracy_vs_round.png"]
    with open(tmp_path / "run" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["fw_gap"] == "0.3" and rows[0]["fw_gap"] == ""
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())["summary"]
    assert summary == {"final_test_accuracy": 0.5}
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"run_config": {"seed": 0}}


def test_payload_counts_array_data_and_values_not_headers():
    content = RecordDict({
        "arrays": ArrayRecord({"w": Array(np.zeros((3, 5), np.float32)),
                               "i": Array(np.zeros(2, np.int8))}),
        "config": ConfigRecord({"kind": "l1", "round": 3, "flags": [True, False]}),
        "metrics": MetricRecord({"loss": 0.5}),
    })
    assert payload_bytes(content) == 3 * 5 * 4 + 2 + 2 + 8 + 2 + 8


def test_log_line_has_round_metrics_bytes_and_time():
    line = format_row({"round": 2, "test_accuracy": 0.91234, "test_loss": 0.3, "bytes_up": 2500,
                       "bytes_down": 5000, "wall_time_s": 1.25, "failures": 0}, 10)
    assert line == ("[results] round 2/10 | test_accuracy=0.9123 | test_loss=0.3000 | "
                    "up=2.5kB down=5.0kB | t=1.2s")
