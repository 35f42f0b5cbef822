"""Round 1 admits nodes that connect late (``join-timeout``, ``strategies.roster``): a site
started after ``min-nodes`` were there trains from round 1; without the wait it joins from the
next round, and when it does not come at all the run goes on and its health line names the
missing partition. With sites' own data a node the schema agreement did not see is
vetted first, as the agreement would have (``SiteAgreement.vet``): a file the agreed schema does
not fit, or whose scales are implausible beside the agreed sites' (``data.strict``), never
trains.

In-process engine: ``LateGrid`` hides one node until ``delay`` seconds after the first
``query.node`` was sent (as a SuperNode that connects then)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable

import pandas as pd
import pytest

from client_app.app import app as client_app
from server_app.app import main as server_main
from strategies.roster import Admission, Roster
from tasks import site_files
from testing.inprocess_grid import LocalGrid, run_config, server_context
from tests.helpers import RUN_NAME, train_messages
from tests.membership.test_returning_node import AnsweringGrid, facts

NODES, LATE = 4, 3
FAST = {"algorithm": "fedavg", "task": "synthetic", "num-server-rounds": 2, "min-nodes": 3}
PENGUINS = {
    "task": "site",
    "data.label": "species",
    "data.categorical": "sex",
    "num-server-rounds": 1,
    "algorithm": "ffgb",
    "ffgb.learner": "tree",
    "min-nodes": 2,
}


class LateGrid(LocalGrid):
    """A LocalGrid whose node of partition ``late`` connects ``delay`` seconds after the first
    message of type ``after`` was sent (never, for an infinite delay)."""

    def __init__(self, *args, late: int, delay: float, after: str = "query.node", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.late = self.partition_node(late)
        self.node_ids.remove(self.late)
        self.delay, self.after, self.asked_at = delay, after, math.inf

    def get_node_ids(self) -> Iterable[int]:
        ids = list(super().get_node_ids())
        if self.asked_at == math.inf and any(
            m.metadata.message_type == self.after for m in self.down
        ):
            self.asked_at = time.monotonic()
        if self.late not in ids and time.monotonic() - self.asked_at >= self.delay:
            self.node_ids.append(self.late)
            ids.append(self.late)
        return ids


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


def late_run(
    tmp_path, delay: float, num_nodes: int = NODES, node_configs=None, after="query.node", **keys
):
    """The run (its grid, config.json and rows, seconds) with partition ``num_nodes - 1``'s
    node late (``LateGrid``)."""
    config = run_config(**{"output-dir": str(tmp_path), "run-name": RUN_NAME, **keys})
    grid = LateGrid(
        client_app, config, num_nodes, node_configs, late=num_nodes - 1, delay=delay, after=after
    )
    started = time.monotonic()
    server_main(grid, server_context(config))
    out = tmp_path / RUN_NAME
    record = json.loads((out / "config.json").read_text())
    rows = json.loads((out / "metrics.json").read_text())["rounds"]
    return grid, record, rows, time.monotonic() - started


@pytest.mark.parametrize("delay, join_timeout", [(0.0, 0.0), (1.5, 30.0)])
def test_a_node_that_connects_during_round_1_trains_from_round_1(
    tmp_path, caplog, delay, join_timeout
):
    caplog.set_level(logging.INFO, logger="flwr")
    grid, record, rows, _ = late_run(tmp_path, delay, **FAST, **{"join-timeout": join_timeout})
    outcome = record["outcome"]
    assert outcome["nodes"] == NODES and outcome["vacant"] == [] and outcome["left_out"] == {}
    assert record["num_nodes"] == NODES  # in the run, not the three connected at its start
    assert f"{NODES} nodes, 0 left out" in outcome["line"]
    assert len(train_messages(grid, grid.late)) == 2  # rounds 1 and 2
    assert all(r["failures"] == 0 for r in rows)
    waited = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    # asked at once when it is there after the first question; waited for when it is not
    assert bool(waited) == (delay > 0), waited
    if waited:
        assert f"3 of {NODES} nodes connected, no node for partitions {LATE};" in waited[0]
    asked = [r.getMessage() for r in caplog.records if "asking the late nodes" in r.getMessage()]
    assert asked == [f"FedAvg round 1: asking the late nodes [{grid.late}]"]


def test_without_join_timeout_a_late_node_joins_from_the_next_round(tmp_path):
    # it connects once round 1's train messages are out (and a moment after the first question)
    grid, record, rows, _ = late_run(tmp_path, 0.0, after="train", **FAST, **{"join-timeout": 0.0})
    outcome = record["outcome"]
    # it connected before round 2: asked then, and admitted for the partition nobody served
    assert outcome["nodes"] == NODES and outcome["vacant"] == [] and outcome["left_out"] == {}
    assert [m.content["config"]["server-round"] for m in train_messages(grid, grid.late)] == [2]
    assert [r["participants"] for r in rows[1:]] == [NODES - 1, NODES]
    assert all(r["failures"] == 0 for r in rows)


def test_the_wait_ends_at_join_timeout_when_nobody_comes(tmp_path):
    grid, record, _, seconds = late_run(tmp_path, math.inf, **FAST, **{"join-timeout": 2.0})
    assert record["outcome"]["vacant"] == [LATE] and record["outcome"]["left_out"] == {}
    assert grid.late not in grid.node_ids
    assert seconds >= 2.0


def test_the_roster_does_not_wait_when_every_partition_s_node_is_connected(caplog):
    """A connected node that gives no usable answer: waiting would bring nobody."""
    caplog.set_level(logging.INFO, logger="flwr")
    grid = AnsweringGrid({10: facts(0), 20: facts(1), 30: facts(2), 40: None})
    started = time.monotonic()
    roster, rejected = Roster.query(grid, "test", 1, Admission(join_timeout=600.0))
    assert time.monotonic() - started < 5 and roster.vacant() == [3] and rejected == 1
    assert not any("waiting up to" in r.getMessage() for r in caplog.records)


class FloodGrid(AnsweringGrid):
    """A new node id at every look at the connected nodes, each claiming partition 0 (served),
    so partition 3 stays vacant: what anyone could do to a SuperLink without authentication."""

    def get_node_ids(self) -> list[int]:
        node = max(self.connected) + 1
        self.answers[node], self.connected = facts(0), self.connected | {node}
        return super().get_node_ids()


def test_the_wait_for_late_nodes_ends_at_join_timeout_however_many_keep_coming():
    grid = FloodGrid({10: facts(0), 20: facts(1), 30: facts(2)})
    started = time.monotonic()
    roster, _ = Roster.query(grid, "test", 1, Admission(join_timeout=1.0))
    assert time.monotonic() - started < 10
    assert roster.node_ids == [10, 20, 30] and roster.vacant() == [3]
    assert all(r == "partition 0 is served by node 10" for r in roster.left_out.values())


def test_a_vetted_node_is_refused_before_it_is_asked():
    grid = AnsweringGrid({10: facts(0), 20: facts(1)})
    vetted = []

    def vet(_grid, node_ids: list[int], server_round: int) -> tuple[dict[int, str], int]:
        assert server_round == 1
        vetted.extend(node_ids)
        return {20: "its file does not fit the agreed schema"}, 1

    roster, rejected = Roster.query(grid, "test", 1, Admission(vet=vet))
    assert vetted == [10, 20] and grid.asked == [10] and rejected == 1
    assert roster.node_ids == [10]
    assert roster.left_out == {20: "its file does not fit the agreed schema"}


def late_site(tmp_path, penguins, frame: pd.DataFrame | None, after="query.node", **keys):
    """The penguins' sites 0 and 1 agree the schema; site 2 (Torgersen) connects when round 1
    asks them, or once the first message of type ``after`` is out (``frame``: its file instead
    of the bundled one)."""
    configs = None
    if frame is not None:
        frame.to_csv(tmp_path / "late.csv", index=False)
        configs = [{}, {}, {"dataset-path": str(tmp_path / "late.csv")}]
    return late_run(
        tmp_path,
        0.0,
        3,
        configs,
        after,
        **{**PENGUINS, "dataset-path": f"{penguins}/{{partition-id}}.csv", **keys},
    )


@pytest.mark.parametrize("fits", [True, False], ids=["same-file", "misfit"])
def test_a_site_that_connects_after_round_1_is_vetted_and_joins(tmp_path, penguins, fits):
    frame = None if fits else pd.read_csv(penguins / "2.csv").drop(columns="year")
    keys = {"num-server-rounds": 2, "join-timeout": 0.0}
    grid, record, rows, _ = late_site(tmp_path, penguins, frame, after="train", **keys)
    late = [m.metadata for m in grid.down if m.metadata.dst_node_id == grid.late]
    assert [m.group_id for m in late[:1]] == ["2"]  # seen at round 2's refresh
    if not fits:
        assert [m.message_type for m in late] == ["query.facts"]
        assert record["outcome"]["vacant"] == [2] and rows[2]["failures"] == 1
        return
    assert [m.message_type for m in late[:3]] == ["query.facts", "query.node", "train"]
    assert record["sites"]["partitions"] == [0, 1, 2] and record["sites"]["left-out"] == {}
    assert record["outcome"]["nodes"] == 3 and record["outcome"]["vacant"] == []
    assert "site2_test_accuracy" in rows[-1]


def test_a_late_site_is_vetted_by_the_agreement_and_trains(tmp_path, penguins):
    grid, record, rows, _ = late_site(tmp_path, penguins, None)
    late = [m.metadata for m in grid.down if m.metadata.dst_node_id == grid.late]
    asked = [m.message_type for m in late]
    assert asked[:2] == ["query.facts", "query.node"]  # vetted, then asked who it is
    assert [m.group_id for m in late[:2]] == ["1", "1"]  # round 1's, not the agreement's 0
    assert "query.moments" not in asked  # the agreed sums are the first two sites'
    assert record["sites"]["partitions"] == [0, 1, 2] and record["sites"]["left-out"] == {}
    assert record["outcome"]["nodes"] == 3 and record["outcome"]["vacant"] == []
    assert len(train_messages(grid, grid.late)) == 1
    assert "site2_test_accuracy" in rows[-1]


def test_a_late_site_the_agreed_schema_does_not_fit_never_trains(tmp_path, penguins):
    frame = pd.read_csv(penguins / "2.csv").drop(columns="year")
    grid, record, rows, _ = late_site(tmp_path, penguins, frame)
    asked = [m.metadata.message_type for m in grid.down if m.metadata.dst_node_id == grid.late]
    assert asked == ["query.facts"]  # never asked query.node, never trained
    reason = "no column 'year' (the run's schema has it)"
    assert record["sites"]["partitions"] == [0, 1]
    assert record["sites"]["left-out"] == {str(grid.late): reason}
    assert record["outcome"]["left_out"] == {str(grid.late): reason}
    assert record["outcome"]["vacant"] == [2]
    assert rows[1]["failures"] == 1  # round 1 counts the refused answer


def test_a_late_site_s_implausible_scales_are_said_as_the_agreement_says_them(tmp_path, penguins):
    """Grams at two sites and kilograms at the late one (``data.scale-factor`` 100: more than
    100 times apart): a warning (``data.strict`` off), in the record and the health line's
    count."""
    frame = pd.read_csv(penguins / "2.csv")
    kilograms = frame.assign(body_mass_g=frame.body_mass_g / 1000)
    grid, record, _, _ = late_site(tmp_path, penguins, kilograms, **{"data.scale-factor": 100.0})
    (warning,) = [w for w in record["sites"]["warnings"] if "body_mass_g" in w]
    assert warning.startswith(f"node {grid.late} (partition 2): column 'body_mass_g'")
    assert "another unit?" in warning
    assert len(train_messages(grid, grid.late)) == 1
    assert warning in record["outcome"]["warnings"]


@pytest.mark.parametrize("fits", [True, False], ids=["same-file", "misfit"])
def test_a_site_back_under_a_new_node_id_is_vetted_before_it_takes_its_place(
    tmp_path, penguins, fits
):
    """Site 2's SuperNode restarts during the run (a new node id): the agreement did not see
    that id, so its facts are checked first; with its file it takes its place, with a file
    the schema does not fit it stays out and the run goes on with two sites."""
    config = run_config(
        **{
            **PENGUINS,
            "num-server-rounds": 3,
            "dataset-path": f"{penguins}/{{partition-id}}.csv",
            "output-dir": str(tmp_path),
            "run-name": RUN_NAME,
        }
    )
    grid = LocalGrid(client_app, config, 3)
    old = grid.partition_node(2)
    grid.leave(old, from_round=2)  # gone before round 1's training
    new = grid.join(2, from_round=3)  # back (a new id) by round 3
    if not fits:
        pd.read_csv(penguins / "2.csv").drop(columns="year").to_csv(tmp_path / "2.csv", index=False)
        grid.contexts[new].node_config["dataset-path"] = str(tmp_path / "2.csv")
    server_main(grid, server_context(config))
    record = json.loads((tmp_path / RUN_NAME / "config.json").read_text())
    rows = json.loads((tmp_path / RUN_NAME / "metrics.json").read_text())["rounds"]
    asked = [m.metadata.message_type for m in grid.down if m.metadata.dst_node_id == new]
    assert asked[:1] == ["query.facts"]
    if fits:
        assert asked[1] == "query.node" and train_messages(grid, new)
        assert [r["participants"] for r in rows[1:]] == [2, 2, 3]
        assert record["outcome"]["left_out"] == {} and record["outcome"]["nodes"] == 3
    else:
        assert asked == ["query.facts"]
        assert [r["participants"] for r in rows[1:]] == [2, 2, 2]
        reason = "no column 'year' (the run's schema has it)"
        assert record["outcome"]["left_out"] == {str(new): reason}
        assert record["sites"]["left-out"] == {str(new): reason}
