"""Federated evaluation at the server's consensus point x-bar (FedFW, FedDR, ...)."""

from __future__ import annotations

from flwr.app import RecordDict

from functions.params import ParamLayout, params_to_record, record_to_params
from oracles.fedavg_client import evaluation_sums
from oracles.job import ClientJob
from oracles.torch_grad import load_params, loss_and_grad
from oracles.torch_models import new_model


def evaluate_xbar(job: ClientJob, with_gradient: bool = False) -> RecordDict:
    """Loss sums at x-bar on this node's data; with ``with_gradient``, also grad f_i(x-bar)."""
    data = job.data
    model = new_model(job.settings, data.task)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = record_to_params(job.content["xbar"], layout)
    load_params(model, xbar)
    reply = RecordDict({"metrics": evaluation_sums(model, data)})
    if with_gradient:
        _, grad = loss_and_grad(model, xbar, data.x_train, data.y_train, data.task.kind)
        reply["grad"] = params_to_record(layout, grad)
    return reply
