"""A run's TensorBoard event files, read back with TensorBoard's own reader."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from server_app.event_log import FOLDER, EventLog
from tests.helpers import run_app

FAST = {"algorithm": "fedavg", "task": "iris", "num-server-rounds": 2, "local-steps": 2}


def accumulated(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_every_round_metric_and_the_run_config_are_in_the_event_files(tmp_path):
    run = run_app(tmp_path, 3, **FAST)
    events = accumulated(run.out_dir / FOLDER)
    for key in ("test_accuracy", "bytes_down", "failures"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(r["round"], pytest.approx(r[key])) for r in run.rows if key in r]
    (text,) = events.Tensors("run_config/text_summary")
    assert b"'algorithm'" not in text.tensor_proto.string_val[0]  # JSON, not a repr
    assert b'"algorithm": "fedavg"' in text.tensor_proto.string_val[0]


def test_tensorboard_false_writes_no_events(tmp_path):
    run = run_app(tmp_path, 3, **FAST, tensorboard=False)
    assert not (run.out_dir / FOLDER).exists()


def test_a_resumed_run_in_a_new_folder_logs_the_earlier_rows_too(tmp_path):
    earlier = [{"round": 0, "test_accuracy": 0.1}, {"round": 1, "test_accuracy": 0.5}]
    log = EventLog(tmp_path, {"algorithm": "fedavg"}, earlier)
    log.add_round({"round": 2, "test_accuracy": 0.7, "note": "text is not a scalar"})
    log.close()
    logged = [(e.step, e.value) for e in accumulated(tmp_path / FOLDER).Scalars("test_accuracy")]
    assert logged == [(0, pytest.approx(0.1)), (1, pytest.approx(0.5)), (2, pytest.approx(0.7))]
