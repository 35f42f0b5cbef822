"""A resumed run on sites' own data keeps the schema it was trained under: the rounds after the
checkpoint equal an uninterrupted run's, and a site whose file changed meanwhile is checked
against the kept schema (its new sums do not move the transform; a value outside it leaves the
site out with the reason)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from client_app.app import app as client_app
from client_app.setup import clear_setups
from server_app.app import InvalidRunConfig, run
from server_app.checkpoint import read_checkpoint, write_checkpoint
from tasks import site_files
from tasks.sites import write_sites
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.helpers import RUN_NAME
from tests.lifecycle.test_checkpoints import assert_resumed_equals, crashed_before, rows_of

PENGUINS = {
    "task": "site",
    "data.label": "species",
    "data.categorical": "sex",
    "algorithm": "fedavg",
    "num-server-rounds": 4,
    "fraction-train": 0.67,
}


@pytest.fixture(autouse=True)
def fresh_caches():
    site_files._CACHE.clear()
    clear_setups()


def config_for(out, sites) -> dict:
    return run_config(
        **{
            "output-dir": str(out),
            "run-name": RUN_NAME,
            **PENGUINS,
            "dataset-path": f"{sites}/{{partition-id}}.csv",
        }
    )


def sites_record(out) -> dict:
    return json.loads((out / RUN_NAME / "config.json").read_text())["sites"]


def crashed_run(tmp_path, sites):
    config = config_for(tmp_path / "resumed", sites)
    grid = crashed_before(config, 3, 3)
    clear_setups()  # a resumed run is a new Flower run: each node reads its files again
    site_files._CACHE.clear()
    return config, grid


def test_a_resumed_site_run_equals_an_uninterrupted_one(tmp_path):
    sites = tmp_path / "sites"
    write_sites("penguins", sites)
    whole = config_for(tmp_path / "whole", sites)
    run(LocalGrid(client_app, whole, 3), server_context(whole))
    config, grid = crashed_run(tmp_path, sites)
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    assert_resumed_equals(rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole"), after=2)
    assert sites_record(tmp_path / "resumed") == sites_record(tmp_path / "whole")


def test_a_resumed_run_keeps_its_schema_when_a_sites_file_changed(tmp_path):
    sites = tmp_path / "sites"
    write_sites("penguins", sites)
    config, grid = crashed_run(tmp_path, sites)
    before = sites_record(tmp_path / "resumed")
    fewer = pd.read_csv(sites / "2.csv")
    fewer.iloc[: len(fewer) // 2].to_csv(sites / "2.csv", index=False)  # other sums
    other = pd.read_csv(sites / "1.csv")
    other.assign(sex=["unknown"] + list(other.sex[1:])).to_csv(sites / "1.csv", index=False)
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)

    after = sites_record(tmp_path / "resumed")
    assert after["schema"] == before["schema"]  # the kept transform, not the new sums
    assert after["partitions"] == [0, 2]
    (reason,) = after["left-out"].values()
    assert "column 'sex' holds 'unknown', not one of the run's categories" in reason
    assert [r["round"] for r in rows_of(tmp_path / "resumed")] == [0, 1, 2, 3, 4]


def test_a_site_checkpoint_without_its_schema_is_refused(tmp_path):
    sites = tmp_path / "sites"
    write_sites("penguins", sites)
    config, grid = crashed_run(tmp_path, sites)
    folder = tmp_path / "resumed" / RUN_NAME
    checkpoint = read_checkpoint(folder)
    checkpoint.site_schema = ""
    write_checkpoint(folder, checkpoint)
    with pytest.raises(InvalidRunConfig, match="the checkpoint holds no sites' schema"):
        run(grid, server_context(config), resume_from=folder)
