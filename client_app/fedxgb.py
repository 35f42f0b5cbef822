"""Client half of ``fedxgb-bagging`` and ``fedxgb-cyclic`` (Flower's xgboost examples' node).

A node keeps nothing between messages: each one carries the global booster, checked here as on
the server (``functions.boosters``) before XGBoost loads it. Training boosts
``fedxgb.local-rounds`` iterations on it and sends back only those (bagging) or the whole model
(cyclic), as XGBoost's JSON; evaluation reports the booster's loss sums on the node's data.
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from client_app.evaluation import sums_record
from client_app.job import ClientJob
from client_app.node_info import describe_node
from functions.boosters import BoosterSpec, class_margins, raw_record, read_booster
from functions.protocol import (
    ARRAYS,
    CONFIG,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    METRICS,
    QUERY_NODE,
    TRAIN,
)
from oracles.functional_losses import PointwiseLoss
from oracles.xgboost_local import boost, last_iterations, outputs, whole
from run_config.fedxgb import FedXgbSettings
from tasks.federation import LocalData

Job = ClientJob[FedXgbSettings, None]


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(len(x), -1)


def _global(job: Job) -> bytes:
    """The checked global booster's bytes."""
    fedxgb = job.family
    return read_booster(job.content[ARRAYS], fedxgb.spec(job.data.task))[1]


def train(job: Job) -> RecordDict:
    """Boost on the global booster; reply with the new iterations (bagging) or all (cyclic).
    When the server asks (``evaluate-first``), the global booster's evaluation sums too."""
    fedxgb = job.family
    data = job.data
    rounds = fedxgb.local_rounds
    raw = _global(job)
    evaluation = (
        booster_evaluation(raw, fedxgb.spec(data.task), fedxgb.loss(data.task), data)[METRICS]
        if EVALUATE_FIRST in job.content[CONFIG]
        else None
    )
    booster = boost(
        raw,
        fedxgb.spec(data.task).params(),
        _flat(data.x_train),
        data.y_train,
        rounds,
        fedxgb.node_eta(data.num_partitions),
    )
    reply = RecordDict(
        {ARRAYS: raw_record(last_iterations(booster, rounds) if fedxgb.bagging else whole(booster))}
    )
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def evaluate(job: Job) -> RecordDict:
    """The global booster's loss sums on this node's test shard and training data."""
    fedxgb, task = job.family, job.data.task
    return booster_evaluation(_global(job), fedxgb.spec(task), fedxgb.loss(task), job.data)


def booster_evaluation(
    raw: bytes | None,
    spec: BoosterSpec,
    loss: PointwiseLoss,
    data: LocalData,
    train_outputs: np.ndarray | None = None,
    test_outputs: np.ndarray | None = None,
) -> RecordDict:
    """The evaluate reply of a checked booster ``raw``: its loss sums (and correct count) on the
    node's test shard and training data, scored on its class margins; ``train_outputs``,
    ``test_outputs``: the booster's ``outputs`` on the training rows and the test shard when the
    caller has them already (then ``raw`` may be None)."""

    def scored(
        x: np.ndarray, y: np.ndarray, raw_outputs: np.ndarray | None = None
    ) -> tuple[float, float | None]:
        if raw_outputs is None:
            if raw is None:
                raise ValueError("booster_evaluation needs the booster or its outputs")
            raw_outputs = outputs(raw, _flat(x))
        return loss.sums(class_margins(spec, raw_outputs), y)

    test_loss, correct = scored(data.x_test, data.y_test, test_outputs)
    train_loss, _ = scored(data.x_train, data.y_train, train_outputs)
    return RecordDict({METRICS: sums_record(data, test_loss, train_loss, correct)})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node}
