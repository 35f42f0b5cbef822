"""Weak learners the server holds only as ciphertext (FFGB with ``relay-encryption``).

A node seals the learners of one reply together, as one box under the run's group key, which
only the nodes hold (``functions.learner_sealing``): the box stands for the first of them, and
each of the others is an empty box that continues it. To the server they are learners of their
own kind and spec: the ensemble counts, weights, rescales, leaves out a node's own learners (one
reply's, a whole box) and checkpoints them as any, and cuts them only where an update starts,
which never splits a box; it cannot evaluate them. A node opens each box it receives and
validates what it finds.

Wire form of a group of ``count`` sealed learners (config ``kind`` = ``sealed``): arrays
``boxes`` (uint8, the ciphertexts back to back) and ``lengths`` (int64, one per learner, 0 for a
learner that continues the box before it; the first is not 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    """One learner of a sealed reply: the box of the reply's learners (``box``, on the first
    of them), or b"" on each of the others; ``spec`` says what it maps, as a plain learner's."""

    box: bytes
    spec: SealedSpec


def spans(learners: Sequence[SealedLearner]) -> list[tuple[bytes, int]]:
    """Each box of a run of sealed learners and how many learners it stands for;
    ``DecodeError`` if the run starts inside a box."""
    found: list[tuple[bytes, int]] = []
    for learner in learners:
        if learner.box:
            found.append((learner.box, 1))
        elif not found:
            raise DecodeError("sealed learners that start inside a box")
        else:
            found[-1] = (found[-1][0], found[-1][1] + 1)
    return found


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
    arrays: Mapping[str, object], count: int, spec: SealedSpec, max_box: Callable[[int], int]
) -> list[SealedLearner]:
    """``count`` sealed learners of ``spec`` from their arrays (prefix stripped), each box no
    longer than ``max_box`` of the learners it stands for; ``DecodeError`` on any fault."""
    if set(arrays) != set(SEALED_FIELDS):
        raise DecodeError(f"sealed: expected arrays {list(SEALED_FIELDS)}, got {sorted(arrays)}")
    boxes, lengths = arrays["boxes"], arrays["lengths"]
    if not (
        isinstance(lengths, np.ndarray) and lengths.dtype == np.int64 and lengths.shape == (count,)
    ):
        raise DecodeError(f"sealed lengths: expected int64 of shape ({count},)")
    if np.any(lengths < 0) or (count and lengths[0] == 0):
        raise DecodeError("sealed lengths: each at least 0, the first above 0")
    total = int(lengths.sum()) if np.all(lengths <= 1 << 40) else -1
    if not (isinstance(boxes, np.ndarray) and boxes.dtype == np.uint8 and boxes.shape == (total,)):
        raise DecodeError(f"sealed boxes: expected uint8 of shape ({total},)")
    data, starts = boxes.tobytes(), np.cumsum(lengths) - lengths
    learners = [
        SealedLearner(data[a : a + n], spec) for a, n in zip(starts.tolist(), lengths.tolist())
    ]
    for box, size in spans(learners):
        if len(box) > max_box(size):
            raise DecodeError(f"a sealed box of {size} learners over {max_box(size)} bytes")
    return learners
