"""FFGB.L in one round of communication (Remark 3.1): the same function as the multi-round run,
round by round, from one upload per node."""

from __future__ import annotations

import pytest

from client_app.app import app as client_app
from server_app.app import InvalidRunConfig, run
from server_app.recording import RoundRecorder
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.ffgb.test_ffgb_flower import run_ffgb
from tests.helpers import RUN_NAME
from tests.lifecycle.test_checkpoints import ServerCrash, rows_of

FFGB_L = {"algorithm": "ffgb-l", "task": "diabetes", "ffgb.eta0": 1.0, "num-server-rounds": 4}


@pytest.mark.parametrize("fraction", [1.0, 0.5])
@pytest.mark.e2e
def test_one_shot_equals_the_multi_round_run(tmp_path, fraction):
    overrides = {**FFGB_L, "fraction-train": fraction}
    rounds = run_ffgb(tmp_path / "rounds", **overrides).rows
    one_shot = run_ffgb(tmp_path / "shot", **overrides, **{"ffgb.one-shot": True})
    shot = one_shot.rows
    for a, b in zip(rounds[1:], shot[1:]):  # float32 forward passes, batched differently
        assert b["test_mse"] == pytest.approx(a["test_mse"], rel=1e-6)
        assert b["participants"] == a["participants"]
    assert shot[-1]["ensemble_size"] == 4 * 2  # N K, whatever the number of rounds
    assert rounds[-1]["ensemble_size"] == 4 * 2 * 4 * fraction
    trains = [m for m in one_shot.grid.down if m.metadata.message_type == "train"]
    evaluates = [m for m in one_shot.grid.down if m.metadata.message_type == "evaluate"]
    assert len(trains) == 4 and len(evaluates) == 4  # one upload each, the function once
    assert all(m.content["config"]["server-round"] == 4 for m in evaluates)
    assert shot[-1]["federated_test_loss"] == pytest.approx(shot[-1]["test_loss"], rel=1e-6)
    assert shot[-1]["models_exchanged"] == 2 + 4 * 2  # K up, N K down (own learners included)
    assert rounds[-1]["models_exchanged"] > 3 * shot[-1]["models_exchanged"] * fraction


@pytest.mark.e2e
def test_a_resumed_one_shot_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    def config(folder: str) -> dict:
        return run_config(
            **{
                "output-dir": str(tmp_path / folder),
                "run-name": RUN_NAME,
                "ffgb.local-steps": 2,
                "ffgb.oracle-steps": 60,
                "ffgb.hidden": 16,
                **FFGB_L,
                "fraction-train": 0.5,
                "ffgb.one-shot": True,
            }
        )

    whole = config("whole")
    run(LocalGrid(client_app, whole, 4), server_context(whole))
    resumed = config("resumed")
    grid = LocalGrid(client_app, resumed, 4)
    record = RoundRecorder.__call__

    def stop_after_round_two(self, flower_round, arrays):
        row = record(self, flower_round, arrays)  # writes the round's checkpoint
        if flower_round == 2:  # rounds after 1 send no message: stop the ServerApp here
            raise ServerCrash("after round 2")
        return row

    with monkeypatch.context() as patch:
        patch.setattr(RoundRecorder, "__call__", stop_after_round_two)
        with pytest.raises(ServerCrash):
            run(grid, server_context(resumed))
    run(grid, server_context(resumed), resume_from=tmp_path / "resumed" / RUN_NAME)
    assert rows_of(tmp_path / "resumed") == rows_of(tmp_path / "whole")


@pytest.mark.parametrize("overrides", [{"algorithm": "ffgb"}, {"ffgb.distill": "increment"}])
def test_one_shot_is_ffgb_l_only(tmp_path, overrides):
    with pytest.raises(InvalidRunConfig, match="ffgb.one-shot=True"):
        run_ffgb(tmp_path, **{**FFGB_L, "ffgb.one-shot": True, **overrides})
