"""Comparing finished runs: one figure by round and by bytes, a table with the configs'
differences, and a clear error for a folder that is not a run's."""

from __future__ import annotations

import json
import shutil

import pytest

from server_app import compare
from server_app.compare import RunFolderError, read_run
from tests.helpers import run_app

FAST = {"algorithm": "fedavg", "task": "iris", "num-server-rounds": 2, "local-steps": 2}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A real run, and a copy of it as if run with another learning rate and fewer bytes."""
    root = tmp_path_factory.mktemp("runs")
    first = run_app(root / "a", 3, **FAST).out_dir
    second = root / "b" / "lr-0.1"
    shutil.copytree(first, second)
    config = json.loads((second / "config.json").read_text())
    config["run_config"]["learning-rate"] = 0.1
    (second / "config.json").write_text(json.dumps(config))
    metrics = json.loads((second / "metrics.json").read_text())
    for row in metrics["rounds"]:
        row["bytes_down"] //= 2
    (second / "metrics.json").write_text(json.dumps(metrics))
    return first, second


def test_runs_are_drawn_together_and_their_differences_tabled(two_runs, tmp_path, capsys):
    assert compare.main([str(p) for p in two_runs] + ["--out", str(tmp_path / "c.png")]) == 0
    header, _, first, second = capsys.readouterr().out.splitlines()[:4]
    assert header.split(" | ")[-1].strip(" |") == "learning-rate"  # the only key that differs
    rate = read_run(two_runs[0]).run_config["learning-rate"]
    assert [row.split(" | ")[-1].strip(" |") for row in (first, second)] == [str(rate), "0.1"]
    moved = [float(row.split(" | ")[5]) for row in (first, second)]
    assert moved[1] < moved[0]  # the second moved fewer bytes
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_the_metric_is_one_every_run_reports(two_runs):
    runs = [read_run(p) for p in two_runs]
    assert compare.common_metric(runs) == "test_accuracy"
    with pytest.raises(RunFolderError, match="no metric in common among \\['test_mse'\\]"):
        compare.common_metric(runs, "test_mse")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda run: (run / "metrics.json").unlink(), "metrics.json: no such file"),
        (lambda run: (run / "config.json").write_text("{"), "config.json: unreadable"),
        (lambda run: (run / "metrics.json").write_text('{"rounds": 3}'), "expected {'rounds'"),
        (
            lambda run: (run / "metrics.json").write_text(
                '{"rounds": [{"test_accuracy": "high"}]}'
            ),
            "test_accuracy='high' is not a finite number",
        ),
    ],
)
def test_a_folder_that_is_not_a_runs_is_named(two_runs, tmp_path, capsys, damage, message):
    broken = tmp_path / "broken"
    shutil.copytree(two_runs[0], broken)
    damage(broken)
    assert compare.main([str(two_runs[0]), str(broken), "--out", str(tmp_path / "c.png")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.png").exists()


def test_round_0_is_drawn_at_zero_bytes_on_the_bytes_axis():
    """A log axis clips round 0 (no byte moved yet), so every run seemed to start at its
    round-1 accuracy: the axis is linear below the smallest traffic and logarithmic above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    xs = [0.0, 0.05, 0.1, 40.0]
    ax.plot(xs, [0.1, 0.5, 0.6, 0.9], marker="o")
    compare.traffic_scale(ax, xs)
    fig.canvas.draw()
    low, high = ax.get_xlim()
    assert ax.get_xscale() == "symlog" and low <= 0.0 < 0.05 and high >= 40.0
    shown = ax.transData.transform([(x, 0.5) for x in xs])[:, 0]
    assert all(a < b for a, b in zip(shown, shown[1:]))  # round 0 apart from round 1
    plt.close(fig)


def test_each_run_is_named_by_its_commit_else_by_its_fab(two_runs, tmp_path):
    """A run from a checkout shows its commit; one of plain ``flwr run`` (no .git in a FAB) its
    FAB's hash, id and version (``config.json``'s ``flower_app``)."""
    config = json.loads((two_runs[0] / "config.json").read_text())
    assert read_run(two_runs[0]).code == (config["git_commit"] or "unknown")
    fab = tmp_path / "fab"
    shutil.copytree(two_runs[0], fab)
    app = {"fab_id": "team/app", "fab_version": "1.2.0", "fab_hash": "ab" * 32}
    (fab / "config.json").write_text(json.dumps({**config, "git_commit": None, "flower_app": app}))
    assert read_run(fab).code == "FAB abababababab (team/app 1.2.0)"
