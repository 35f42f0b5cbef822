"""A node's local boosting and any booster's outputs, with the ``xgboost`` package (CPU build).

XGBoost only ever loads model bytes that ``functions.boosters`` has checked. One thread, so a
run gives the same trees on every engine and machine (the ``hist`` method has no randomness
without row or column sampling). The package is the project's ``xgboost`` extra
(``xgboost-cpu``), imported on first use: the app runs every other algorithm without it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import xgboost as xgb

THREADS = 1
INSTALL = "pip install 'flower-beyond-averaging[xgboost]' (the xgboost-cpu package)"


def available() -> bool:
    """Whether the ``xgboost`` package can be imported here."""
    return importlib.util.find_spec("xgboost") is not None


def xgboost_module() -> ModuleType:
    """The ``xgboost`` package; ImportError saying how to install it when it is missing."""
    try:
        return importlib.import_module("xgboost")
    except ImportError as err:
        raise ImportError(f"this needs the xgboost package: {INSTALL}") from err


def _loaded(raw: bytes) -> xgb.Booster:
    booster = xgboost_module().Booster(params={"nthread": THREADS})
    booster.load_model(bytearray(raw))
    return booster


def boost(
    raw: bytes, model: Mapping[str, Any], x: np.ndarray, y: np.ndarray, rounds: int, eta: float
) -> xgb.Booster:
    """The booster ``raw`` with ``rounds`` more iterations fitted to (x, y), one tree per output
    each, shrunk by ``eta``; ``model``: the parameters that define the model (objective, classes,
    base score, depth: ``functions.boosters.BoosterSpec.params``)."""
    xgboost = xgboost_module()
    params = {**model, "eta": eta, "tree_method": "hist", "nthread": THREADS, "verbosity": 0}
    data = xgboost.DMatrix(x, label=y, nthread=THREADS)
    return xgboost.train(params, data, num_boost_round=rounds, xgb_model=_loaded(raw))


def last_iterations(booster: xgb.Booster, rounds: int) -> bytes:
    """The JSON of only the last ``rounds`` iterations of ``booster`` (what bagging sends)."""
    end = booster.num_boosted_rounds()
    return bytes(booster[end - rounds : end].save_raw("json"))


def whole(booster: xgb.Booster) -> bytes:
    """The JSON of the whole ``booster`` (what cyclic sends)."""
    return bytes(booster.save_raw("json"))


def outputs(raw: bytes, x: np.ndarray) -> np.ndarray:
    """The booster's raw outputs on ``x``: (n, classes) margins (softmax's logits) or (n, 1)
    values, float64."""
    margins = _loaded(raw).predict(xgboost_module().DMatrix(x, nthread=THREADS), output_margin=True)
    return np.asarray(margins, dtype=np.float64).reshape(len(x), -1)
