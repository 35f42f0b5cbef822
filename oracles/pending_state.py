"""Per-node state of a stateful client procedure, committed only once the server accepted it.

FedFW, FedDR (and later families) keep variables on the node between rounds. A step is
stored as *pending*; the next message's ``last-accepted`` says whether the server used it.
If it did, the pending variables become the committed ones; if not, the node behaves as a
non-participant of that round, exactly as the server's copy does. ``sync`` lets the server
restore a node that has no state (first contact, restarted SuperNode).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from functions.params import ParamLayout, Params, params_to_record, record_to_params

SYNC_NONE = "none"
SYNC_FROM_XBAR = "xbar"

Variables = dict[str, Params | None]


class LostStateError(RuntimeError):
    """The node has no state (e.g. its SuperNode restarted); the server will resend it."""


class PendingStore:
    """Committed and pending variables (``fields``) under ``prefix`` in a node's Context.state."""

    def __init__(self, prefix: str, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self._committed = {f: f"{prefix}.{f}" for f in fields}
        self._pending = {f: f"{prefix}.pending.{f}" for f in fields}
        self._meta = f"{prefix}.meta"

    def _read(self, state: RecordDict, keys: Mapping[str, str], layout: ParamLayout
              ) -> Variables | None:
        if keys[self.fields[0]] not in state:
            return None
        return {f: record_to_params(state[k], layout) if k in state else None
                for f, k in keys.items()}

    def _write(self, state: RecordDict, keys: Mapping[str, str], layout: ParamLayout,
               variables: Mapping[str, Params | None]) -> None:
        for field, key in keys.items():
            value = variables.get(field)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = params_to_record(layout, value, dtype=np.float64)

    def resolve(self, state: RecordDict, layout: ParamLayout, last_accepted: int
                ) -> Variables | None:
        """The committed variables after committing the pending step if it was accepted."""
        committed = self._read(state, self._committed, layout)
        pending = self._read(state, self._pending, layout)
        meta = state.get(self._meta, ConfigRecord({"pending-round": -1}))
        if pending is not None and meta["pending-round"] == last_accepted:
            return pending
        return committed

    def stage(self, state: RecordDict, layout: ParamLayout, committed: Mapping[str, Params | None],
              pending: Mapping[str, Params | None], server_round: int) -> None:
        """Store the committed variables and this round's step, pending acceptance."""
        self._write(state, self._committed, layout, committed)
        self._write(state, self._pending, layout, pending)
        state[self._meta] = ConfigRecord({"pending-round": server_round})


def restart_point(content: RecordDict, layout: ParamLayout, xbar: Params, point_key: str) -> Params:
    """Where a node without state restarts, as the server's ``sync`` says."""
    sync = content["config"]["sync"]
    if sync == SYNC_NONE:
        raise LostStateError("no state on this node; the server will resend its restart point")
    if sync == SYNC_FROM_XBAR:
        return [np.array(v, dtype=np.float64) for v in xbar]
    return record_to_params(content[point_key], layout)
