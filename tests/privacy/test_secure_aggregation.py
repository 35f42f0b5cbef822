"""``secure-aggregation=true`` in runs of the real ServerApp and ClientApp (in-process engine), on
the penguin sites: every message the ServerApp receives is recorded (``RecordingGrid``), and none
holds a node's own histogram, sums or model; the booster is the one the same run grows without
it, FedAvg's mean the nodes' float64 mean to 1e-9; a node that drops mid-sum leaves the others'
sum. The protocol itself: tests/privacy/test_secure_sum.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import client_app.app as client_module
from client_app.app import app as client_app
from functions.protocol import (
    ARRAYS,
    HISTOGRAMS,
    METRICS,
    NUM_EXAMPLES,
    QUERY_MOMENTS,
    QUERY_SKETCH,
    SITE,
    SKETCH,
    TRAIN,
)
from functions.secure_sum import KEYS, MASKED, SECAGG, SETUP, UNMASK
from run_config.common import RunSettings
from run_config.families import inert_keys
from run_config.fedxgb_hist import fedxgb_hist_settings
from server_app.app import main as server_main
from strategies.fedavg import CheckedFedAvg
from tasks.errors import ConfigError
from testing.inprocess_grid import LocalGrid, run_config, server_context
from testing.recording_grid import RecordingGrid

SITES = {"task": "site", "data.label": "species", "data.categorical": "sex"}
STAGES = (SETUP, KEYS, UNMASK)


def run(tmp_path, penguins, name: str, client=client_app, **overrides) -> RecordingGrid:
    config = run_config(
        **{
            **SITES,
            "dataset-path": f"{penguins}/{{partition-id}}.csv",
            "output-dir": str(tmp_path),
            "run-name": name,
            "tensorboard": False,
            **overrides,
        }
    )
    grid = RecordingGrid(LocalGrid(client, config, 3))
    server_main(grid, server_context(config))
    return grid


def rows(tmp_path, name: str) -> list[dict]:
    return json.loads((tmp_path / name / "metrics.json").read_text())["rounds"]


def summed_replies(grid: RecordingGrid):
    """Every reply to a train message and to a stage of the secure sums."""
    return [r for kind in (TRAIN, *STAGES) for r in grid.replies(kind)]


HIST = {"algorithm": "fedxgb-hist", "fedxgb-hist.bins": "grid"}


def test_fedxgb_hist_grows_the_same_trees_and_the_server_reads_no_histogram(tmp_path, penguins):
    """The bin edges come from grid counts (a node's quantiles would be its values): with
    secure aggregation the server sees only their sum, then only the levels' summed
    histograms; the booster is the plain run's with the same bins."""
    common = {**HIST, "num-server-rounds": 4}
    plain = run(tmp_path, penguins, "plain", **common)
    secure = run(tmp_path, penguins, "secure", **common, **{"secure-aggregation": True})
    assert (tmp_path / "plain" / "model.json").read_bytes() == (
        tmp_path / "secure" / "model.json"
    ).read_bytes()
    keys = ("test_accuracy", "test_loss", "train_loss", "participants", "histogram_levels")
    assert [{k: r.get(k) for k in keys} for r in rows(tmp_path, "plain")] == [
        {k: r.get(k) for k in keys} for r in rows(tmp_path, "secure")
    ]
    assert any(HISTOGRAMS in r.content for r in plain.replies(TRAIN))
    assert all(SKETCH in r.content for r in plain.replies(QUERY_SKETCH))
    assert len(secure.replies(QUERY_SKETCH)) == 3
    for reply in secure.replies(QUERY_SKETCH):
        assert set(reply.content) == {MASKED}  # the grid counts, masked; no quantile
    replies = summed_replies(secure)
    assert len(secure.replies(TRAIN)) == len(plain.replies(TRAIN))
    for reply in replies:
        assert HISTOGRAMS not in reply.content
        assert set(reply.content) <= {MASKED, SECAGG, "secagg-next", "evaluation"}
    for reply in secure.replies(TRAIN):
        vector = reply.content[MASKED]["vector"].numpy()
        assert vector.dtype == np.uint64 and vector.view(np.int64).std() > 2.0**60


def test_fedavg_s_mean_is_the_nodes_float64_mean_and_the_server_reads_no_model(
    tmp_path, penguins, monkeypatch
):
    sent = []  # each node's reply before the secure sum masks it (instrumentation only)
    family_reply = client_module._family_reply

    def recording(message_type, content, context):
        reply = family_reply(message_type, content, context)
        if message_type == TRAIN:
            model = {k: v.numpy().astype(np.float64) for k, v in reply[ARRAYS].items()}
            sent.append((model, float(reply[METRICS][NUM_EXAMPLES])))
        return reply

    means = []
    server_step = CheckedFedAvg._server_step
    monkeypatch.setattr(client_module, "_family_reply", recording)
    monkeypatch.setattr(
        CheckedFedAvg,
        "_server_step",
        lambda self, mean: means.append(mean) or server_step(self, mean),
    )
    common = {"algorithm": "fedavg", "num-server-rounds": 3}
    secure = run(tmp_path, penguins, "secure", **common, **{"secure-aggregation": True})
    assert len(means) == 3 and len(sent) == 9
    for r, mean in enumerate(means):
        models = sent[3 * r : 3 * r + 3]
        total = sum(n for _, n in models)
        for k, name in enumerate(models[0][0]):
            exact = sum(m[name] * n for m, n in models) / total
            np.testing.assert_allclose(mean[k], exact, rtol=1e-9, atol=1e-12)
    for reply in summed_replies(secure):
        assert ARRAYS not in reply.content and METRICS not in reply.content
    monkeypatch.undo()
    run(tmp_path, penguins, "plain", **common)
    plain_rows, secure_rows = rows(tmp_path, "plain"), rows(tmp_path, "secure")
    # the plain run sums float32 models in float32 (Flower's aggregate_arrayrecords): the runs
    # differ by that rounding only
    assert [r.get("test_accuracy") for r in plain_rows] == [
        r.get("test_accuracy") for r in secure_rows
    ]
    for p, s in zip(plain_rows[1:], secure_rows[1:]):
        assert s["train_loss"] == pytest.approx(p["train_loss"], rel=1e-5)


def dropping(partition: int, after_round: int):
    """A ClientApp whose node of ``partition`` answers every secure sum's keys but fails its
    train messages from round ``after_round`` on: it drops after sending its shares."""

    def app(message, context):
        config = message.content.config_records.get("config", {})
        late = config.get("server-round", 0) >= after_round
        if context.node_config["partition-id"] == partition and late:
            if message.metadata.message_type == TRAIN and SECAGG in message.content:
                raise RuntimeError("the node is gone")
        return client_app(message, context)

    return app


@pytest.mark.parametrize("family", [{"algorithm": "fedavg"}, HIST], ids=["fedavg", "fedxgb-hist"])
def test_a_node_that_drops_after_its_shares_leaves_the_others_sum(tmp_path, penguins, family):
    common = {**family, "num-server-rounds": 3, "secure-aggregation": True}
    run(tmp_path, penguins, "drop", client=dropping(2, after_round=2), **common)
    secure = rows(tmp_path, "drop")
    assert [r["participants"] for r in secure[1:]] == [3, 2, 2]
    assert all(r["failures"] >= 1 for r in secure[2:])
    assert secure[-1]["test_accuracy"] > 0.8


def test_secure_aggregation_is_refused_where_it_has_no_effect_or_a_sketch_would_leak():
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "ffgb", "secure-aggregation": True})
    )
    assert "secure-aggregation" in inert_keys(settings)
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "fedavg", "secure-aggregation.bound": 8.0})
    )
    assert (
        "read only with secure-aggregation=True" in inert_keys(settings)["secure-aggregation.bound"]
    )
    settings = RunSettings.from_run_config(
        run_config(**{"algorithm": "fedxgb-hist", "secure-aggregation": True})
    )
    with pytest.raises(ConfigError, match="fedxgb-hist.bins='sketch' is not valid"):
        fedxgb_hist_settings(settings)


