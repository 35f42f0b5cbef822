"""FFGB.L's fits kept in a node's state (``client_app.ffgb_l_fits``): the first round fits the K
learners, later rounds replay them; the rows are those of a run that refits every round."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from client_app import ffgb_l_fits
from client_app.ffgb_l_fits import FITS, VALUES, fits_key, kept_fits
from functions.limits import Limits
from functions.networks import NetworkSpec, build
from functions.params import arrays_to_record
from oracles import weak_learning
from oracles.boosting import Fitted
from server_app.results import CLOCKS
from tests.helpers import run_app

SPEC = NetworkSpec((3, 4, 2), "leaky_relu")
SHAPE = (5, 3, 2)  # points, features, outputs
LIMITS = Limits(max_params=SPEC.n_params, max_features=3, max_outputs=2)
STEPS = 2


def _oracle(calls: list) -> Callable[[], Callable]:
    """An oracle whose k-th fit is a fresh network of seed k, with values k + 1."""

    def oracle():
        def fit(target, multiple, previous):
            calls.append(multiple)
            torch.manual_seed(len(calls))
            return Fitted(build(SPEC), np.full((5, 2), float(len(calls))))

        return fit

    return oracle


def _round(state: RecordDict, key: str, calls: list) -> list[Fitted]:
    fit = kept_fits(state, key, STEPS, SHAPE, LIMITS, _oracle(calls))
    return [fit(None, float(k), []) for k in range(1, STEPS + 1)]


def _params(fitted: Fitted) -> list[np.ndarray]:
    return [p.detach().numpy() for p in fitted.learner.parameters()]


def test_a_later_round_replays_the_first_rounds_fits_bit_for_bit():
    state, calls = RecordDict(), []
    first = _round(state, "a", calls)
    assert calls == [1.0, 2.0]
    again = _round(state, "a", calls)
    assert calls == [1.0, 2.0]  # no oracle call
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a.values, b.values)
        assert all(np.array_equal(u, v) for u, v in zip(_params(a), _params(b), strict=True))


def test_another_key_refits_and_keeps_its_own():
    state, calls = RecordDict(), []
    _round(state, "a", calls)
    _round(state, "b", calls)
    assert len(calls) == 4
    assert state[FITS]["key"] == "b"


def test_a_round_cut_short_keeps_nothing():
    state, calls = RecordDict(), []
    fit = kept_fits(state, "a", STEPS, SHAPE, LIMITS, _oracle(calls))
    fit(None, 1.0, [])
    assert FITS not in state


@pytest.mark.parametrize(
    "spoil",
    [
        lambda s: s.__setitem__(VALUES, arrays_to_record({"0": np.full((5, 2), np.nan)})),
        lambda s: s.__setitem__(VALUES, arrays_to_record({"0": np.zeros((5, 2))})),
        lambda s: s.__setitem__(
            VALUES, arrays_to_record({"0": np.zeros((4, 2)), "1": np.zeros((4, 2))})
        ),
        lambda s: s[FITS].__setitem__("count", 3),
        lambda s: s[FITS].__setitem__("n_features", 4),
        lambda s: s.__delitem__(ffgb_l_fits.LEARNERS),
    ],
)
def test_a_kept_state_that_does_not_decode_refits(spoil):
    state, calls = RecordDict(), []
    _round(state, "a", calls)
    spoil(state)
    _round(state, "a", calls)
    assert len(calls) == 4


def test_the_key_names_the_points_and_the_settings():
    x = np.arange(6.0).reshape(3, 2)
    key = fits_key([x], (1, "cpu"))
    assert key == fits_key([x.copy()], (1, "cpu"))
    assert key != fits_key([x + 1e-12], (1, "cpu"))
    assert key != fits_key([x.reshape(2, 3)], (1, "cpu"))
    assert key != fits_key([x], (1, "cuda"))


CASE = {
    "algorithm": "ffgb-l",
    "task": "diabetes",
    "num-server-rounds": 3,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 20,
    "ffgb.hidden": 8,
}


def test_ffgb_l_fits_only_in_its_first_round_and_gives_the_rows_of_refitting(tmp_path, monkeypatch):
    """Through the app (3 nodes, 3 rounds): the oracle runs K times a node, in round 1; the
    rows equal, bit for bit, those of a run whose nodes refit every round."""
    calls = []
    sobolev = weak_learning.fit_sobolev
    monkeypatch.setattr(
        weak_learning, "fit_sobolev", lambda *a, **k: calls.append(1) or sobolev(*a, **k)
    )
    kept = run_app(tmp_path / "kept", 3, **CASE)
    assert len(calls) == 3 * 2
    monkeypatch.setattr(ffgb_l_fits, "_read", lambda *a: None)
    refit = run_app(tmp_path / "refit", 3, **CASE)
    assert len(calls) == 3 * 2 * (1 + 3)
    for a, b in zip(kept.rows, refit.rows, strict=True):
        a, b = ({k: v for k, v in r.items() if k not in CLOCKS} for r in (a, b))
        assert a == b
