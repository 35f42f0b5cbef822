"""`flwr run` of the app through Flower's real simulation engine (SuperLink + Ray), on loopback.

The module starts one SuperLink for its tests in a new process group, with a temporary
FLWR_HOME and free ports, and stops that whole group (by its PID) whatever happens
(``testing.simulation_link``); each test checks the status of its own run (by its run id)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from deploy.app_files import app_copy
from run_config.declared import parse_overrides
from testing.inprocess_grid import PROJECT_ROOT
from testing.simulation_link import BIN, flwr_run, simulation_superlink
from tests.helpers import RUN_NAME, run_app

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app files every run submits (the checkout's FAB, built without walking its .venv)."""
    return app_copy(tmp_path_factory.mktemp("app") / "app")


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    """A simulation SuperLink on loopback with its own FLWR_HOME, serving every test of the
    module; yields (env, connection name)."""
    folder = tmp_path_factory.mktemp("link")
    with simulation_superlink(folder / "flwr-home", folder / "superlink.log") as link:
        yield link


def run_status(env: dict, connection: str, output: str) -> str:
    """The status the SuperLink keeps (``flwr ls --format json``) of the run that ``flwr run``
    reported starting in ``output``."""
    (run_id,) = re.findall(r"Successfully started run (\d+)", output)
    listed = subprocess.run(
        [str(BIN / "flwr"), "ls", connection, "--format", "json"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    (status,) = [r["status"] for r in json.loads(listed.stdout)["runs"] if r["run-id"] == run_id]
    return status


@pytest.mark.parametrize("algorithm", ["ffgb", "fedavg"])
def test_flwr_run_simulation_writes_results(superlink, app, tmp_path, algorithm):
    """The default job, and FedAvg: both with their evaluation riding on the next round's
    training (``eval-with-train``), so round 1's nodes' figures come with round 2's replies."""
    env, connection = superlink
    out = tmp_path / "results"
    config = f"algorithm='{algorithm}' num-server-rounds=2 output-dir='{out}' run-name='sim'"
    completed = flwr_run(env, connection, 3, config, timeout=400, app=app)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log[-3000:]
    assert "[results] round 2/2" in log, log[-3000:]
    metrics = json.loads((out / "sim" / "metrics.json").read_text())
    assert [r["round"] for r in metrics["rounds"]] == [0, 1, 2]
    assert metrics["rounds"][-1]["test_accuracy"] > 0.8
    written = json.loads((out / "sim" / "config.json").read_text())
    assert written["num_nodes"] == 3
    app_ = written["flower_app"]  # the FAB names the code: it carries no .git
    assert re.fullmatch("[0-9a-f]{64}", app_["fab_hash"]), app_
    assert app_["fab_version"] == written["versions"]["project"]
    # determinism across engines: the in-process engine gives the same numbers, to the bit
    local = run_app(tmp_path / "local", 3, **{"algorithm": algorithm, "num-server-rounds": 2}).rows
    keys = ("test_accuracy", "test_loss", "oracle_error", "failures", "participants")
    keys += ("train_loss", "federated_test_loss")  # round 1's: with round 2's train replies
    assert "train_loss" in metrics["rounds"][1]
    assert [{k: r[k] for k in keys if k in r} for r in metrics["rounds"]] == [
        {k: r[k] for k in keys if k in r} for r in local
    ]


def test_an_invalid_run_config_fails_the_run_before_training(superlink, app, tmp_path):
    """Inside the ServerApp a key that would change nothing stops the run before training, and
    Flower records the run as failed (not completed), with the reason. One Ray run for every
    refusal (about 20 s each): they all raise the same error in the ServerApp, and each family's
    are tested in-process (tests/run_config/test_run_config.py, test_fedfw_flower.py, and
    others)."""
    env, connection = superlink
    config = "eval-with-train=false fraction-train=0.5"
    completed = flwr_run(
        env, connection, 2, f"{config} output-dir='{tmp_path / 'results'}'", timeout=400, app=app
    )
    log = completed.stdout + completed.stderr
    assert "Invalid run config: eval-with-train=False is not" in log, log[-3000:]
    assert "[results]" not in log
    assert run_status(env, connection, log) == "finished:failed"


HIST = "algorithm='fedxgb-hist' task='wine' num-server-rounds=2 fedxgb-hist.max-depth=3"


def test_fedxgb_hist_through_ray_grows_the_in_process_engine_s_trees(superlink, app, tmp_path):
    """Its levels are exchanges the strategy drives through the grid itself: on Ray's engine
    they give the same booster, round for round, as on the in-process engine."""
    env, connection = superlink
    out = tmp_path / "results"
    completed = flwr_run(
        env, connection, 3, f"{HIST} output-dir='{out}' run-name='hist'", timeout=400, app=app
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "[results] round 2/2" in log, log[-3000:]
    rows = json.loads((out / "hist" / "metrics.json").read_text())["rounds"]
    local = run_app(tmp_path / "local", 3, **parse_overrides(HIST)).rows
    keys = ("test_accuracy", "test_loss", "failures", "participants", "histogram_levels")
    assert [{k: r.get(k) for k in keys} for r in rows] == [
        {k: r.get(k) for k in keys} for r in local
    ]
    assert (out / "hist" / "model.json").read_bytes() == (
        tmp_path / "local" / RUN_NAME / "model.json"
    ).read_bytes()


SECURE = {
    "fedxgb-hist": f"{HIST} fedxgb-hist.bins='grid' secure-aggregation=true",
    "fedavg": "algorithm='fedavg' num-server-rounds=2 secure-aggregation=true",
    "fedfw-plus": "algorithm='fedfw-plus' num-server-rounds=2 secure-aggregation=true",
    "feddr": "algorithm='feddr' num-server-rounds=2 secure-aggregation=true",
    # not a sum: FedFun's models sealed node to node, with the same sealing keys
    "fedfun-sealed": "algorithm='fedfun' task='wine' num-server-rounds=2 fedfun.hidden='8' "
    "fedfun.initial-steps=20 fedfun.local-steps=5 relay-encryption=true",
    # FFGB's learners sealed under a group key that one node makes and wraps to the others
    "ffgb-sealed": "algorithm='ffgb' task='wine' ffgb.learner='tree' num-server-rounds=2 "
    "central-evaluation=false relay-encryption=true",
}


@pytest.mark.parametrize("name", SECURE)
def test_secure_aggregation_through_ray_equals_the_in_process_engine(
    superlink, app, tmp_path, name
):
    """A secure sum's stages, and an encrypted relay's sealing keys, keep each node's secrets in
    its Context.state between messages: through Ray's engine too, the sums and the opened models
    (and so the rows) are the in-process engine's."""
    env, connection = superlink
    out = tmp_path / "results"
    completed = flwr_run(
        env, connection, 3, f"{SECURE[name]} output-dir='{out}' run-name='secure'", app=app
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0 and "[results] round 2/2" in log, log[-3000:]
    rows = json.loads((out / "secure" / "metrics.json").read_text())["rounds"]
    local = run_app(tmp_path / "local", 3, **parse_overrides(SECURE[name])).rows
    keys = ("test_accuracy", "test_loss", "train_loss", "failures", "participants")
    keys += ("test_accuracy_mean", "consensus_distance")
    assert [{k: r.get(k) for k in keys} for r in rows] == [
        {k: r.get(k) for k in keys} for r in local
    ]
    assert rows[-1]["participants"] == 3


def test_fedxgb_hist_s_mid_run_refusal_fails_the_ray_run_in_one_sentence(superlink, app, tmp_path):
    """Bins too many for ``max-histogram-bytes`` are known only once the nodes' sketches are
    in: through Ray, too, the run stops before its first round, Flower records it as failed and
    config.json's outcome names the bound (tests/fedavg_xgboost/test_fedxgb_hist.py: the in-process
    engine)."""
    env, connection = superlink
    out = tmp_path / "results"
    completed = flwr_run(
        env,
        connection,
        3,
        f"{HIST} fedxgb-hist.max-histogram-bytes=2048 output-dir='{out}' run-name='bound'",
        timeout=400,
        app=app,
    )
    log = completed.stdout + completed.stderr
    assert "lower fedxgb-hist.max-depth or max-bin" in log, log[-3000:]
    assert "[results] round 1" not in log
    outcome = json.loads((out / "bound" / "config.json").read_text())["outcome"]
    assert outcome["status"] == "failed" and outcome["rounds"] == 0, outcome
    assert outcome["cause"].startswith("refused once the nodes answered: one level's histograms")
    assert run_status(env, connection, log) == "finished:failed"
