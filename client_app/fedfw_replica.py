"""A FedFW node's x-bar under the compact downlink (``fedfw.downlink``): the node replicates the
server's mirror of every x_i from the rounds' accepted points, applied with the server's own code
(``oracles.fedfw_mirror``) in the server's order, so its x-bar is bit-identical; it then uses
x-bar rounded to float32, exactly what a dense message would have carried.

First contact: x-bar^1 (every x_i starts there), the roster's D_i and the rounds so far. A node
that lost its replica or holds the wrong version fails once (``LostStateError``); the server then
sends the whole mirror. With full participation the node holds x-bar alone instead
(``client_app.fedfw_mean``, chosen by the header's ``MEAN``).
"""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord

from client_app.fedfw_mean import META as MEAN_META
from client_app.fedfw_mean import Job, mean_xbar
from client_app.node_state import LostStateError
from functions.errors import DecodeError
from functions.extreme_points import decode_model_point
from functions.fedfw_downlink import MEAN, replica_header, unpack_replica, unpack_updates
from functions.params import (
    ParamLayout,
    Params,
    arrays_to_record,
    record_to_arrays,
    record_to_params,
)
from functions.protocol import REPLICA, REPLICA_ARRAYS, UPDATE_ARRAYS, UPDATES, XBAR
from oracles.fedfw_mirror import ConsensusMirror
from oracles.lmo import make_constraint
from run_config.fedfw import FedFWSettings
from tasks.errors import ConfigError

STATE, META = "fedfw-replica.state", "fedfw-replica.meta"  # every x_i and sum; header (not under
# "fedfw.", which PendingStore owns)


def _stored(job: Job, layout: ParamLayout) -> tuple[ConsensusMirror, dict]:
    """The replica in the node's state: per tensor k, every x_i stacked (``x.{k}``, shape
    (N, *shape_k)) and the sum (``sum.{k}``), so a message reads and writes 2 arrays a tensor,
    not 2 per node (at N = 1,000 the per-node arrays were most of a node's time)."""
    if META not in job.state:
        raise LostStateError("no FedFW replica or x-bar on this node; the server will re-send it")
    meta = dict(job.state[META])
    arrays = {k: v.numpy() for k, v in job.state[STATE].items()}
    stacks = [arrays[f"x.{k}"] for k in range(len(layout.shapes))]
    points = {i: [stack[i] for stack in stacks] for i in range(len(meta["kinds"]))}
    total = [arrays[f"sum.{k}"] for k in range(len(layout.shapes))]
    return ConsensusMirror.restore(points, total), meta


def _received(job: Job, layout: ParamLayout) -> tuple[ConsensusMirror, dict]:
    """The mirror the message starts (x-bar^1 on first contact, else the whole mirror)."""
    config = dict(job.content[REPLICA])
    version, kinds, radii = replica_header(config)
    meta = {"version": version, "kinds": list(kinds), "radii": list(radii)}
    if REPLICA_ARRAYS not in job.content:  # first contact: every x_i is x-bar^1
        if version != 0:
            raise DecodeError("a FedFW replica after round 0 must carry the mirror")
        start = record_to_params(job.content[XBAR], layout)
        return ConsensusMirror(start, list(range(len(kinds)))), meta
    replica = unpack_replica(config, record_to_arrays(job.content[REPLICA_ARRAYS]), layout.shapes)
    return ConsensusMirror.restore(dict(enumerate(replica.points)), replica.total), meta


def _store(job: Job, mirror: ConsensusMirror, meta: dict) -> None:
    points, total = mirror.state()
    order = sorted(points)  # roster positions 0 .. N-1
    arrays = {f"x.{k}": np.stack([points[i][k] for i in order]) for k in range(len(total))}
    arrays |= {f"sum.{k}": a for k, a in enumerate(total)}
    job.state[STATE] = arrays_to_record(arrays)
    job.state[META] = ConfigRecord(meta)


def _apply_updates(
    job: Job,
    layout: ParamLayout,
    fw: FedFWSettings,
    mirror: ConsensusMirror,
    meta: dict,
    through: int,
) -> None:
    """Apply the rounds the message carries (up to ``through`` when its header is left out),
    with eta_t from the run's schedule (the server's)."""
    kinds, radii, scope = meta["kinds"], meta["radii"], fw.scope
    since, updates = unpack_updates(
        dict(job.content[UPDATES]),
        record_to_arrays(job.content[UPDATE_ARRAYS]),
        len(kinds),
        fw.schedule.eta,
        through,
    )
    if since != meta["version"]:
        raise LostStateError(
            f"the updates follow round {since}; this node's replica is at round {meta['version']}"
        )
    try:
        sets = [make_constraint(kind, radius) for kind, radius in zip(kinds, radii)]
    except ConfigError as err:
        raise DecodeError(f"a D_i of the replica is invalid: {err}") from None
    for update in updates:
        points = {
            i: decode_model_point(sets[i], arrays, layout.shapes, scope)
            for i, arrays in update.points
        }
        mirror.apply(points, update.eta)
        meta["version"] = update.round


def compact_xbar(
    job: Job, layout: ParamLayout, fw: FedFWSettings, through: int
) -> tuple[Params, int] | None:
    """x-bar from the node's replica (updated by this message, which brings it to round
    ``through``), float32-rounded, and the roster's size N; None when the message carries the
    dense x-bar only (``fedfw.downlink`` dense)."""
    if (
        MEAN in job.content[REPLICA]
        if REPLICA in job.content
        else UPDATES in job.content and MEAN_META in job.state
    ):
        return mean_xbar(job, layout, fw, through)
    if REPLICA in job.content:
        mirror, meta = _received(job, layout)
    elif UPDATES in job.content:
        mirror, meta = _stored(job, layout)
    else:
        return None
    if UPDATES in job.content:  # first contact: x-bar^1 and every round since
        _apply_updates(job, layout, fw, mirror, meta, through)
    _store(job, mirror, meta)
    return [np.asarray(a, np.float32).astype(np.float64) for a in mirror.x_bar], len(meta["kinds"])
