"""FFGB's model on a task (``oracles.boosting_model``): a tree learner is a learner kind with
its own spec, what a task cannot take is refused naming the key, and a node builds the model
once per message."""

from __future__ import annotations

import pytest

from functions.networks import NetworkSpec
from functions.trees import TreeSpec
from run_config import ffgb as ffgb_keys
from run_config.common import RunSettings
from run_config.ffgb import ffgb_settings
from tasks.errors import ConfigError
from tasks.federation import task_for
from testing.inprocess_grid import run_config
from tests.helpers import run_app


def _model(**keys):
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "ffgb", "task": "digits", **keys})
    )
    return ffgb_settings(settings).model(task_for(settings.data))


def test_a_tree_learner_has_a_tree_spec_and_a_network_its_own():
    trees = _model(**{"ffgb.learner": "tree", "ffgb.tree-depth": 3})
    assert trees.trees and trees.spec == TreeSpec(64, 10)
    assert trees.limits.max_nodes == 15 and trees.limits.max_params == 1
    assert trees.describe() == "tree of depth 3"
    mlp = _model(**{"ffgb.hidden": 16})
    assert not mlp.trees and mlp.spec == NetworkSpec((64, 16, 16, 10), "leaky_relu")
    assert mlp.limits.max_params == mlp.spec.n_params


def test_ffgb_c_clips_and_bounds_its_output_the_others_do_not():
    clipped = _model(algorithm="ffgb-c", **{"ffgb.mu": 0.5, "ffgb.gamma": 0.5})
    assert clipped.clipping.grad_bound == 1.0  # cross-entropy's gradient bound
    assert clipped.final_bound == pytest.approx(2 * 1.0 / (0.5 * 0.5))
    plain = _model()
    assert plain.clipping is None and plain.final_bound is None


def test_a_cnn_on_a_table_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"ffgb.learner='cnn' is not valid; it must be used"):
        _model(**{"ffgb.learner": "cnn"})


def test_a_node_builds_the_model_once_per_message(tmp_path, monkeypatch):
    built = []
    original = ffgb_keys.boosting_model

    def counting(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ffgb_keys, "boosting_model", counting)
    run = run_app(
        tmp_path,
        2,
        **{"algorithm": "ffgb", "ffgb.local-steps": 2, "ffgb.oracle-steps": 5, "ffgb.hidden": 8},
        **{"num-server-rounds": 2},
    )
    answered = [m for m in run.grid.down if m.metadata.message_type in ("train", "evaluate")]
    assert answered and all(r["failures"] == 0 for r in run.rows)
    server = 2  # the strategy's task check and its reply checks
    assert len(built) == len(answered) + server
