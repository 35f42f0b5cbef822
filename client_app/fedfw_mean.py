"""A FedFW node's x-bar under the compact downlink with full participation (``MEAN`` in the
header): the node holds x-bar (float64) and the roster's D_i, and advances x-bar by each round's
points with the server's own code (``sum_round``, then ``mean_step``), so its x-bar is the
server's bit for bit. Its state does not grow with N: x-bar, and the D_i as their distinct sets
(one index a node only when they differ). It uses x-bar rounded to float32, exactly what a dense
message would have carried.

A node that lost its state, holds another version, or is sent a round it cannot follow (not every
node's point) fails once; the server then re-sends x-bar.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord

from client_app.job import ClientJob
from client_app.node_state import LostStateError
from functions.errors import DecodeError
from functions.fedfw_downlink import (
    RosterSets,
    replica_header,
    sum_round,
    unpack_mean,
    unpack_rounds,
)
from functions.params import (
    ParamLayout,
    Params,
    arrays_to_record,
    record_to_arrays,
    record_to_params,
)
from functions.protocol import REPLICA, REPLICA_ARRAYS, UPDATE_ARRAYS, UPDATES, XBAR
from oracles.fedfw_mirror import mean_step
from oracles.lmo import Constraint, make_constraint
from run_config.fedfw import FedFWSettings
from tasks.errors import ConfigError

Job = ClientJob[FedFWSettings, Constraint]  # what FedFW's procedures receive (all three modules)

STATE, META = "fedfw-mean.state", "fedfw-mean.meta"  # x-bar (and set indices); header


@dataclass
class MeanState:
    """What the node keeps: the round x-bar is at, x-bar, and D_i by roster position."""

    version: int
    xbar: Params
    sets: RosterSets


def _constraints(kinds: list[str], radii: list[float]) -> list[Constraint]:
    try:
        return [make_constraint(kind, radius) for kind, radius in zip(kinds, radii)]
    except ConfigError as err:
        raise DecodeError(f"a D_i of the roster is invalid: {err}") from None


def _received(job: Job, layout: ParamLayout) -> MeanState:
    """x-bar the message starts: x-bar^1 (dense, float32-exact) at round 0, else float64."""
    version, kinds, radii = replica_header(dict(job.content[REPLICA]))
    if REPLICA_ARRAYS in job.content:
        xbar = unpack_mean(record_to_arrays(job.content[REPLICA_ARRAYS]), layout.shapes)
    elif version == 0:
        xbar = record_to_params(job.content[XBAR], layout)
    else:
        raise DecodeError("a FedFW x-bar re-sync after round 0 must carry x-bar in float64")
    return MeanState(version, xbar, RosterSets.of(_constraints(list(kinds), list(radii))))


def _stored(job: Job) -> MeanState:
    if META not in job.state:
        raise LostStateError("no FedFW x-bar on this node; the server will re-send it")
    meta = dict(job.state[META])
    arrays = {k: v.numpy() for k, v in job.state[STATE].items()}
    distinct = tuple(_constraints(meta["kinds"], meta["radii"]))
    members = arrays.pop("members", None)
    xbar = [arrays[f"xbar.{k}"] for k in range(len(arrays))]
    return MeanState(meta["version"], xbar, RosterSets(distinct, members, meta["nodes"]))


def _store(job: Job, state: MeanState) -> None:
    """x-bar, and the D_i as their distinct sets with one index a node only when they differ."""
    sets = state.sets
    arrays = {f"xbar.{k}": np.asarray(a, np.float64) for k, a in enumerate(state.xbar)}
    if sets.members is not None:
        arrays["members"] = sets.members
    job.state[STATE] = arrays_to_record(arrays)
    job.state[META] = ConfigRecord(
        {
            "version": state.version,
            "nodes": sets.size,
            "kinds": [c.kind for c in sets.distinct],
            "radii": [float(c.radius) for c in sets.distinct],
        }
    )


def _follow(
    job: Job, layout: ParamLayout, fw: FedFWSettings, state: MeanState, through: int
) -> None:
    """Advance x-bar by the rounds the message carries (up to ``through`` when its header is
    left out), eta_t from the run's schedule."""
    count = state.sets.size
    since, updates = unpack_rounds(
        dict(job.content[UPDATES]),
        record_to_arrays(job.content[UPDATE_ARRAYS]),
        count,
        fw.schedule.eta,
        through,
    )
    if since != state.version:
        raise LostStateError(
            f"the updates follow round {since}; this node's x-bar is at round {state.version}"
        )
    for update in updates:
        total = sum_round(state.sets, update, layout.shapes, fw.scope)
        state.xbar = mean_step(state.xbar, total, count, update.eta)
        state.version = update.round


def mean_xbar(job: Job, layout: ParamLayout, fw: FedFWSettings, through: int) -> tuple[Params, int]:
    """x-bar after this message's rounds, float32-rounded (the node keeps the float64 one), and
    the roster's size N."""
    state = _received(job, layout) if REPLICA in job.content else _stored(job)
    if UPDATES in job.content:
        _follow(job, layout, fw, state, through)
    _store(job, state)
    return [np.asarray(a, np.float32).astype(np.float64) for a in state.xbar], state.sets.size
