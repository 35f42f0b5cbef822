"""How runs end through `flwr run` on Flower's simulation engine (Ray), which fails differently
from the in-process engine:

- sites' bad files, where a ClientApp's exception would travel wrapped in Ray's traceback: every
  bad site is left out with the one sentence its node answered (file, column, problem), in
  config.json and in the log, with no traceback and no colour codes anywhere; the good sites
  train (the same cases run in-process in tests/site_data/test_site_runs.py);
- a diverging run: it stops as failed, saying so in one line, Flower records it failed,
  ``run_status`` exits 1 with its health line, and metrics.json is valid JSON.

The SuperLink (its own FLWR_HOME, loopback ports) serves every test of the module and is
stopped, with its process group, at the end (``testing.simulation_link``)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pandas as pd
import pytest

from deploy.app_files import app_copy
from tasks.sites import write_sites
from testing.inprocess_grid import PROJECT_ROOT
from testing.simulation_link import flwr_run as run_on_link
from testing.simulation_link import simulation_superlink

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # stage 2, one at a time
# the engines' coloured prefixes of a line: Ray's "(ClientAppActor pid=1)", Flower's "INFO :"
LEVEL = re.compile(r"^(?:\x1b\[\d+m[^\x1b]*\x1b\[0m\s*:?\s*)+")


def bad_sites(folder):
    """Partitions 0 and 1 good penguins; 2-9 each a bad file, with what its reason must say."""
    write_sites("penguins", folder)
    good = pd.read_csv(folder / "2.csv")
    (folder / "4.csv").write_bytes(b"")
    (folder / "5.csv").write_bytes((folder / "2.csv").read_bytes()[:-40] + b'"unclosed')
    good.drop(columns="species").to_csv(folder / "6.csv", index=False)
    good.assign(bill_length_mm=["long"] + list(good.bill_length_mm[1:])).to_csv(
        folder / "7.csv", index=False
    )
    good.assign(body_mass_g=[math.inf] + list(good.body_mass_g[1:])).to_csv(
        folder / "8.csv", index=False
    )
    good.iloc[:1].to_csv(folder / "9.csv", index=False)
    (folder / "2.csv").unlink()
    (folder / "3.csv").mkdir()
    return {
        2: "2.csv: no such file",
        3: "3.csv: a folder",
        4: "4.csv: empty file",
        5: "5.csv: unreadable CSV",
        6: "6.csv: no column 'species'",
        7: "column 'bill_length_mm' is categorical here but numeric at the other sites",
        8: "'body_mass_g' holds an infinite value",
        9: "9.csv: 1 row; a site needs at least 2",
    }


@pytest.fixture(scope="module")
def link(tmp_path_factory):
    """A simulation SuperLink for the module: (env, connection, its log file, the app files
    the runs submit)."""
    folder = tmp_path_factory.mktemp("link")
    app = app_copy(folder / "app")
    with simulation_superlink(folder / "flwr-home", folder / "superlink.log") as (env, name):
        yield env, name, folder / "superlink.log", app


def flwr_run(link, nodes: int, run_config: str) -> str:
    """``flwr run <app> --stream`` on the module's SuperLink; its output (it exits 0 whatever
    became of the run)."""
    env, connection, _, app = link
    completed = run_on_link(env, connection, nodes, run_config, app=app)
    return completed.stdout + completed.stderr


def test_bad_sites_are_left_out_with_one_sentence_through_ray(tmp_path, link):
    folder, out = tmp_path / "sites", tmp_path / "results"
    expected = bad_sites(folder)
    log = flwr_run(
        link,
        10,
        f"task='site' data.label='species' data.categorical='sex' "
        f"dataset-path='{folder}/{{partition-id}}.csv' ffgb.learner='tree' "
        f"num-server-rounds=1 output-dir='{out}' run-name='sim'",
    )
    engine_log = link[2].read_text()
    assert "[results] round 1/1" in log, log[-3000:]
    config = (out / "sim" / "config.json").read_text()
    sites = json.loads(config)["sites"]
    assert sites["partitions"] == [0, 1]
    ended = json.loads(config)["outcome"]
    assert ended["vacant"] == list(range(2, 10))  # the health line names them too
    assert "no node for partitions 2, 3, 4, 5, 6, 7, 8, 9, " in ended["line"], ended["line"]
    reasons = sorted(sites["left-out"].values())
    assert len(reasons) == len(expected)
    for partition, fragment in expected.items():
        assert sum(fragment in r for r in reasons) == 1, (partition, fragment, reasons)
    assert "Traceback" not in config and "\x1b[" not in config
    assert "Traceback" not in log and "Traceback" not in engine_log
    assert all(len(r) < 400 and "ClientAppException" not in r for r in reasons), reasons
    # the lines that report a node (the server's, and the node's own in Ray's output): the
    # engines' coloured prefixes, then our sentence, uncoloured
    reported = [
        LEVEL.sub("", line)
        for line in log.splitlines()
        if "left out" in line or "is refused" in line or "cannot answer" in line
    ]
    assert len(reported) >= len(expected)
    assert all("\x1b" not in line and "ClientAppException" not in line for line in reported), (
        reported
    )


def test_a_diverging_run_fails_in_one_line_and_run_status_says_so(tmp_path, link):
    out = tmp_path / "results"
    log = flwr_run(
        link,
        3,
        "algorithm='fedavg' task='diabetes' learning-rate=5.0 "
        f"num-server-rounds=4 output-dir='{out}' run-name='div'",
    )
    said = [LEVEL.sub("", line) for line in log.splitlines() if "diverged at round" in line]
    assert said and all("Traceback" not in line for line in said), log[-3000:]
    (health,) = [line for line in said if line.startswith("Run failed: diverged at round ")]
    assert "(fedavg on diabetes; step sizes learning-rate=5.0: a smaller one may help)" in health
    assert "[results] round 4/4" not in log
    text = (out / "div" / "metrics.json").read_text()
    metrics = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert metrics["summary"]["status"] == "failed" and metrics["rounds"][0]["round"] == 0
    outcome = json.loads((out / "div" / "config.json").read_text())["outcome"]
    assert outcome["diverged"] and outcome["line"] == health
    env, connection, _, _ = link
    status = subprocess.run(
        [sys.executable, "-m", "server_app.run_status", "--output-dir", str(out), connection],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert status.returncode == 1, status.stdout + status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].endswith(": finished:failed") and lines[1] == f"results: {out / 'div'}"
    assert lines[2] == health and "diverged at round" in status.stderr
