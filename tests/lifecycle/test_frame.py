"""The unchanged ServerApp runs algorithms whose global function is not a torch model, and a
new family is its declaration, its halves and its key table, registered with one line in the
catalogue and one in each registry, with no other file changed."""

from __future__ import annotations

import json

import pytest

from client_app import registry as client_registry
from run_config import declared, families, reference
from server_app.app import InvalidRunConfig
from strategies import registry as server_registry
from tests import frame_algorithms
from tests.helpers import run_app


@pytest.fixture
def test_algorithms(monkeypatch, tmp_path):
    """Register the test-only families as a new family registers itself: a line in the
    catalogue and one in each registry. The run's declared keys are those of a
    ``pyproject.toml`` whose config table ``run_config.reference`` wrote from the tables, the
    new one included."""
    new = (frame_algorithms.TREES, frame_algorithms.LOCAL)
    monkeypatch.setattr(families, "FAMILIES", (*families.FAMILIES, *new))
    for family in new:
        monkeypatch.setitem(server_registry.STRATEGIES, family, frame_algorithms.STRATEGIES[family])
        monkeypatch.setitem(
            client_registry.CLIENT_HALVES, family, frame_algorithms.CLIENT_HALVES[family]
        )
    text = reference.PYPROJECT.read_text()
    span = reference.config_span(text)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(text[: span.start] + reference.config_table() + text[span.end :])
    original = declared.declared_defaults
    monkeypatch.setattr(declared, "declared_defaults", lambda path=None: original(pyproject))


def test_an_ensemble_global_function_trains_and_is_evaluated_centrally(tmp_path, test_algorithms):
    run = run_app(tmp_path, 4, **{"algorithm": "test-trees", "num-server-rounds": 4})
    rows = run.rows
    assert [r["ensemble_size"] for r in rows[1:]] == [4, 8, 12, 16]  # 4 nodes, one tree each
    assert rows[0]["test_accuracy"] < 0.2 and rows[-1]["test_accuracy"] > 0.6
    assert all(r["failures"] == 0 for r in rows)
    config = json.loads((run.out_dir / "config.json").read_text())
    assert config["global_function"] == {"kind": "ensemble of trees", "learners": 0}
    # every node is sent only the learners it lacks: from round 2 on, the 4 trees of the round
    # before (a node's predictions are at the version it was last sent)
    trains = [m for m in run.grid.down if m.metadata.message_type == "train"]
    assert [m.content["delta"]["since"] for m in trains] == [0] * 8 + [4] * 4 + [8] * 4
    assert [m.content["delta"]["count"] for m in trains] == [0] * 4 + [4] * 12
    assert rows[3]["bytes_down_train"] == rows[4]["bytes_down_train"]  # not growing with the run


def test_nodes_with_their_own_models_report_mean_min_max(tmp_path, test_algorithms):
    run = run_app(
        tmp_path,
        5,
        **{
            "algorithm": "test-local",
            "num-server-rounds": 3,
            "partitioning": "label-sort",
            "plots": True,
        },
    )
    rows = run.rows
    assert "test_accuracy" not in rows[-1] and "test_accuracy_mean" in rows[-1]
    for row in rows[1:]:
        assert row["test_accuracy_min"] <= row["test_accuracy_mean"] <= row["test_accuracy_max"]
        assert row["test_accuracy_min"] < row["test_accuracy_max"]  # label skew: nodes differ
    assert (run.out_dir / "test_accuracy_mean_vs_round.png").stat().st_size > 1000
    summary = json.loads((run.out_dir / "metrics.json").read_text())["summary"]
    assert summary["final_test_accuracy_mean"] == rows[-1]["test_accuracy_mean"]
    assert json.loads((run.out_dir / "config.json").read_text())["global_function"] == {}


def test_a_new_algorithms_key_table_is_generated_parsed_and_checked(tmp_path, test_algorithms):
    assert '"test-trees.step" = 0.5' in reference.config_table()
    assert "| `test-trees.depth` | int | `3` |" in reference.key_reference()
    run = run_app(
        tmp_path,
        3,
        **{
            "algorithm": "test-trees",
            "num-server-rounds": 2,
            "test-trees.step": 0.25,
            "test-trees.depth": 2,
        },
    )
    trains = [m for m in run.grid.down if m.metadata.message_type == "train"]
    assert list(trains[-1].content["delta-arrays"]["weights"].numpy()) == [0.25 / 3] * 3
    assert all(r["failures"] == 0 for r in run.rows) and run.rows[-1]["participants"] == 3
    with pytest.raises(InvalidRunConfig, match=r"test-trees.step=2.0 is not valid"):
        run_app(tmp_path / "bad", 3, **{"algorithm": "test-trees", "test-trees.step": 2.0})
