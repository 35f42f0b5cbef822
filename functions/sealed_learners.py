"""A weak learner the server holds only as ciphertext (FFGB with ``relay-encryption``).

A sealed learner is one learner's wire form (a lone delta, ``functions.ensembles``) encrypted
under the run's group key, which only the nodes hold (``functions.learner_sealing``). To the
server it is a learner kind like the others, of its own spec: the ensemble counts, weights,
rescales, leaves out a node's own learners and checkpoints it as any, but cannot evaluate it.
A node opens each sealed learner it receives and validates what it finds.

Wire form of a group of ``count`` sealed learners (config ``kind`` = ``sealed``): arrays
``boxes`` (uint8, the ciphertexts back to back) and ``lengths`` (int64, one per learner).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from functions.errors import DecodeError

SEALED_KIND = "sealed"
SEALED_FIELDS = ("boxes", "lengths")


@dataclass(frozen=True)
class SealedSpec:
    """The spec of every sealed learner of a run: its inputs and outputs, nothing of its form."""

    n_features: int
    n_outputs: int
    kind: str = SEALED_KIND


@dataclass(frozen=True, eq=False)
class SealedLearner:
    """One learner's ciphertext (``box``); ``spec`` says what it maps, as a plain learner's."""

    box: bytes
    spec: SealedSpec


def pack_sealed(group: Sequence[SealedLearner], prefix: str) -> dict[str, np.ndarray]:
    """The arrays of a run of sealed learners."""
    return {
        prefix + "boxes": np.frombuffer(b"".join(h.box for h in group), dtype=np.uint8).copy(),
        prefix + "lengths": np.array([len(h.box) for h in group], dtype=np.int64),
    }


def join_packed_sealed(
    packs: Sequence[Mapping[str, np.ndarray]], prefix: str
) -> dict[str, np.ndarray]:
    """``pack_sealed`` of a run, from each sealed learner's own pack."""
    return {prefix + name: np.concatenate([pack[name] for pack in packs]) for name in packs[0]}


def unpack_sealed(
    arrays: Mapping[str, object], count: int, spec: SealedSpec, max_box: int
) -> list[SealedLearner]:
    """``count`` sealed learners of ``spec`` from their arrays (prefix stripped), each
    ciphertext of 1 to ``max_box`` bytes; ``DecodeError`` on any fault."""
    if set(arrays) != set(SEALED_FIELDS):
        raise DecodeError(f"sealed: expected arrays {list(SEALED_FIELDS)}, got {sorted(arrays)}")
    boxes, lengths = arrays["boxes"], arrays["lengths"]
    if not (
        isinstance(lengths, np.ndarray) and lengths.dtype == np.int64 and lengths.shape == (count,)
    ):
        raise DecodeError(f"sealed lengths: expected int64 of shape ({count},)")
    if np.any(lengths < 1) or np.any(lengths > max_box):
        raise DecodeError(f"sealed lengths: each in [1, {max_box}]")
    total = int(lengths.sum())
    if not (isinstance(boxes, np.ndarray) and boxes.dtype == np.uint8 and boxes.shape == (total,)):
        raise DecodeError(f"sealed boxes: expected uint8 of shape ({total},)")
    data, ends = boxes.tobytes(), np.cumsum(lengths)
    starts = ends - lengths
    return [SealedLearner(data[a:b], spec) for a, b in zip(starts.tolist(), ends.tolist())]
