"""``benchmarks.devices``'s workloads are valid run configs, full and ``--quick``: its smoke test
(``tests/benchmark_suite/test_benchmarks_quick.py``) runs only two of them, and the benchmark
reports a failed row as a finding instead of failing, so a renamed key would otherwise go unnoticed
until a GPU session."""

from __future__ import annotations

import pytest

from benchmarks.devices import NODES, QUICK, WORKLOADS
from run_config.reference import toml_value
from server_app.preflight import check
from testing.inprocess_grid import counting


def _text(overrides: dict) -> str:
    return " ".join(f"{key}={toml_value(value)}" for key, value in overrides.items())


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("name, overrides", [(w[0], w[1]) for w in WORKLOADS])
def test_every_workload_is_a_valid_run_config(name, overrides, quick):
    text = _text(counting({**overrides, **(QUICK if quick else {})}))  # as run_workload does
    assert check(text, NODES).startswith("run config OK"), name
