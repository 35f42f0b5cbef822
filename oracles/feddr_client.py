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
from flwr.app import ConfigRecord, RecordDict

from functions.params import ParamLayout, Params, params_to_record, record_to_params
from oracles.douglas_rachford import DRClientState, feddr_client_init, feddr_client_step
from oracles.fedavg_client import evaluation_sums
from oracles.feddr_settings import feddr_settings
from oracles.job import ClientJob
from oracles.torch_grad import load_params, loss_and_grad
from oracles.torch_models import new_model
from tasks.federation import LocalData

SYNC_NONE, SYNC_FROM_XBAR, SYNC_FROM_XHAT = "none", "xbar", "xhat"
_STATE = {"x": "feddr.x", "y": "feddr.y", "x_hat": "feddr.x_hat"}
_PENDING = {"x": "feddr.pending.x", "y": "feddr.pending.y", "x_hat": "feddr.pending.x_hat"}
_META = "feddr.meta"


class LostStateError(RuntimeError):
    """The node has no FedDR state (e.g. its SuperNode restarted); the server will resend it."""


def _save(job: ClientJob, keys: dict[str, str], layout: ParamLayout, state: DRClientState) -> None:
    for field, key in keys.items():
        job.state[key] = params_to_record(layout, getattr(state, field), dtype=np.float64)


def _load(job: ClientJob, keys: dict[str, str], layout: ParamLayout) -> DRClientState | None:
    if not all(key in job.state for key in keys.values()):
        return None
    return DRClientState(**{f: record_to_params(job.state[k], layout) for f, k in keys.items()})


def _current_state(job: ClientJob, layout: ParamLayout, xbar: Params) -> DRClientState:
    """Commit or drop the pending step; a node without state starts at the server's point."""
    config = job.content["config"]
    committed = _load(job, _STATE, layout)
    pending = _load(job, _PENDING, layout)
    meta = job.state.get(_META, ConfigRecord({"pending-round": -1}))
    if pending is not None and meta["pending-round"] == config["last-accepted"]:
        committed = pending
    if committed is not None:
        return committed
    sync = config["sync"]
    if sync == SYNC_NONE:
        raise LostStateError("no FedDR state on this node; the server will resend its x_hat_i")
    start = xbar if sync == SYNC_FROM_XBAR else record_to_params(job.content["xhat"], layout)
    return feddr_client_init(start)


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
    _save(job, _STATE, layout, state)
    _save(job, _PENDING, layout, pending)
    job.state[_META] = ConfigRecord({"pending-round": t})
    return RecordDict({"xhat": params_to_record(layout, pending.x_hat)})


def evaluate(job: ClientJob) -> RecordDict:
    """Loss sums at x-bar on this node's test shard and training partition."""
    model = new_model(job.settings, job.data.task)
    xbar = record_to_params(job.content["xbar"], ParamLayout.of_state_dict(model.state_dict()))
    load_params(model, xbar)
    return RecordDict({"metrics": evaluation_sums(model, job.data)})
