"""Client procedures of FedFW, FedFW+ and FedFW-sto (Algorithm 1 of the FedFW paper).

The node keeps x_i (and y_i, d_i) in its Context.state. A step stays *pending* until the
server confirms, in the next message's ``last-accepted``, that it accepted the point;
otherwise the node behaves as a non-participant (x_i unchanged), exactly as the server's
mirror does. ``sync`` lets the server restore x_i after a lost state or a first contact.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from functions.extreme_points import decode_model_point, encode_model_point
from functions.params import ParamLayout, Params, arrays_to_record, params_to_record, record_to_params
from oracles.fedavg_client import evaluation_sums
from oracles.fedfw_settings import fedfw_settings, node_constraint
from oracles.frank_wolfe import FWClientState, apply_step, fedfw_client_step
from oracles.job import ClientJob
from oracles.torch_grad import load_params, loss_and_grad
from oracles.torch_models import new_model

SYNC_NONE, SYNC_FROM_XBAR, SYNC_FROM_XI = "none", "xbar", "xi"
_STATE = {"x": "fedfw.x", "y": "fedfw.y", "d": "fedfw.d"}
_PENDING = {"x": "fedfw.pending.x", "y": "fedfw.pending.y", "d": "fedfw.pending.d"}
_META = "fedfw.meta"


class LostStateError(RuntimeError):
    """The node has no x_i (e.g. its SuperNode restarted); the server will resend it."""


def _save(job: ClientJob, keys: dict[str, str], layout: ParamLayout, state: FWClientState) -> None:
    for field, key in keys.items():
        value = getattr(state, field)
        if value is None:
            job.state.pop(key, None)
        else:
            job.state[key] = params_to_record(layout, value, dtype=np.float64)


def _load(job: ClientJob, keys: dict[str, str], layout: ParamLayout) -> FWClientState | None:
    if keys["x"] not in job.state:
        return None
    loaded = {f: record_to_params(job.state[k], layout) if k in job.state else None
              for f, k in keys.items()}
    return FWClientState(**loaded)


def _current_state(job: ClientJob, layout: ParamLayout, xbar: Params) -> FWClientState:
    """Commit or drop the pending step, then apply the server's sync instruction."""
    config = job.content["config"]
    committed = _load(job, _STATE, layout)
    pending = _load(job, _PENDING, layout)
    meta = job.state.get(_META, ConfigRecord({"pending-round": -1}))
    if pending is not None and meta["pending-round"] == config["last-accepted"]:
        committed = pending
    sync = config["sync"]
    if sync == SYNC_NONE:
        if committed is None:
            raise LostStateError("no FedFW state on this node; the server will resend x_i")
        return committed
    x = xbar if sync == SYNC_FROM_XBAR else record_to_params(job.content["xi"], layout)
    kept = committed or FWClientState(x=x)
    return replace(kept, x=[np.array(v, dtype=np.float64) for v in x])


def train(job: ClientJob) -> RecordDict:
    """One Frank-Wolfe step: s_i = LMO(g_i) over the node's D_i; reply with s_i encoded."""
    fw = fedfw_settings(job.settings)
    config, data = job.content["config"], job.data
    model = new_model(job.settings, data.task)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = record_to_params(job.content["xbar"], layout)
    state = _current_state(job, layout, xbar)
    t, n = int(config["server-round"]), int(config["num-clients"])
    index = None
    if fw.variant == "fedfw-sto":
        rng = np.random.default_rng([job.settings.seed, t, data.partition_id])
        size = min(fw.batch_size, len(data.y_train))
        index = rng.choice(len(data.y_train), size=size, replace=False)
    _, grad = loss_and_grad(model, state.x, data.x_train, data.y_train, data.task.kind, index)
    constraint = node_constraint(job.node_config, fw.constraint)
    s, advanced = fedfw_client_step(fw.variant, state, xbar, grad, t, fw.schedule, n,
                                    constraint, fw.scope)
    encoded = encode_model_point(constraint, s, fw.scope)
    # step with the point exactly as the server will decode it, so both x_i stay identical
    s_wire = decode_model_point(constraint, encoded, layout.shapes, fw.scope)
    pending = replace(advanced, x=apply_step(state.x, s_wire, fw.schedule.eta(t)))
    _save(job, _STATE, layout, state)
    _save(job, _PENDING, layout, pending)
    job.state[_META] = ConfigRecord({"pending-round": t})
    return RecordDict({"point": arrays_to_record(encoded)})


def evaluate(job: ClientJob) -> RecordDict:
    """Loss sums at x-bar on this node's data, and grad f_i(x-bar) when the FW gap is on."""
    data = job.data
    model = new_model(job.settings, data.task)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = record_to_params(job.content["xbar"], layout)
    load_params(model, xbar)
    reply = RecordDict({"metrics": evaluation_sums(model, data)})
    if bool(job.content["config"]["fw-gap"]):
        _, grad = loss_and_grad(model, xbar, data.x_train, data.y_train, data.task.kind)
        reply["grad"] = params_to_record(layout, grad)
    return reply


def bounds(job: ClientJob) -> RecordDict:
    """This node's constraint set D_i (section 4.3), so the server can check its points."""
    constraint = node_constraint(job.node_config, fedfw_settings(job.settings).constraint)
    return RecordDict({"bounds": ConfigRecord({"constraint": constraint.kind,
                                               "radius": float(constraint.radius)})})
