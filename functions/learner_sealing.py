"""Sealing a delta's learners under the run's group key, and opening them, for FFGB's encrypted
relay (``relay-encryption``): the server stores and forwards ciphertext only.

Each learner travels as its own lone delta (``functions.ensembles.lone_learner``), serialised with
Flower's protobuf (as checkpoints are written; nothing is pickled) and encrypted with Fernet under
the group key (``functions.secagg_crypto.seal``). The delta's header (its version, scale, weights
and counts) stays in the clear: the server needs it to keep the ensemble, and it holds only the
schedule's step sizes. A receiver opens every sealed learner and decodes it under the run's
limits, as the server decodes a plain reply, and the caller checks its architecture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from google.protobuf.message import DecodeError as ProtoDecodeError

from functions.ensembles import Delta, lone_learner, pack_delta, read_lone_learner, unpack_delta
from functions.errors import DecodeError
from functions.learners import Learner
from functions.limits import Limits
from functions.params import arrays_to_record, record_to_arrays
from functions.sealed_learners import SealedLearner, SealedSpec
from functions.secagg_crypto import seal, unseal


def seal_learners(delta: Delta, key: bytes) -> Delta:
    """``delta`` with each learner replaced by its ciphertext under ``key``."""
    spec = SealedSpec(delta.n_features, delta.n_outputs)
    sealed = tuple(SealedLearner(seal(key, _payload(h, delta)), spec) for h in delta.learners)
    return replace(delta, learners=sealed)


def _payload(learner: Learner, delta: Delta) -> bytes:
    config, arrays = pack_delta(lone_learner(learner, delta.n_features, delta.n_outputs))
    records = RecordDict({"config": ConfigRecord(config), "arrays": arrays_to_record(arrays)})
    return recorddict_to_proto(records).SerializeToString()


def open_learners(
    delta: Delta, key: bytes, limits: Limits, check: Callable[[Learner], None]
) -> Delta:
    """``delta`` with every learner opened under ``key``, decoded within ``limits`` and passed
    to ``check`` (the run's architecture); ``DecodeError`` if one is not sealed, does not open
    or is malformed."""
    opened = []
    for k, learner in enumerate(delta.learners):
        if not isinstance(learner, SealedLearner):
            raise DecodeError(f"learner {k} of the delta is not sealed (relay-encryption)")
        try:
            payload = unseal(key, learner.box)
            records = recorddict_from_proto(ProtoRecordDict.FromString(payload))
        except (DecodeError, ProtoDecodeError, ValueError, TypeError):
            raise DecodeError(
                f"sealed learner {k} does not open with the group key this node holds"
            ) from None
        config, arrays = records.get("config"), records.get("arrays")
        if (
            set(records) != {"config", "arrays"}
            or not isinstance(config, ConfigRecord)
            or not isinstance(arrays, ArrayRecord)
        ):
            raise DecodeError(f"sealed learner {k} must hold one config and one array record")
        inner = unpack_delta(dict(config), record_to_arrays(arrays, limits.delta_bytes(1)), limits)
        if (inner.n_features, inner.n_outputs) != (delta.n_features, delta.n_outputs):
            raise DecodeError(f"sealed learner {k} maps other inputs or outputs than its delta")
        found = read_lone_learner(inner)
        if isinstance(found, SealedLearner):
            raise DecodeError(f"sealed learner {k} holds another sealed learner")
        check(found)
        opened.append(found)
    return replace(delta, learners=tuple(opened))
