"""Client half of FedDR (Tran-Dinh et al. 2021, Algorithm 1) with g = indicator of D.

The node keeps (x_i, y_i, x_hat_i) in its Context.state. As in FedFW, a step stays *pending*
until the server confirms, in the next message's ``last-accepted``, that it accepted x_hat_i;
otherwise the node keeps its previous variables, as a non-participant does. The server then
still holds the node's previous x_hat_i, so node and server never disagree on what enters the
average, and a rejected reply does not leave the DR iteration of that node a step ahead.

A node without state starts with ``feddr_client_init(z)`` at the restart point z that the
server holds for it: x^0 (the projected model init) on first contact, or its last accepted
x_hat_i after a lost state. ``sync`` says where z is: ``xbar`` (z equals the x-bar sent),
``xhat`` (sent under "xhat"), or ``none`` (the node must have state).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import RecordDict
from torch import nn

from client_app.evaluation import evaluate_xbar, sums_at
from client_app.job import ClientJob
from client_app.models import new_model
from client_app.node_info import describe_node
from client_app.node_state import (
    PendingStore,
    held_change,
    params_records,
    records_params,
    restart_point,
)
from functions.acceptance import last_accepted, sync_value
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from functions.protocol import (
    CONFIG,
    DR_XHAT,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    HELD_CHANGE,
    QUERY_NODE,
    SERVER_ROUND,
    SYNC_NONE,
    TRAIN,
    XBAR,
)
from oracles.douglas_rachford import DRClientState, feddr_client_init, feddr_client_step
from oracles.torch_grad import loss_and_grad
from run_config.feddr import FedDRSettings

Job = ClientJob[FedDRSettings, None]

STORE = PendingStore("feddr")


def _current_state(job: Job, layout: ParamLayout, xbar: Params) -> DRClientState:
    """Commit or drop the pending step; a node without state starts at the server's point, as
    does every node it tells to with secure aggregation (a restart at consensus,
    ``strategies.held_sum``)."""
    config = job.content[CONFIG]
    records = STORE.resolve(job.state, last_accepted(config))
    restarts = job.settings.secure_aggregation and sync_value(config) != SYNC_NONE
    if records is not None and not restarts:
        return DRClientState(**records_params(layout, records))
    return feddr_client_init(restart_point(job.content, layout, xbar, DR_XHAT))


def _records(layout: ParamLayout, state: DRClientState) -> dict:
    return params_records(layout, {"x": state.x, "y": state.y, "x_hat": state.x_hat})


def gradient_oracle(
    job: Job, model: nn.Module, batch_size: int, server_round: int
) -> Callable[[Params], Params]:
    """grad f_i on the node's training partition: full batch, or seeded minibatches when > 0."""
    data = job.data
    n = len(data.y_train)
    rng = np.random.default_rng([job.settings.seed, server_round, data.partition_id])

    def grad_fn(z: Params) -> Params:
        index = rng.choice(n, size=min(batch_size, n), replace=False) if batch_size > 0 else None
        return loss_and_grad(model, z, data.x_train, data.y_train, data.task.kind, index)[1]

    return grad_fn


def train(job: Job) -> RecordDict:
    """One FedDR client update at the received x-bar; reply with x_hat_i (dense float32), or
    with secure aggregation its change (float64).
    When the server asks (``evaluate-first``), the evaluation sums at x-bar too, computed
    before the update."""
    dr, config = job.family, job.content[CONFIG]
    t = int(config[SERVER_ROUND])
    model = new_model(job.settings, job.data.task, job.device)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = record_to_params(job.content[XBAR], layout)
    evaluation = sums_at(model, xbar, job.data) if EVALUATE_FIRST in config else None
    state = _current_state(job, layout, xbar)
    pending = feddr_client_step(
        state,
        xbar,
        gradient_oracle(job, model, dr.batch_size, t),
        dr.alpha,
        dr.eta,
        dr.local_steps,
        dr.lr,
    )
    STORE.stage(job.state, _records(layout, state), _records(layout, pending), t)
    if job.settings.secure_aggregation:  # the change of x_hat_i, for the round's secure sum
        reply = RecordDict({HELD_CHANGE: held_change(layout, state.x_hat, pending.x_hat)})
    else:
        reply = RecordDict({DR_XHAT: params_to_record(layout, pending.x_hat)})
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


HANDLERS = {TRAIN: train, EVALUATE: evaluate_xbar, QUERY_NODE: describe_node}
