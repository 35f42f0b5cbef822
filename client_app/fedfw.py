"""Client half of FedFW, FedFW+ and FedFW-sto (Algorithm 1 of the FedFW paper).

The node keeps x_i (and y_i, d_i) in its Context.state through ``PendingStore``: a step counts
only once the server confirms it accepted the point, so node and server mirror never disagree
on x_i; ``sync`` restores x_i after a lost state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from client_app.evaluation import evaluate_xbar
from client_app.fedfw_replica import compact_xbar
from client_app.job import ClientJob
from client_app.models import new_model
from client_app.node_info import node_facts
from client_app.node_state import (
    LostStateError,
    PendingStore,
    params_records,
    records_params,
    restart_point,
)
from functions.extreme_points import decode_model_point, encode_model_point
from functions.params import ParamLayout, Params, arrays_to_record, record_to_params
from functions.protocol import (
    CONFIG,
    CONSTRAINT,
    EVALUATE,
    FW_GAP,
    FW_POINT,
    FW_RESTART,
    LAST_ACCEPTED,
    NODE,
    NUM_CLIENTS,
    QUERY_NODE,
    RADIUS,
    SERVER_ROUND,
    SYNC,
    SYNC_NONE,
    TRAIN,
    XBAR,
)
from oracles.frank_wolfe import FWClientState, apply_step, fedfw_client_step
from oracles.torch_grad import loss_and_grad
from run_config.fedfw import fedfw_settings, node_constraint

STORE = PendingStore("fedfw")


def _current_state(job: ClientJob, layout: ParamLayout, xbar: Params) -> FWClientState:
    """Commit or drop the pending step, then apply the server's sync instruction."""
    config = job.content[CONFIG]
    records = STORE.resolve(job.state, config[LAST_ACCEPTED])
    committed = None if records is None else FWClientState(**records_params(layout, records))
    if config[SYNC] == SYNC_NONE:
        if committed is None:
            raise LostStateError("no FedFW state on this node; the server will resend x_i")
        return committed
    x = restart_point(job.content, layout, xbar, FW_RESTART)
    return replace(committed, x=x) if committed is not None else FWClientState(x=x)


def _records(layout: ParamLayout, state: FWClientState) -> dict:
    return params_records(layout, {"x": state.x, "y": state.y, "d": state.d})


def train(job: ClientJob) -> RecordDict:
    """One Frank-Wolfe step: s_i = LMO(g_i) over the node's D_i; reply with s_i encoded."""
    fw = fedfw_settings(job.settings)
    config, data = job.content[CONFIG], job.data
    model = new_model(job.settings, data.task, job.device)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = compact_xbar(job, layout, fw.scope)
    if xbar is None:
        xbar = record_to_params(job.content[XBAR], layout)
    state = _current_state(job, layout, xbar)
    t, n = int(config[SERVER_ROUND]), int(config[NUM_CLIENTS])
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
    STORE.stage(job.state, _records(layout, state), _records(layout, pending), t)
    return RecordDict({FW_POINT: arrays_to_record(encoded)})


def evaluate(job: ClientJob) -> RecordDict:
    """Loss sums at x-bar, and grad f_i(x-bar) when the FW gap diagnostic is on."""
    scope = fedfw_settings(job.settings).scope
    return evaluate_xbar(job, bool(job.content[CONFIG][FW_GAP]),
                         lambda j, layout: compact_xbar(j, layout, scope))


def describe(job: ClientJob) -> RecordDict:
    """``query.node``: the partition, and this node's set D_i (section 4.3) so the server can
    check its points."""
    constraint = node_constraint(job.node_config, fedfw_settings(job.settings).constraint)
    return RecordDict({NODE: ConfigRecord({**node_facts(job), CONSTRAINT: constraint.kind,
                                           RADIUS: float(constraint.radius)})})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe}
