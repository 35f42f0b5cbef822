"""Per-node state of a stateful client half, committed only once the server accepted the step.

FedFW, FedDR (and later families) keep records on the node between rounds. A step is stored as
*pending*; the next message's ``last-accepted`` says whether the server used it. If it did, the
pending records become the committed ones; if not, the node behaves as a non-participant of that
round, exactly as the server's copy does. ``sync`` lets the server restore a node that has no
state (first contact, restarted SuperNode). The records are any content (parameter lists,
prediction caches, ensemble versions): each family turns its variables into records.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from functions.acceptance import sync_value
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from functions.protocol import CONFIG, SYNC_FROM_XBAR, SYNC_NONE

Record = ArrayRecord | ConfigRecord


class LostStateError(RuntimeError):
    """The node has no state (e.g. its SuperNode restarted); the server will resend it."""


class PendingStore:
    """Committed and pending records under ``prefix`` in a node's Context.state.

    Keys: ``<prefix>.<field>`` (committed), ``<prefix>.pending.<field>`` and ``<prefix>.meta``
    (the pending round and which fields each side holds).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._meta = f"{prefix}.meta"

    def _key(self, field: str, pending: bool) -> str:
        return f"{self.prefix}.pending.{field}" if pending else f"{self.prefix}.{field}"

    def resolve(self, state: RecordDict, last_accepted: int) -> dict[str, Record] | None:
        """The committed records after committing the pending step if the server accepted it;
        None when the node holds no state."""
        meta = state.get(self._meta)
        if meta is None:
            return None
        pending = meta["pending-round"] == last_accepted
        fields = meta["pending-fields" if pending else "fields"]
        return {field: state[self._key(field, pending)] for field in fields}

    def stage(
        self,
        state: RecordDict,
        committed: Mapping[str, Record],
        pending: Mapping[str, Record],
        server_round: int,
    ) -> None:
        """Store the committed records and this round's step, pending acceptance."""
        for key in [k for k in state if k.startswith(self.prefix + ".")]:
            del state[key]
        for is_pending, records in ((False, committed), (True, pending)):
            for field, record in records.items():
                state[self._key(field, is_pending)] = record
        state[self._meta] = ConfigRecord(
            {
                "pending-round": server_round,
                "fields": list(committed),
                "pending-fields": list(pending),
            }
        )


def params_records(
    layout: ParamLayout, variables: Mapping[str, Params | None]
) -> dict[str, ArrayRecord]:
    """Parameter lists as float64 records (exact on the node); None values are left out."""
    return {
        name: params_to_record(layout, value, dtype=np.float64)
        for name, value in variables.items()
        if value is not None
    }


def records_params(layout: ParamLayout, records: Mapping[str, Record]) -> dict[str, Params]:
    """Inverse of ``params_records``."""
    return {name: record_to_params(record, layout) for name, record in records.items()}


def held_change(layout: ParamLayout, before: Params, after: Params) -> ArrayRecord:
    """The change of a vector the node holds (float64), which it sends into a secure sum."""
    return params_to_record(layout, [a - b for a, b in zip(after, before)], dtype=np.float64)


def restart_point(content: RecordDict, layout: ParamLayout, xbar: Params, point_key: str) -> Params:
    """Where a node without state restarts, as the server's ``sync`` says."""
    sync = sync_value(content[CONFIG])
    if sync == SYNC_NONE:
        raise LostStateError("no state on this node; the server will resend its restart point")
    if sync == SYNC_FROM_XBAR:
        return [np.array(v, dtype=np.float64) for v in xbar]
    return record_to_params(content[point_key], layout)
