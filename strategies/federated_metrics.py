"""Exact sample-weighted aggregation of the clients' evaluation sums."""

from __future__ import annotations

from flwr.app import MetricRecord, RecordDict


def aggregate_evaluation_sums(replies: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Turn the clients' loss sums and counts into ``test_loss``, ``test_accuracy``, ``train_loss``.

    Signature matches Flower's ``evaluate_metrics_aggr_fn``.
    """
    totals: dict[str, float] = {}
    for content in replies:
        for record in content.metric_records.values():
            for key, value in record.items():
                totals[key] = totals.get(key, 0.0) + float(value)
    n_test = totals.get(weighting_key, 0.0)
    n_train = totals.get("train-examples", 0.0)
    out = MetricRecord()
    if n_test > 0:
        out["test_loss"] = totals.get("test-loss-sum", 0.0) / n_test
        if "test-correct-sum" in totals:
            out["test_accuracy"] = totals["test-correct-sum"] / n_test
        else:
            out["test_mse"] = out["test_loss"]
    if n_train > 0:
        out["train_loss"] = totals.get("train-loss-sum", 0.0) / n_train
    return out
