"""The results writer, payload accounting and the metered grid."""

import csv
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from matplotlib.ticker import MaxNLocator

from functions.records import payload_bytes
from run_config.common import RunSettings
from server_app import results, run_info
from server_app.checkpoint import Checkpoint, write_checkpoint
from server_app.recording import format_late, format_row
from server_app.results import ResultsWriter, summarise, write_atomic, write_plots


def test_writer_keeps_every_round_on_disk_and_plots(tmp_path):
    writer = ResultsWriter(tmp_path / "run", {"run_config": {"seed": 0}})
    writer.add_round({"round": 0, "test_accuracy": 0.1, "bytes_up": 0, "bytes_down": 0})
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_disk["rounds"][0]["test_accuracy"] == 0.1  # written before the run ends
    writer.add_round(
        {"round": 1, "test_accuracy": 0.5, "bytes_up": 10, "bytes_down": 20, "fw_gap": 0.3}
    )
    plots = writer.finish({"final_test_accuracy": 0.5})
    assert sorted(p.name for p in plots) == [
        "bytes_vs_round.png",
        "test_accuracy_vs_bytes.png",
        "test_accuracy_vs_round.png",
    ]
    with open(tmp_path / "run" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[1]["fw_gap"] == "0.3" and rows[0]["fw_gap"] == ""
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())["summary"]
    assert summary == {"final_test_accuracy": 0.5}
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"run_config": {"seed": 0}}


def test_payload_counts_array_data_and_values_not_headers():
    content = RecordDict(
        {
            "arrays": ArrayRecord(
                {"w": Array(np.zeros((3, 5), np.float32)), "i": Array(np.zeros(2, np.int8))}
            ),
            "config": ConfigRecord({"kind": "l1", "round": 3, "flags": [True, False]}),
            "metrics": MetricRecord({"loss": 0.5}),
        }
    )
    assert payload_bytes(content) == 3 * 5 * 4 + 2 + 2 + 8 + 2 + 8


def test_log_line_has_round_metrics_bytes_and_time():
    line = format_row(
        {
            "round": 2,
            "test_accuracy": 0.91234,
            "test_loss": 0.3,
            "bytes_up": 2500,
            "bytes_down": 5000,
            "wall_time_s": 1.25,
            "failures": 0,
        },
        10,
    )
    assert line == (
        "[results] round 2/10 | test_accuracy=0.9123 | test_loss=0.3000 | "
        "up=2.5kB down=5.0kB | t=1.2s"
    )


def test_a_late_evaluation_has_a_line_of_its_own_figures():
    figures = {"train_loss": 0.25, "federated_test_accuracy": 0.9, "failures": 1, "x": 3.0}
    assert format_late(2, 10, figures) == (
        "[results] round 2/10, its nodes' evaluation (with round 3's replies): "
        "train_loss=0.2500 | federated_test_accuracy=0.9000 | failures=1"
    )


# -- plots: title, integer round ticks, traffic split on a log scale; summary ---------------


def _rounds(metric: str = "test_accuracy") -> list[dict]:
    rows = [{"round": 0, metric: 0.1, "bytes_up": 0, "bytes_down": 0}]
    for t in range(1, 6):
        rows.append(
            {
                "round": t,
                metric: 0.1 * t,
                "bytes_up": 1000 + 6 * t,
                "bytes_down": 5000 + 2440 * t,
                "bytes_up_train": 6 * t,
                "bytes_down_train": 2440 * t,
                "wall_time_s": float(t),
            }
        )
    return rows


@pytest.fixture
def saved_figures(monkeypatch):
    """Every Figure saved by write_plots, by file name (the PNG is still written)."""
    figures = {}
    original = results._save_figure

    def capture(fig, path):
        figures[Path(path).name] = fig
        return original(fig, path)

    monkeypatch.setattr(results, "_save_figure", capture)
    return figures


def _legend_labels(fig) -> list[str]:
    (ax,) = fig.axes
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_every_plot_has_the_title_and_round_axes_have_integer_ticks(tmp_path, saved_figures):
    title = "FedFW on synthetic, l1(10), 4 nodes"
    paths = write_plots(tmp_path, _rounds(), title)
    names = sorted(p.name for p in paths)
    assert names == [
        "bytes_vs_round.png",
        "test_accuracy_vs_bytes.png",
        "test_accuracy_vs_round.png",
    ]
    assert sorted(saved_figures) == names
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    for fig in saved_figures.values():
        assert fig._suptitle is not None and fig._suptitle.get_text() == title
    for name in ("test_accuracy_vs_round.png", "bytes_vs_round.png"):
        (ax,) = saved_figures[name].axes
        locator = ax.xaxis.get_major_locator()
        assert isinstance(locator, MaxNLocator) and locator._integer
        ticks = ax.get_xticks()
        assert len(ticks) > 1 and all(float(t).is_integer() for t in ticks)
        assert ax.get_xlabel() == "round"


