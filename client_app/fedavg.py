"""Client half of FedAvg, FedProx and projected FedAvg: local SGD from the received model."""

from __future__ import annotations

from flwr.app import ArrayRecord, MetricRecord, RecordDict

from client_app.evaluation import evaluation_sums
from client_app.job import ClientJob
from client_app.models import model_from_arrays
from client_app.node_info import describe_node
from functions.protocol import (
    ARRAYS,
    CONFIG,
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
    reply = RecordDict(
        {
            ARRAYS: ArrayRecord(model.cpu().state_dict()),
            METRICS: MetricRecord({LOCAL_TRAIN_LOSS: loss, NUM_EXAMPLES: len(data.y_train)}),
        }
    )
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def evaluate(job: Job) -> RecordDict:
    """Evaluation sums of the received model on this node's test shard and training partition."""
    model = model_from_arrays(job.settings, job.data.task, job.content[ARRAYS], job.device)
    return RecordDict({METRICS: evaluation_sums(model, job.data)})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node}
