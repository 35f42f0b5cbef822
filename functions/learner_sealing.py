"""Sealing a reply's learners under the run's group key, and opening them, for FFGB's encrypted
relay (``relay-encryption``): the server stores and forwards ciphertext only.

A node's K learners of a round travel as one box (``functions.sealed_learners``): their delta
(``functions.ensembles``, weights 1) serialised with Flower's protobuf (as checkpoints are
written; nothing is pickled), deflated (ciphertext does not compress, and Flower's wire deflates
what it carries: this keeps a box near the plain reply's bytes) and encrypted with AES-256-GCM
under the group key, bound to the run's inputs and outputs (``functions.secagg_crypto.box``).
The server chooses nothing in what a node compresses, so the compressed length tells it no more
than the learners' count and sizes. The reply's header (its version, scale, weights and counts)
stays in the clear: the server needs it to keep the ensemble, and it holds only the schedule's
step sizes. A receiver opens every box and decodes its learners under the run's limits
(inflating no more than they allow), as the server decodes a plain reply, and the caller checks
their architecture.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import replace

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from google.protobuf.message import DecodeError as ProtoDecodeError

from functions.ensembles import Delta, pack_delta, unpack_delta
from functions.errors import DecodeError
from functions.learners import Learner
from functions.limits import Limits
from functions.params import arrays_to_record, record_to_arrays
from functions.sealed_learners import SealedLearner, SealedSpec, spans
from functions.secagg_crypto import box, unbox

LEVEL = 6  # zlib's default


def _inflate(data: bytes, limit: int) -> bytes:
    """``data`` inflated, refused beyond ``limit`` bytes or when it does not end."""
    inflater = zlib.decompressobj()
    payload = inflater.decompress(data, limit)
    if inflater.unconsumed_tail or not inflater.eof:
        raise DecodeError(f"a sealed box that inflates beyond {limit} bytes or does not end")
    return payload


def _context(n_features: int, n_outputs: int) -> bytes:
    return f"ffgb learners {n_features} -> {n_outputs}".encode()


def seal_learners(delta: Delta, key: bytes) -> Delta:
    """``delta`` with its learners replaced by one box under ``key`` (on the first of them)."""
    if not delta.learners:
        return delta
    n_features, n_outputs = delta.n_features, delta.n_outputs
    inner = Delta(0, 1.0, delta.learners, (1.0,) * len(delta.learners), n_features, n_outputs)
    config, arrays = pack_delta(inner)
    records = RecordDict({"config": ConfigRecord(config), "arrays": arrays_to_record(arrays)})
    payload = zlib.compress(recorddict_to_proto(records).SerializeToString(), LEVEL)
    spec = SealedSpec(n_features, n_outputs)
    sealed = box(key, payload, _context(n_features, n_outputs))
    rest = (SealedLearner(b"", spec),) * (len(delta.learners) - 1)
    return replace(delta, learners=(SealedLearner(sealed, spec), *rest))


def open_learners(
    delta: Delta, key: bytes, limits: Limits, check: Callable[[Learner], None]
) -> Delta:
    """``delta`` with every box opened under ``key``, its learners decoded within ``limits``
    and each passed to ``check`` (the run's architecture); ``DecodeError`` if a learner is not
    sealed or a box does not open, is malformed or holds another number of learners than it
    stands for."""
    if not all(isinstance(h, SealedLearner) for h in delta.learners):
        raise DecodeError("the delta's learners are not sealed (relay-encryption)")
    opened: list[Learner] = []
    context = _context(delta.n_features, delta.n_outputs)
    for k, (sealed, count) in enumerate(spans(delta.learners)):
        try:
            data = unbox(key, sealed, context)
        except DecodeError:
            raise DecodeError(
                f"sealed box {k} does not open with the group key this node holds"
            ) from None
        try:
            payload = _inflate(data, limits.sealed_bytes(count))
            records = recorddict_from_proto(ProtoRecordDict.FromString(payload))
        except (ProtoDecodeError, ValueError, TypeError, zlib.error) as err:
            raise DecodeError(f"sealed box {k} is malformed: {err}") from None
        config, arrays = records.get("config"), records.get("arrays")
        if (
            set(records) != {"config", "arrays"}
            or not isinstance(config, ConfigRecord)
            or not isinstance(arrays, ArrayRecord)
        ):
            raise DecodeError(f"sealed box {k} must hold one config and one array record")
        inner = unpack_delta(
            dict(config), record_to_arrays(arrays, limits.delta_bytes(count)), limits
        )
        if (
            inner.full
            or inner.own_count
            or inner.since != 0
            or inner.scale != 1.0
            or inner.weights != (1.0,) * count
            or (inner.n_features, inner.n_outputs) != (delta.n_features, delta.n_outputs)
        ):
            raise DecodeError(
                f"sealed box {k} holds another delta than {count} learners of its own"
            )
        for learner in inner.learners:
            if isinstance(learner, SealedLearner):
                raise DecodeError(f"sealed box {k} holds another sealed learner")
            check(learner)
        opened += inner.learners
    return replace(delta, learners=tuple(opened))
