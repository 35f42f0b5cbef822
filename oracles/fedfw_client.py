"""Client procedures of FedFW, FedFW+ and FedFW-sto (Algorithm 1 of the FedFW paper).

The node keeps x_i (and y_i, d_i) in its Context.state through ``PendingStore``: a step
counts only once the server confirms it accepted the point (``oracles.pending_state``), so
node and server mirror never disagree on x_i; ``sync`` restores x_i after a lost state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from functions.extreme_points import decode_model_point, encode_model_point
from functions.params import ParamLayout, Params, arrays_to_record, record_to_params
from oracles.consensus_eval import evaluate_xbar
from oracles.fedfw_settings import fedfw_settings, node_constraint
from oracles.frank_wolfe import FWClientState, apply_step, fedfw_client_step
from oracles.job import ClientJob
from oracles.pending_state import SYNC_NONE, LostStateError, PendingStore, restart_point
from oracles.torch_grad import loss_and_grad
from oracles.torch_models import new_model

POINT_KEY = "xi"  # message key (and sync value) of a re-sent x_i
STORE = PendingStore("fedfw", ("x", "y", "d"))


def _current_state(job: ClientJob, layout: ParamLayout, xbar: Params) -> FWClientState:
    """Commit or drop the pending step, then apply the server's sync instruction."""
    config = job.content["config"]
    committed = STORE.resolve(job.state, layout, config["last-accepted"])
    if config["sync"] == SYNC_NONE:
        if committed is None:
            raise LostStateError("no FedFW state on this node; the server will resend x_i")
        return FWClientState(**committed)
    x = restart_point(job.content, layout, xbar, POINT_KEY)
    kept = FWClientState(**committed) if committed is not None else FWClientState(x=x)
    return replace(kept, x=x)


def _variables(state: FWClientState) -> dict[str, Params | None]:
    return {"x": state.x, "y": state.y, "d": state.d}


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
    STORE.stage(job.state, layout, _variables(state), _variables(pending), t)
    return RecordDict({"point": arrays_to_record(encoded)})


def evaluate(job: ClientJob) -> RecordDict:
    """Loss sums at x-bar, and grad f_i(x-bar) when the FW gap diagnostic is on."""
    return evaluate_xbar(job, with_gradient=bool(job.content["config"]["fw-gap"]))


def bounds(job: ClientJob) -> RecordDict:
    """This node's set D_i (section 4.3), so the server can check its points, and its partition id,
    so the server can order nodes independently of Flower's random node ids (same seed, same
    participants)."""
    constraint = node_constraint(job.node_config, fedfw_settings(job.settings).constraint)
    return RecordDict({"bounds": ConfigRecord({"constraint": constraint.kind,
                                               "radius": float(constraint.radius),
                                               "partition-id": job.data.partition_id})})
