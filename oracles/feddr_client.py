"""Client procedures of FedDR (Tran-Dinh et al. 2021, Algorithm 1) with g = indicator of D.

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

from functions.params import ParamLayout, Params, params_to_record, record_to_params
from oracles.douglas_rachford import DRClientState, feddr_client_init, feddr_client_step
from oracles.feddr_settings import feddr_settings
from oracles.job import ClientJob
from oracles.pending_state import PendingStore, restart_point
from oracles.torch_grad import loss_and_grad
from oracles.torch_models import new_model
from tasks.federation import LocalData

POINT_KEY = "xhat"  # message key (and sync value) of a re-sent x_hat_i
STORE = PendingStore("feddr", ("x", "y", "x_hat"))


def _current_state(job: ClientJob, layout: ParamLayout, xbar: Params) -> DRClientState:
    """Commit or drop the pending step; a node without state starts at the server's point."""
    committed = STORE.resolve(job.state, layout, job.content["config"]["last-accepted"])
    if committed is not None:
        return DRClientState(**committed)
    return feddr_client_init(restart_point(job.content, layout, xbar, POINT_KEY))


def _variables(state: DRClientState) -> dict[str, Params]:
    return {"x": state.x, "y": state.y, "x_hat": state.x_hat}


def gradient_oracle(job: ClientJob, batch_size: int, server_round: int
                    ) -> Callable[[Params], Params]:
    """grad f_i on the node's training partition: full batch, or seeded minibatches when > 0."""
    data: LocalData = job.data
    model = new_model(job.settings, data.task)
    n = len(data.y_train)
    rng = np.random.default_rng([job.settings.seed, server_round, data.partition_id])

    def grad_fn(z: Params) -> Params:
        index = rng.choice(n, size=min(batch_size, n), replace=False) if batch_size > 0 else None
        return loss_and_grad(model, z, data.x_train, data.y_train, data.task.kind, index)[1]

    return grad_fn


def train(job: ClientJob) -> RecordDict:
    """One FedDR client update at the received x-bar; reply with x_hat_i (dense float32)."""
    dr = feddr_settings(job.settings)
    t = int(job.content["config"]["server-round"])
    layout = ParamLayout.of_state_dict(new_model(job.settings, job.data.task).state_dict())
    xbar = record_to_params(job.content["xbar"], layout)
    state = _current_state(job, layout, xbar)
    pending = feddr_client_step(state, xbar, gradient_oracle(job, dr.batch_size, t), dr.alpha,
                                dr.eta, dr.local_steps, dr.lr)
    STORE.stage(job.state, layout, _variables(state), _variables(pending), t)
    return RecordDict({"xhat": params_to_record(layout, pending.x_hat)})
