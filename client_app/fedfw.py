"""Client half of FedFW, FedFW+ and FedFW-sto (Algorithm 1 of the FedFW paper).

The node keeps x_i (and y_i, d_i) in its Context.state through ``PendingStore``: a step counts
only once the server confirms it accepted the point, so node and server mirror never disagree
on x_i; ``sync`` restores x_i after a lost state.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from client_app.evaluation import evaluate_xbar, sums_at
from client_app.fedfw_mean import Job
from client_app.fedfw_replica import compact_xbar
from client_app.models import new_model
from client_app.node_info import node_facts
from client_app.node_state import (
    LostStateError,
    PendingStore,
    held_change,
    params_records,
    records_params,
    restart_point,
)
from client_app.private_noise import with_noise
from functions.acceptance import last_accepted, sync_value
from functions.extreme_points import decode_model_point, encode_model_point, join_points
from functions.fedfw_downlink import header_through
from functions.params import ParamLayout, Params, arrays_to_record, record_to_params
from functions.protocol import (
    CONFIG,
    CONSTRAINT,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    FW_GAP,
    FW_POINT,
    FW_RESTART,
    HELD_CHANGE,
    LOCAL_STEPS,
    NODE,
    NUM_CLIENTS,
    QUERY_NODE,
    RADIUS,
    SERVER_ROUND,
    SYNC_NONE,
    TRAIN,
    XBAR,
)
from oracles.frank_wolfe import FWClientState, apply_step, fedfw_client_step
from oracles.torch_grad import clipped_mean_grad, loss_and_grad
from run_config.fedfw import FedFWSettings
from tasks.federation import LocalData

STORE = PendingStore("fedfw")


def _current_state(job: Job, layout: ParamLayout, xbar: Params) -> FWClientState:
    """Commit or drop the pending step, then apply the server's sync instruction."""
    config = job.content[CONFIG]
    records = STORE.resolve(job.state, last_accepted(config))
    committed = None if records is None else FWClientState(**records_params(layout, records))
    if sync_value(config) == SYNC_NONE:
        if committed is None:
            raise LostStateError("no FedFW state on this node; the server will resend x_i")
        return committed
    x = restart_point(job.content, layout, xbar, FW_RESTART)
    return replace(committed, x=x) if committed is not None else FWClientState(x=x)


def _records(layout: ParamLayout, state: FWClientState) -> dict:
    return params_records(layout, {"x": state.x, "y": state.y, "d": state.d})


def _steps(
    fw: FedFWSettings, data: LocalData, t: int, seed: int
) -> list[tuple[int, np.ndarray | None]]:
    """(schedule step, minibatch rows or None for all) of each FW step of round t.

    One step at t (FedFW-sto: on a fresh random minibatch), or the local pass: one step per
    minibatch of ``batch_size`` in data order (the authors' unshuffled DataLoader), at schedule
    steps (t - 1) K + k + 1 as if the node took every round's K steps (the authors count a
    client's minibatch steps; the two agree at full participation)."""
    n = len(data.y_train)
    if fw.local_pass:
        k_steps, b = fw.local_steps(n), fw.batch_size
        return [
            ((t - 1) * k_steps + k + 1, np.arange(k * b, min(n, (k + 1) * b)))
            for k in range(k_steps)
        ]
    if fw.variant == "fedfw-sto":
        rng = np.random.default_rng([seed, t, data.partition_id])
        return [(t, rng.choice(n, size=min(fw.batch_size, n), replace=False))]
    return [(t, None)]


def _gradient(job: Job, model, x: Params, index: np.ndarray | None) -> Params:
    """grad f_i at ``x`` on the node's rows (or ``index``); with differential privacy
    (``dp.noise-multiplier`` z, ``dp.clipping-norm`` C) the mean of the rows' gradients each
    clipped to C, with Gaussian noise of z C / b for its b rows, from the OS's randomness."""
    data, dp = job.data, job.settings.node_dp
    if dp is None:
        return loss_and_grad(model, x, data.x_train, data.y_train, data.task.kind, index)[1]
    rows = len(data.y_train) if index is None else len(index)
    grad = clipped_mean_grad(
        model, x, data.x_train, data.y_train, data.task.kind, dp.clipping_norm, index
    )
    return with_noise(grad, dp.noise_multiplier * dp.clipping_norm / rows)


def train(job: Job) -> RecordDict:
    """Frank-Wolfe steps s_i = LMO(g_i) over the node's D_i (one, or one per minibatch of the
    local pass); reply with every s_i encoded, or with secure aggregation the change of x_i.
    When the server asks (``evaluate-first``), the evaluation sums at the received x-bar too,
    computed before the steps."""
    fw = job.family
    config, data = job.content[CONFIG], job.data
    model = new_model(job.settings, data.task, job.device)
    layout = ParamLayout.of_state_dict(model.state_dict())
    t = int(config[SERVER_ROUND])
    compact = compact_xbar(job, layout, fw, header_through(TRAIN, t))
    if compact is None:  # the dense x-bar, with the roster's size N
        xbar, n = record_to_params(job.content[XBAR], layout), int(config[NUM_CLIENTS])
    else:
        xbar, n = compact
    evaluation = sums_at(model, xbar, data) if EVALUATE_FIRST in config else None
    start = state = _current_state(job, layout, xbar)
    constraint = job.overrides  # this node's D_i
    points = []
    for step, index in _steps(fw, data, t, job.settings.seed):
        grad = _gradient(job, model, state.x, index)
        s, advanced = fedfw_client_step(
            fw.variant, state, xbar, grad, step, fw.schedule, n, constraint, fw.scope
        )
        points.append(encode_model_point(constraint, s, fw.scope))
        # step with the point exactly as the server will decode it, so both x_i stay identical
        s_wire = decode_model_point(constraint, points[-1], layout.shapes, fw.scope)
        state = replace(advanced, x=apply_step(state.x, s_wire, fw.schedule.eta(step)))
    STORE.stage(job.state, _records(layout, start), _records(layout, state), t)
    if job.settings.secure_aggregation:  # the change of x_i, for the round's secure sum
        reply = RecordDict({HELD_CHANGE: held_change(layout, start.x, state.x)})
    else:
        encoded = join_points(points) if fw.local_pass else points[0]
        reply = RecordDict({FW_POINT: arrays_to_record(encoded)})
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def evaluate(job: Job) -> RecordDict:
    """Loss sums at x-bar, and grad f_i(x-bar) when the FW gap diagnostic is on."""
    fw = job.family
    through = header_through(EVALUATE, int(job.content[CONFIG][SERVER_ROUND]))

    def xbar(j: Job, layout: ParamLayout) -> Params | None:
        compact = compact_xbar(j, layout, fw, through)
        return None if compact is None else compact[0]

    return evaluate_xbar(job, bool(job.content[CONFIG][FW_GAP]), xbar)


def describe(job: Job) -> RecordDict:
    """``query.node``: the partition, and this node's set D_i (section 4.3) so the server can
    check its points."""
    fw = job.family
    constraint = job.overrides  # this node's D_i
    return RecordDict(
        {
            NODE: ConfigRecord(
                {
                    **node_facts(job),
                    CONSTRAINT: constraint.kind,
                    RADIUS: float(constraint.radius),
                    LOCAL_STEPS: fw.local_steps(len(job.data.y_train)),
                }
            )
        }
    )


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe}
