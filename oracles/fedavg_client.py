"""Client procedures of FedAvg and FedProx: local SGD from the received model, and evaluation."""

from __future__ import annotations

from flwr.app import ArrayRecord, MetricRecord, RecordDict

from oracles.job import ClientJob
from oracles.local_sgd import SGDConfig, train_sgd
from oracles.torch_models import model_from_arrays
from tasks.evaluation import CLASSIFICATION, evaluate_model


def train(job: ClientJob) -> RecordDict:
    """Run local SGD (with FedProx's proximal term when the server sends ``proximal-mu``)."""
    config = job.content["config"]
    s, data = job.settings, job.data
    model = model_from_arrays(s, data.task, job.content["arrays"])
    sgd = SGDConfig(
        epochs=s.local_epochs,
        steps=s.local_steps,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        proximal_mu=float(config.get("proximal-mu", 0.0)),
    )
    seed = s.seed * 100_003 + int(config.get("server-round", 0)) * 1_009 + data.partition_id
    loss = train_sgd(model, data.x_train, data.y_train, data.task.kind, sgd, seed)
    return RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "metrics": MetricRecord({"train_loss": loss, "num-examples": len(data.y_train)}),
        }
    )


def evaluate(job: ClientJob) -> RecordDict:
    """Evaluate the received model on this node's test shard and training partition.

    Sends sums and counts so the server can form exact sample-weighted means.
    """
    data = job.data
    model = model_from_arrays(job.settings, data.task, job.content["arrays"])
    return RecordDict({"metrics": evaluation_sums(model, data)})


def evaluation_sums(model, data) -> MetricRecord:
    """Loss sums and counts of ``model`` on a node's test shard and training partition."""
    kind = data.task.kind
    test = evaluate_model(model, data.x_test, data.y_test, kind)
    train_metrics = evaluate_model(model, data.x_train, data.y_train, kind)
    n_test, n_train = len(data.y_test), len(data.y_train)
    record = MetricRecord(
        {
            "num-examples": n_test,
            "test-loss-sum": test["loss"] * n_test,
            "train-loss-sum": train_metrics["loss"] * n_train,
            "train-examples": n_train,
        }
    )
    if kind == CLASSIFICATION:
        record["test-correct-sum"] = test["accuracy"] * n_test
    return record
