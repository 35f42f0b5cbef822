"""A torch device per node (node config ``device``) and for central evaluation (``central-device``):
selection, the data cache, and the CPU path equal to the reference with every client half."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
import torch

from server_app.app import InvalidRunConfig
from server_app.results import CLOCKS
from tasks import devices
from tasks.devices import on_device, resolve_device
from tasks.errors import ConfigError
from tests.helpers import DEVICE_CASES as CASES
from tests.helpers import DEVICE_LOSS as LOSS
from tests.helpers import run_app


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_falls_back_to_the_cpu_and_explicit_values_are_honoured(no_cuda):
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")


def test_auto_picks_cuda_when_torch_sees_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"device='cuda:2'.*2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("value", ["gpu", "cuda:x", "", "cuda0", "tpu"])
def test_a_bad_device_is_a_clear_error_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"central-device=.*expected 'auto', 'cpu'"):
        resolve_device(value, "central-device")


def test_cuda_without_a_gpu_is_a_clear_error(no_cuda):
    with pytest.raises(ConfigError, match=r"device='cuda'.*0 CUDA device.*'auto' or 'cpu'"):
        resolve_device("cuda")


def test_on_the_cpu_tensors_share_the_arrays_memory():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = on_device(array, torch.device("cpu"))
    array[0, 0] = 42
    assert tensor[0, 0] == 42


def test_an_accelerator_copy_is_made_once_and_dropped_with_its_array():
    meta = torch.device("meta")  # a device without storage stands in for a GPU
    array = np.ones((5, 2), dtype=np.float32)
    first = on_device(array, meta)
    assert first.device == meta and on_device(array, meta) is first
    assert on_device(array, meta, lambda a: torch.as_tensor(a).long()) is not first
    before = len(devices._COPIES)
    del array
    gc.collect()
    assert len(devices._COPIES) == before - 2


def _rows(run) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in CLOCKS} for r in run.rows]


@pytest.mark.parametrize("algorithm", sorted(CASES))
@pytest.mark.e2e
def test_every_client_half_on_an_explicit_cpu_equals_the_default_without_a_gpu(
    tmp_path, algorithm, monkeypatch
):
    """``device='cpu'`` gives exactly the rows of the default (``auto``) where torch sees no
    GPU; on a GPU machine the default run is made to see none (``auto`` would pick CUDA)."""
    overrides = {**CASES[algorithm], "num-server-rounds": 2}
    explicit = run_app(
        tmp_path / "cpu", 3, [{"device": "cpu"}] * 3, **overrides, **{"central-device": "cpu"}
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    default = run_app(tmp_path / "default", 3, **overrides)
    assert _rows(explicit) == _rows(default)


def test_the_record_names_every_nodes_device_and_the_servers(tmp_path, no_cuda):
    run = run_app(
        tmp_path, 3, [{"device": "cpu"}] * 3, **{**CASES["fedavg"], "num-server-rounds": 1}
    )
    devices = json.loads((run.out_dir / "config.json").read_text())["devices"]
    cpu = {
        "device": "cpu",
        "gpu": "",
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
    }
    assert devices == {
        "server": cpu,
        "nodes": [{"partition-id": p, **cpu} for p in range(3)],
    }


def test_a_node_with_a_device_it_lacks_fails_and_the_run_goes_on(tmp_path, no_cuda):
    run = run_app(
        tmp_path, 3, [{}, {"device": "cuda"}, {}], **{**CASES["fedavg"], "num-server-rounds": 2}
    )
    # its query.node answer is already an error: it is left out of the roster, sent nothing more
    assert [r["failures"] for r in run.rows[1:]] == [1, 0]
    assert run.rows[-1]["test_accuracy"] > 0.8


def test_a_bad_central_device_stops_before_training(tmp_path):
    with pytest.raises(InvalidRunConfig, match="central-device='gpu'"):
        run_app(tmp_path, 2, **{**CASES["fedavg"], "central-device": "gpu"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_a_cuda_node_gives_the_cpu_numbers_within_float_tolerance(tmp_path, algorithm):
    overrides = {**CASES[algorithm], "num-server-rounds": 2}
    cpu = run_app(tmp_path / "cpu", 3, [{"device": "cpu"}] * 3, **overrides)
    cuda = run_app(tmp_path / "cuda", 3, [{"device": "cuda"}] * 3, **overrides)
    for a, b in zip(cpu.rows[1:], cuda.rows[1:]):
        assert b["failures"] == 0
        loss = LOSS.get(algorithm, "test_loss")
        assert b[loss] == pytest.approx(a[loss], rel=1e-3, abs=1e-4)


def test_float32_on_a_gpu_is_not_tf32():
    assert not torch.backends.cudnn.allow_tf32
    assert not torch.backends.cuda.matmul.allow_tf32