def test_writer_passes_its_title_to_the_plots(tmp_path, saved_figures):
    writer = ResultsWriter(tmp_path / "run", {}, rounds=_rounds()[:3], title="my run")
    for row in _rounds()[3:]:
        writer.add_round(row)
    assert [r["round"] for r in writer.rounds] == [0, 1, 2, 3, 4, 5]
    paths = writer.finish({})
    assert len(paths) == 3 and len(saved_figures) == 3
    assert {fig._suptitle.get_text() for fig in saved_figures.values()} == {"my run"}
    rounds = json.loads((tmp_path / "run" / "metrics.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3, 4, 5]


def test_bytes_plot_splits_train_up_down_and_evaluation_on_a_log_scale(tmp_path, saved_figures):
    write_plots(tmp_path, _rounds(), "t")
    assert (tmp_path / "bytes_vs_round.png").is_file()
    fig = saved_figures["bytes_vs_round.png"]
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    labels = _legend_labels(fig)
    assert labels == [
        "train, up",
        "train, down",
        "evaluation & queries, up",
        "evaluation & queries, down",
    ]
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["train, up"] == [6 * t for t in range(1, 6)]
    assert lines["train, down"] == [2440 * t for t in range(1, 6)]
    # evaluation traffic is the round's total minus its training traffic
    assert lines["evaluation & queries, up"] == [1000] * 5
    assert lines["evaluation & queries, down"] == [5000] * 5
    assert list(ax.get_lines()[0].get_xdata()) == [1, 2, 3, 4, 5]  # round 0 is not plotted


def test_the_bytes_axis_counts_every_message_and_ends_at_the_runs_total(tmp_path, saved_figures):
    """FFGB's learners ride the evaluate message: an axis of train messages alone ended at a
    tenth of the traffic of the default job. The axis is every byte, and says so."""
    rows = _rounds()
    write_plots(tmp_path, rows, "")
    (ax,) = saved_figures["test_accuracy_vs_bytes.png"].axes
    xs = list(ax.get_lines()[0].get_xdata())
    summary = summarise(rows)
    assert xs[-1] * 1e6 == pytest.approx(summary["bytes_up_total"] + summary["bytes_down_total"])
    assert xs == pytest.approx(
        [
            sum(r["bytes_up"] + r["bytes_down"] for r in rows[: t + 1]) / 1e6
            for t in range(len(rows))
        ]
    )
    assert ax.get_xlabel() == "cumulative payload of every message, up + down (MB)"


def test_bytes_plot_leaves_out_traffic_that_never_happened(tmp_path, saved_figures):
    rows = [
        {
            "round": t,
            "test_accuracy": 0.5,
            "bytes_up": 10 * t,
            "bytes_down": 20 * t,
            "bytes_up_train": 10 * t,
            "bytes_down_train": 20 * t,
        }
        for t in range(3)
    ]
    write_plots(tmp_path, rows, "")
    assert _legend_labels(saved_figures["bytes_vs_round.png"]) == ["train, up", "train, down"]


def test_metric_plots_are_named_after_the_mean_metric_when_only_it_is_present(
    tmp_path, saved_figures
):
    paths = write_plots(tmp_path, _rounds("test_accuracy_mean"), "per-node models")
    assert sorted(p.name for p in paths) == [
        "bytes_vs_round.png",
        "test_accuracy_mean_vs_bytes.png",
        "test_accuracy_mean_vs_round.png",
    ]
    (ax,) = saved_figures["test_accuracy_mean_vs_round.png"].axes
    assert ax.get_ylabel() == "test accuracy mean"
    assert (tmp_path / "test_accuracy_mean_vs_round.png").is_file()
    assert not (tmp_path / "test_accuracy_vs_round.png").exists()


def test_summary_takes_the_best_mse_as_the_lowest_and_accuracy_as_the_highest():
    rounds = [
        {"round": 0, "test_mse": 5.0, "test_accuracy": 0.2, "bytes_up": 1, "bytes_down": 2},
        {
            "round": 1,
            "test_mse": 1.0,
            "test_accuracy": 0.9,
            "bytes_up": 3,
            "bytes_down": 4,
            "bytes_up_train": 1,
            "bytes_down_train": 2,
            "failures": 1,
            "wall_time_s": 1.5,
        },
        {
            "round": 2,
            "test_mse": 2.0,
            "test_accuracy": 0.6,
            "bytes_up": 5,
            "bytes_down": 6,
            "bytes_up_train": 3,
            "bytes_down_train": 4,
            "failures": 0,
            "wall_time_s": 3.0,
        },
    ]
    summary = summarise(rounds)
    assert summary["final_test_mse"] == 2.0 and summary["best_test_mse"] == 1.0
    assert summary["final_test_accuracy"] == 0.6 and summary["best_test_accuracy"] == 0.9
    assert summary["rounds"] == 2 and summary["wall_time_s"] == 3.0
    assert summary["bytes_up_total"] == 9 and summary["bytes_down_total"] == 12
    assert summary["bytes_up_train_total"] == 4 and summary["bytes_down_train_total"] == 6
    assert summary["failures_total"] == 1
    assert "best_test_accuracy_mean" not in summary and "final_test_mse_mean" not in summary
    mean_only = summarise(
        [
            {"round": 0, "test_mse_mean": 4.0},
            {"round": 1, "test_mse_mean": 3.0},
            {"round": 2, "test_mse_mean": 3.5},
        ]
    )
    assert mean_only["best_test_mse_mean"] == 3.0 and mean_only["final_test_mse_mean"] == 3.5


# --- every results file is written atomically (issue 19 item 7) -------------------------------


def _checkpoint() -> Checkpoint:
    return Checkpoint(
        "fedfw",
        1,
        ArrayRecord({"w": Array(np.zeros(3, np.float32))}),
        [{"round": 0}],
        RecordDict(),
        {"algorithm": "fedfw"},
    )


@pytest.fixture
def replaced(monkeypatch):
    """(temporary file, destination) of every os.replace, and the files fsync-ed."""
    calls: list[tuple[str, str]] = []
    synced: list[int] = []
    original_replace, original_fsync = os.replace, os.fsync

    def replace(src, dst, *args, **kwargs):
        calls.append((str(src), str(dst)))
        return original_replace(src, dst, *args, **kwargs)

    def fsync(fd):
        synced.append(fd)
        return original_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    return calls, synced


def test_every_results_file_is_renamed_into_place_after_an_fsync(tmp_path, replaced):
    calls, synced = replaced
    writer = ResultsWriter(tmp_path / "run", {"seed": 0})
    for row in _rounds()[:3]:
        writer.add_round(row)
    writer.finish({})
    write_checkpoint(tmp_path / "run", _checkpoint())
    written = {Path(dst).name for _, dst in calls}
    assert written == {
        "config.json",
        "metrics.json",
        "metrics.csv",
        "checkpoint.pb",
        "test_accuracy_vs_round.png",
        "test_accuracy_vs_bytes.png",
        "bytes_vs_round.png",
    }
    assert len(synced) == len(calls)
    for src, dst in calls:  # a temporary file of the same folder, never a fixed name
        assert Path(src).parent == Path(dst).parent
        assert Path(src).name.startswith(f".{Path(dst).name}.") and src.endswith(".tmp")
    assert len({src for src, _ in calls}) == len(calls)  # a new temporary name every time
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted(written)


def test_results_files_get_the_mode_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "a.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("round\n0\n")

    def half_then_fail(handle):
        handle.write(b"round,test_acc")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, half_then_fail)
    assert path.read_text() == "round\n0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]


def test_a_checkpoint_that_cannot_be_renamed_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError("rename refused")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="rename refused"):
        write_checkpoint(tmp_path, _checkpoint())
    with pytest.raises(OSError, match="rename refused"):
        ResultsWriter(tmp_path / "run", {})
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert list((tmp_path / "run").iterdir()) == []


