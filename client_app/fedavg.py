"""Client half of FedAvg, FedProx and projected FedAvg: local SGD from the received model.

With differential privacy (``dp.noise-multiplier``) the node clips its update (its model less
the received one) to ``dp.clipping-norm`` (Flower's ``compute_clip_model_update``) and, when the
server asks (``dp-noise-std``: under secure aggregation), adds its share of the Gaussian noise,
drawn from the OS's randomness: the server must not be able to draw it again.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.supercore.differential_privacy import compute_clip_model_update

from client_app.evaluation import evaluation_sums
from client_app.job import ClientJob
from client_app.models import model_from_arrays
from client_app.node_info import describe_node
from client_app.private_noise import with_noise
from functions.protocol import (
    ARRAYS,
    CONFIG,
    DP_NOISE_STD,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    LOCAL_TRAIN_LOSS,
    METRICS,
    NUM_EXAMPLES,
    PROXIMAL_MU,
    QUERY_NODE,
    SERVER_ROUND,
    TRAIN,
)
from oracles.local_sgd import SGDConfig, default_step, train_sgd
from run_config.fedfw import ConstraintSet

Job = ClientJob[ConstraintSet | None, None]


def train(job: Job) -> RecordDict:
    """Run local SGD (with FedProx's proximal term when the server sends ``proximal-mu``).
    When the server asks (``evaluate-first``), the received model's evaluation sums too,
    computed before training."""
    config = job.content[CONFIG]
    s, data = job.settings, job.data
    model = model_from_arrays(s, data.task, job.content[ARRAYS], job.device)
    evaluation = evaluation_sums(model, data) if EVALUATE_FIRST in config else None
    sgd = SGDConfig(
        epochs=s.local_epochs,
        steps=s.local_steps,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate or default_step(data.task.kind),
        proximal_mu=float(config.get(PROXIMAL_MU, 0.0)),
    )
    seed = s.seed * 100_003 + int(config.get(SERVER_ROUND, 0)) * 1_009 + data.partition_id
    loss = train_sgd(model, data.x_train, data.y_train, data.task.kind, sgd, seed)
    arrays = ArrayRecord(model.cpu().state_dict())
    if s.node_dp is not None:
        arrays = _private(arrays, job.content[ARRAYS], s.node_dp.clipping_norm, config)
    reply = RecordDict(
        {
            ARRAYS: arrays,
            METRICS: MetricRecord({LOCAL_TRAIN_LOSS: loss, NUM_EXAMPLES: len(data.y_train)}),
        }
    )
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def _private(
    trained: ArrayRecord, received: ArrayRecord, clipping_norm: float, config
) -> ArrayRecord:
    """The received model plus the node's update clipped to ``clipping_norm``, plus, when the
    server asks for it, the node's share of the noise."""
    local = [a.numpy().astype(np.float64) for a in trained.values()]
    start = [a.numpy().astype(np.float64) for a in received.values()]
    compute_clip_model_update(local, start, clipping_norm)
    std = float(config.get(DP_NOISE_STD, 0.0))
    if std > 0:
        local = with_noise(local, std)
    return ArrayRecord(
        {k: Array(a.astype(np.float32)) for k, a in zip(trained.keys(), local, strict=True)}
    )


def evaluate(job: Job) -> RecordDict:
    """Evaluation sums of the received model on this node's test shard and training partition."""
    model = model_from_arrays(job.settings, job.data.task, job.content[ARRAYS], job.device)
    return RecordDict({METRICS: evaluation_sums(model, job.data)})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node}