def schema_of(tmp_path, name: str) -> dict:
    return json.loads((tmp_path / name / "config.json").read_text())["sites"]["schema"]


def test_the_sites_moments_are_one_secure_sum_and_fit_the_same_schema(tmp_path, penguins):
    common = {**HIST, "num-server-rounds": 1}
    plain = run(tmp_path, penguins, "plain", **common)
    secure = run(tmp_path, penguins, "secure", **common, **{"secure-aggregation": True})
    assert all(SITE in r.content for r in plain.replies(QUERY_MOMENTS))
    moments = secure.replies(QUERY_MOMENTS)
    assert len(moments) == 3 and all(set(r.content) == {MASKED} for r in moments)
    a, b = schema_of(tmp_path, "plain"), schema_of(tmp_path, "secure")
    assert [c["name"] for c in a["columns"]] == [c["name"] for c in b["columns"]]
    for x, y in zip(a["columns"], b["columns"]):
        assert y["mean"] == pytest.approx(x["mean"], rel=1e-12, abs=1e-12)
        assert y["std"] == pytest.approx(x["std"], rel=1e-12)
        assert y["mode"] == x["mode"]


def test_poisoned_moments_fail_the_agreement_in_one_sentence(tmp_path, penguins, monkeypatch):
    """A node that sends sums its values cannot give (within the bound the server declared,
    so its masked vector is well formed) poisons the secure sum, and the server cannot tell
    whose sums are wrong: the agreement stops the run, naming the column and the fault."""
    import client_app.site_data as site_data

    honest = site_data.moment_arrays

    def poisoned(moments, schema):
        arrays = honest(moments, schema)
        if moments["rows"] == 99:  # Dream's training rows
            arrays["s/body_mass_g"] = arrays["s/body_mass_g"] * 3  # within the bound
        return arrays

    monkeypatch.setattr(site_data, "moment_arrays", poisoned)
    with pytest.raises(Exception, match="summed moments do not fit their facts: moments of"):
        run(tmp_path, penguins, "poisoned", **HIST, **{"secure-aggregation": True})