@pytest.mark.parametrize("kind", ["checkpoint", "metrics"])
def test_two_writers_in_one_folder_do_not_share_a_temporary_file(tmp_path, monkeypatch, kind):
    """Both writers have their temporary file written before either renames it: with a fixed
    temporary name the second would overwrite the first's, and one rename would fail."""
    barrier = threading.Barrier(2, timeout=10)
    sources: list[str] = []
    original = os.replace

    def replace(src, dst):
        sources.append(str(src))
        barrier.wait()
        return original(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    (tmp_path / "run").mkdir()
    errors: list[BaseException] = []

    def write(i: int) -> None:
        try:
            if kind == "checkpoint":
                write_checkpoint(tmp_path / "run", _checkpoint())
            else:
                ResultsWriter(tmp_path / "run", {"writer": i})
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(set(sources)) == 2
    leftovers = [p.name for p in (tmp_path / "run").iterdir()]
    assert leftovers == ["checkpoint.pb" if kind == "checkpoint" else "config.json"]


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(run_info.time, "strftime", lambda _fmt: "20261127-120000")
    settings = RunSettings.from_run_config({"output-dir": str(tmp_path)})
    folders = [run_info.results_directory(settings) for _ in range(3)]
    assert [f.name for f in folders] == [
        f"{settings.algorithm}-{settings.task}-20261127-120000{suffix}"
        for suffix in ("", "-2", "-3")
    ]
    assert all(f.is_dir() for f in folders)
    named = RunSettings.from_run_config({"output-dir": str(tmp_path), "run-name": "mine"})
    assert run_info.results_directory(named) == run_info.results_directory(named)  # resumable
