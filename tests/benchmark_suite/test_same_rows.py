"""benchmarks.same_rows: its files carry the writer's environment, and ``compare`` names where
two environments differ without counting it as a difference of rows."""

from __future__ import annotations

import json

import torch

from benchmarks import same_rows

ROWS = {"fedavg": [{"round": 0, "test_loss": 1.5}, {"round": 1, "test_loss": 1.25}]}


def write(path, rows, env=None):
    path.write_text(json.dumps({**rows, **({same_rows.ENVIRONMENT: env} if env else {})}))
    return path


def test_the_environment_names_python_torch_s_threads_and_the_packages():
    env = same_rows.environment()
    assert {"python", "torch threads", *same_rows.PACKAGES} <= set(env)
    assert env["torch"] != "absent" and int(env["torch threads"]) >= 1
    # the CPU's vector extensions decide numpy's and torch's kernels, so their floats too
    assert env["torch cpu capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(env["cpu vector flags"].split()) <= {*same_rows.VECTOR_FLAGS, "unknown"}


def test_compare_names_a_moved_package_and_still_judges_the_rows_alone(tmp_path, capsys):
    a = write(tmp_path / "a.json", ROWS, {"torch": "2.13.0", "numpy": "2.4.6"})
    b = write(tmp_path / "b.json", ROWS, {"torch": "2.14.0", "numpy": "2.4.6"})
    assert same_rows.compare(a, b) == 0
    out = capsys.readouterr().out
    assert "environment differs (torch 2.13.0 -> 2.14.0)" in out and "fedavg: identical" in out
    moved = {"fedavg": [ROWS["fedavg"][0], {"round": 1, "test_loss": 1.2500001}]}
    c = write(tmp_path / "c.json", moved, {"torch": "2.13.0", "numpy": "2.4.6"})
    assert same_rows.compare(a, c) == 1
    out = capsys.readouterr().out
    assert "environment differs" not in out and "fedavg: DIFFERENT" in out


def test_compare_says_when_a_file_has_no_environment(tmp_path, capsys):
    a = write(tmp_path / "a.json", ROWS)
    b = write(tmp_path / "b.json", ROWS, {"torch": "2.13.0"})
    assert same_rows.compare(a, b) == 0
    assert f"environment: not recorded in {a}" in capsys.readouterr().out
