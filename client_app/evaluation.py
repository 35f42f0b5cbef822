"""Evaluation sums of a torch model on a node's data, and evaluation at the consensus point x-bar.

A node sends sums and counts, not means, so the server can form exact global means: the
sample-weighted test metrics and the papers' F(x) = (1/n) sum_i f_i(x) (``train_loss``).
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import MetricRecord, RecordDict
from torch import nn

from client_app.job import ClientJob
from client_app.models import new_model
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from functions.protocol import (
    FW_GRAD,
    METRICS,
    NUM_EXAMPLES,
    TEST_CORRECT_SUM,
    TEST_LOSS_SUM,
    TRAIN_EXAMPLES,
    TRAIN_LOSS_SUM,
    XBAR,
)
from oracles.torch_grad import load_params, loss_and_grad
from tasks.evaluation import CLASSIFICATION, evaluate_model
from tasks.federation import LocalData


def sums_record(
    data: LocalData, test_loss: float, train_loss: float, correct: float | None
) -> MetricRecord:
    """What every family's node reports of a function on its data: the loss sums on its test
    shard and training partition, their sizes, and (classification; None: regression) the
    correct predictions on the test shard."""
    record = MetricRecord(
        {
            NUM_EXAMPLES: len(data.y_test),
            TEST_LOSS_SUM: test_loss,
            TRAIN_LOSS_SUM: train_loss,
            TRAIN_EXAMPLES: len(data.y_train),
        }
    )
    if correct is not None:
        record[TEST_CORRECT_SUM] = correct
    return record


def evaluation_sums(model: nn.Module, data: LocalData) -> MetricRecord:
    """Loss sums and counts of ``model`` on a node's test shard and training partition."""
    kind = data.task.kind
    test = evaluate_model(model, data.x_test, data.y_test, kind)
    train = evaluate_model(model, data.x_train, data.y_train, kind)
    n_test, n_train = len(data.y_test), len(data.y_train)
    correct = test["accuracy"] * n_test if kind == CLASSIFICATION else None
    return sums_record(data, test["loss"] * n_test, train["loss"] * n_train, correct)


def sums_at(model: nn.Module, params: Params, data: LocalData) -> MetricRecord:
    """``evaluation_sums`` of ``model`` with the weights ``params`` (x-bar)."""
    load_params(model, params)
    return evaluation_sums(model, data)


def evaluate_xbar(
    job: ClientJob,
    with_gradient: bool = False,
    compact: Callable[[ClientJob, ParamLayout], Params | None] | None = None,
) -> RecordDict:
    """Loss sums at x-bar on this node's data; with ``with_gradient``, also grad f_i(x-bar).
    x-bar is the message's dense one unless ``compact`` rebuilds it (FedFW's compact downlink)."""
    data = job.data
    model = new_model(job.settings, data.task, job.device)
    layout = ParamLayout.of_state_dict(model.state_dict())
    xbar = compact(job, layout) if compact is not None else None
    if xbar is None:
        xbar = record_to_params(job.content[XBAR], layout)
    reply = RecordDict({METRICS: sums_at(model, xbar, data)})
    if with_gradient:
        _, grad = loss_and_grad(model, xbar, data.x_train, data.y_train, data.task.kind)
        reply[FW_GRAD] = params_to_record(layout, grad)
    return reply
