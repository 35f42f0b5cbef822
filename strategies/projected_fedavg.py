"""Projected FedAvg: Flower's FedAvg whose server step projects the weighted average onto D.

Clients run the usual local SGD (``oracles.fedavg_client``); the server forms
x = proj_D(sum_i n_i x_i / sum_i n_i) with ``projected_average`` over the replies that pass
validation. D comes from the ``fedfw.*`` keys (``oracles.fedfw_settings.constraint_set``), the
same set FedFW and FedDR use, and the start point is the model's init projected onto D, so
every global model lies in D.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp.strategy import FedAvg

from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record, record_to_params
from oracles.douglas_rachford import projected_average
from oracles.fedfw_settings import ConstraintSet, constraint_set
from strategies.baselines import fedavg_options
from strategies.build import BuildContext, projected_start


class ProjectedFedAvg(FedAvg):
    """FedAvg (sampling, messages, evaluation: Flower's) with a validated, projected average."""

    def __init__(self, domain: ConstraintSet, layout: ParamLayout, x0: Params, **fedavg) -> None:
        super().__init__(**fedavg)
        self.domain, self.layout, self.x0 = domain, layout, x0

    def initial_arrays(self) -> ArrayRecord:
        """The start point: the model's init projected onto D."""
        return params_to_record(self.layout, self.x0)

    def summary(self) -> None:
        log(INFO, "\tprojected FedAvg: D = %s ball of radius %s (%s)",
            self.domain.constraint.kind, self.domain.constraint.radius, self.domain.scope)
        super().summary()

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """proj_D of the sample-weighted mean of the valid replies; bad ones are dropped."""
        models, weights, contents = [], [], []
        rejected = 0
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():  # counted as a failure by the metered grid
                log(WARNING, "projected FedAvg round %d: node %s failed: %s", server_round, node,
                    reply.error.reason)
                continue
            try:
                model, weight = self._checked(reply.content)
            except DecodeError as err:
                rejected += 1
                log(WARNING, "projected FedAvg round %d: dropped the model of node %s: %s",
                    server_round, node, err)
                continue
            models.append(model)
            weights.append(weight)
            contents.append(reply.content)
        metrics = MetricRecord({"failures": rejected, "participants": len(models)})
        if not models:
            return None, metrics  # Flower keeps the previous global model
        metrics.update(self.train_metrics_aggr_fn(contents, self.weighted_by_key))
        average = projected_average(models, weights, self.domain.constraint, self.domain.scope)
        return params_to_record(self.layout, average), metrics

    def _checked(self, content: RecordDict) -> tuple[Params, float]:
        """The reply's model (names, shapes, finite) and its positive, finite sample weight."""
        record = content.array_records.get(self.arrayrecord_key)
        if record is None:
            raise DecodeError(f"reply has no {self.arrayrecord_key!r} record")
        model = record_to_params(record, self.layout)
        if len(content.metric_records) != 1:
            raise DecodeError(f"expected one MetricRecord, got {len(content.metric_records)}")
        metrics = next(iter(content.metric_records.values()))
        if not all(np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for v in metrics.values()):
            raise DecodeError("metrics contain NaN or inf")
        weight = float(metrics.get(self.weighted_by_key, 0.0))
        if not weight > 0:
            raise DecodeError(f"{self.weighted_by_key}={weight} is not > 0")
        return model, weight


def build_projected_fedavg(ctx: BuildContext) -> ProjectedFedAvg:
    """Projected FedAvg over D from the ``fedfw.*`` keys, with FedAvg's common options."""
    domain = constraint_set(ctx.settings)
    layout, x0 = projected_start(ctx, domain)
    return ProjectedFedAvg(domain, layout, x0, **fedavg_options(ctx))
