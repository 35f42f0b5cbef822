"""Which torch device a node (or the server's central evaluation) computes on, and its data there.

Values: ``auto`` (CUDA when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. What
travels is always CPU numpy, so codecs and the wire do not depend on the device. A node's data
arrays move to an accelerator once and stay there (``on_device`` caches one copy per array and
device for as long as the array lives); on the CPU, tensors share the arrays' memory as before.

float32 means float32 on a GPU too: cuDNN's default TF32 convolutions (10-bit mantissas on
Ampere and later) put a CNN learner's values 7e-4 from the CPU's (seen on an H100 by
tests/ffgb/test_ensemble_batched.py), beyond the float tolerance the algorithms' numbers are held
to, so importing this module turns TF32 off for convolutions as torch already has it for matmuls.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable

import numpy as np
import torch

from tasks.errors import ConfigError

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False

AUTO = "auto"
NODE_KEY = "device"  # node config key
DEVICE_FACTS = ("device", "gpu", "torch", "cuda")  # what ``device_facts`` reports
_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_COPIES: dict[tuple[int, str, str], torch.Tensor] = {}


def check_device_name(value: object, key: str = NODE_KEY) -> str:
    """``value`` normalised; ConfigError naming ``key`` unless it is a device name (whether this
    machine has that device is ``resolve_device``'s question, asked where it computes)."""
    text = str(value).strip().lower()
    if not _PATTERN.match(text):
        raise ConfigError(f"{key}={value!r}: expected 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return text


def resolve_device(value: object, key: str = NODE_KEY) -> torch.device:
    """The torch device for ``value``; ConfigError naming ``key`` if it is not a known device or
    names a CUDA device this machine does not have."""
    text = check_device_name(value, key)
    if text == AUTO:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = device.index or 0
        if index >= count:
            raise ConfigError(
                f"{key}={value!r}: this machine has {count} CUDA device(s) "
                "visible to torch (use 'auto' or 'cpu')"
            )
    return device


def device_facts(device: torch.device) -> dict[str, str]:
    """What a run's record says of a device: its name, the GPU's model, the torch and CUDA
    versions (``cuda`` is "none" for a CPU-only torch)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    values = (str(device), gpu, torch.__version__, torch.version.cuda or "none")
    return dict(zip(DEVICE_FACTS, values, strict=True))


def _writable(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy where it is read-only (torch warns on a tensor sharing it)."""
    return array if array.flags.writeable else array.copy()


def on_device(
    array: np.ndarray,
    device: torch.device,
    make: Callable[[np.ndarray], torch.Tensor] = torch.as_tensor,
) -> torch.Tensor:
    """``make(array)`` (a CPU tensor; default: sharing the array's memory) on ``device``. On an
    accelerator the copy is made once per array, device and ``make`` and cached while the array
    lives; on the CPU nothing is cached (``make`` is as cheap as it was before devices)."""
    if device.type == "cpu":
        return make(_writable(array))
    key = (id(array), str(device), getattr(make, "__qualname__", repr(make)))
    copy = _COPIES.get(key)
    if copy is None:
        copy = make(_writable(array)).to(device)
        _COPIES[key] = copy
        weakref.finalize(array, _COPIES.pop, key, None)
    return copy
