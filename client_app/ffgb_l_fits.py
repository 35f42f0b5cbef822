"""FFGB.L's K fits on a node, kept in the node's state from one round to the next.

FFGB.L's local step k fits a multiple of u_i minus the learners before it (Algorithm 4), which
does not depend on f^t (Remark 3.1), and its oracle's seeds do not depend on the round
(``client_app.ffgb``): a node fits the same K learners every round. The first round fits them;
a later round reads them back from the node's state (``Context.state``, which the SuperNode
keeps for the run, in simulation and deployment alike) instead of running K oracles again for
the same networks, bit for bit. The key names everything a fit depends on (the node's points
and targets, the seeds, the oracle's settings, the learner, the device): a data file, key or
device that changed refits, and so does a state that does not decode (it is read with the
decoder a received ensemble goes through)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from functions.ensembles import Delta, pack_delta, unpack_delta
from functions.errors import DecodeError
from functions.limits import Limits
from functions.params import arrays_to_record, record_to_arrays
from oracles.boosting import Fitted, LipschitzFit

FITS, LEARNERS, VALUES = "ffgb-l.fits", "ffgb-l.learners", "ffgb-l.values"


def fits_key(arrays: Iterable[np.ndarray], settings: Iterable[object]) -> str:
    """A digest of the arrays (shape, type and bytes) and the settings' reprs."""
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.shape}{array.dtype.str}".encode())
        digest.update(array.tobytes())
    for setting in settings:
        digest.update(repr(setting).encode())
    return digest.hexdigest()


def kept_fits(
    state: RecordDict,
    key: str,
    steps: int,
    shape: tuple[int, int, int],
    limits: Limits,
    oracle: Callable[[], LipschitzFit],
) -> LipschitzFit:
    """FFGB.L's oracle for one round's ``steps`` fits: the kept ones stored under ``key`` when
    the state holds them (``oracle`` is not called), else ``oracle()``'s, stored once the
    ``steps``-th is made. ``shape``: the node's points, their features and the outputs."""
    kept = _read(state, key, steps, shape, limits)
    if kept is not None:
        calls = iter(kept)
        return lambda target, multiple, previous: next(calls)
    fit, made = oracle(), []

    def fitting(target: np.ndarray, multiple: float, previous: list) -> Fitted:
        made.append(fit(target, multiple, previous))
        if len(made) == steps:
            _write(state, key, made, shape)
        return made[-1]

    return fitting


def _write(state: RecordDict, key: str, fits: list[Fitted], shape: tuple[int, int, int]) -> None:
    _, n_features, n_outputs = shape
    learners, weights = tuple(f.learner for f in fits), (1.0,) * len(fits)
    config, arrays = pack_delta(
        Delta(0, 1.0, learners, weights, n_features, n_outputs, np.zeros(n_outputs))
    )
    state[FITS] = ConfigRecord({"key": key, **config})
    state[LEARNERS] = arrays_to_record(arrays)
    state[VALUES] = arrays_to_record({str(k): f.values for k, f in enumerate(fits)})


def _read(
    state: RecordDict, key: str, steps: int, shape: tuple[int, int, int], limits: Limits
) -> list[Fitted] | None:
    """The kept fits under ``key``, or None (none kept, another key, or a state that does not
    decode as ``steps`` learners of the node's features and outputs, with finite float64
    values at its points)."""
    if FITS not in state or state[FITS].get("key") != key:
        return None
    config = {k: v for k, v in state[FITS].items() if k != "key"}
    try:
        delta = unpack_delta(config, record_to_arrays(state[LEARNERS]), limits)
        values = record_to_arrays(state[VALUES])
    except (DecodeError, KeyError, TypeError):
        return None
    points, n_features, n_outputs = shape
    names = [str(k) for k in range(steps)]
    if (
        len(delta.learners) != steps
        or (delta.n_features, delta.n_outputs) != (n_features, n_outputs)
        or sorted(values) != sorted(names)
    ):
        return None
    if any(
        values[n].dtype != np.float64
        or values[n].shape != (points, n_outputs)
        or not np.isfinite(values[n]).all()
        for n in names
    ):
        return None
    return [Fitted(learner, values[n]) for learner, n in zip(delta.learners, names, strict=True)]
