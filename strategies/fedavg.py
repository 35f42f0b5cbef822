"""FedAvg, FedProx and projected FedAvg: Flower's FedAvg, screened replies, a fixed node order.

Flower's ``FedAvg`` builds the messages and averages the models (``aggregate_arrayrecords``); on
top of it every reply is checked before Flower sees it (a bad one is a counted failure, never an
exception), nodes are sampled with the run's seed in partition order (``strategies.sampling``) so
the same seed picks the same partitions on every engine, and every round ends with a federated
evaluation of the global model on all nodes (``train_loss`` = F(x), as for every algorithm),
which rides on the next round's train messages when every node trains (``eval-with-train``).

FedProx is FedAvg whose train config carries ``proximal-mu`` (all that Flower's ``FedProx`` adds);
it is written as that one key here because the node sampling replaces FedAvg's ``configure_train``.
Projected FedAvg replaces the average by proj_D of the sample-weighted mean (``oracles``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from functions.params import Params, params_to_record, record_to_params
from functions.protocol import (
    ARRAYS,
    CONFIG,
    EVALUATE_FIRST,
    LOCAL_TRAIN_LOSS,
    METRICS,
    NUM_EXAMPLES,
    PROXIMAL_MU,
    SERVER_ROUND,
)
from oracles.douglas_rachford import projected_average
from run_config.common import RunSettings
from run_config.fedavg import PROJECTED
from run_config.fedfw import ConstraintSet, constraint_set
from strategies.evaluation import checked_count, checked_metrics, example_limit
from strategies.sampling import Sampler
from strategies.screening import exact_records
from strategies.torch_model import TorchGlobal, TorchModelStrategy
from tasks.datasets import TaskData


@dataclass(frozen=True)
class CheckedModel:
    """A train reply that passed the checks: the message, its model and its sample count."""

    reply: Message
    model: Params
    weight: float


class CheckedFedAvg(TorchModelStrategy, FedAvg):
    """McMahan et al.'s FedAvg: sample-weighted average of locally trained models.

    The base's round lifecycle comes first in the method order (admission, the seeded sampler,
    failures); Flower's FedAvg gives the messages' shape, the averaging and the summary."""

    label = "FedAvg"

    def __init__(
        self,
        model: TorchGlobal,
        start: ArrayRecord,
        seed: int,
        fraction_train: float,
        eval_with_train: bool,
    ) -> None:
        FedAvg.__init__(
            self,
            fraction_train=fraction_train,
            fraction_evaluate=1.0,
            min_train_nodes=1,
            min_evaluate_nodes=1,
            min_available_nodes=1,
            weighted_by_key=NUM_EXAMPLES,
            arrayrecord_key=ARRAYS,
            configrecord_key=CONFIG,
        )
        self.model, self.start = model, start
        self.sampler = Sampler(fraction_train, seed)
        self.eval_with_train = eval_with_train

    # -- the global function --------------------------------------------------------------
    def initial_arrays(self) -> ArrayRecord:
        return self.start

    # -- training ---------------------------------------------------------------------------
    def _train_config(self, config: ConfigRecord, server_round: int) -> ConfigRecord:
        """Flower's config of the round plus ``server-round`` (a copy: Flower passes the same
        record every round, and a sent message must keep its round), and ``evaluate-first``
        when the last round's evaluation rides on this round's training."""
        config = ConfigRecord({**config, SERVER_ROUND: server_round})
        if self.evaluation_due is not None:
            config[EVALUATE_FIRST] = self.evaluation_due
        return config

    def train_messages(
        self,
        server_round: int,
        nodes: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        """The global model to the sampled nodes (nodes keep no state: no sync)."""
        log(
            INFO,
            "%s round %d: %d of %d nodes train",
            self.label,
            server_round,
            len(nodes),
            len(self.book.node_ids),
        )
        record = RecordDict({ARRAYS: arrays, CONFIG: self._train_config(config, server_round)})
        return self._construct_messages(record, nodes, MessageType.TRAIN)

    def _checked_model(self, reply: Message) -> CheckedModel:
        """The reply's model (the run's names and shapes, finite float32) and its sample count."""
        records = exact_records(reply.content, {ARRAYS: ArrayRecord, METRICS: MetricRecord})
        model = record_to_params(records[ARRAYS], self.layout, dtype=np.float32)
        metrics = checked_metrics(records[METRICS], (LOCAL_TRAIN_LOSS, NUM_EXAMPLES))
        return CheckedModel(
            reply,
            model,
            float(checked_count(metrics, NUM_EXAMPLES, example_limit(self.model.task), minimum=1)),
        )

    def aggregate(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, dict[str, float]]:
        """The average of the replies that pass the checks; bad ones are dropped and counted."""
        good = list(self.screen(server_round, replies, self._checked_model).values())
        metrics = {"participants": len(good)}
        if not good:
            return None, metrics  # Flower keeps the previous global model
        arrays, train_metrics = self._average(good, server_round)
        return arrays, {**metrics, **train_metrics}

    def _average(
        self, good: list[CheckedModel], server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Flower's FedAvg aggregation over the checked replies, in node order."""
        return FedAvg.aggregate_train(self, server_round, [c.reply for c in good])

    # -- evaluation -------------------------------------------------------------------------
    @property
    def evaluation_rides(self) -> bool:
        """``eval-with-train``: round t + 1's train message brings the global model of round t."""
        return self.eval_with_train

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The global model to every node: F(x) on the training data, metrics on the test
        shards; nothing when the evaluation rides on the next round's training."""
        if self.defers_evaluation(server_round):
            return []
        config = ConfigRecord({**config, SERVER_ROUND: server_round})
        record = RecordDict({ARRAYS: arrays, CONFIG: config})
        return self._construct_messages(record, self.book.node_ids, MessageType.EVALUATE)


class CheckedFedProx(CheckedFedAvg):
    """Li et al.'s FedProx: FedAvg whose clients add (mu/2)||w - w_global||^2."""

    label = "FedProx"

    def __init__(self, proximal_mu: float, **fedavg) -> None:
        super().__init__(**fedavg)
        self.proximal_mu = proximal_mu

    def summary(self) -> None:
        super().summary()
        log(INFO, "\t└──> FedProx: proximal mu %s", self.proximal_mu)

    def _train_config(self, config: ConfigRecord, server_round: int) -> ConfigRecord:
        config = super()._train_config(config, server_round)
        config[PROXIMAL_MU] = self.proximal_mu
        return config


class ProjectedFedAvg(CheckedFedAvg):
    """FedAvg whose server step projects the sample-weighted mean onto D (``fedfw.*`` keys)."""

    label = "projected FedAvg"

    def __init__(self, domain: ConstraintSet, **fedavg) -> None:
        super().__init__(**fedavg)
        self.domain = domain

    def summary(self) -> None:
        log(
            INFO,
            "\tprojected FedAvg: D = %s ball of radius %s (%s)",
            self.domain.constraint.kind,
            self.domain.constraint.radius,
            self.domain.scope,
        )
        super().summary()

    def _average(
        self, good: list[CheckedModel], server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """proj_D(sum_i n_i x_i / sum_i n_i) in float64."""
        average = projected_average(
            [c.model for c in good],
            [c.weight for c in good],
            self.domain.constraint,
            self.domain.scope,
        )
        metrics = self.train_metrics_aggr_fn([c.reply.content for c in good], self.weighted_by_key)
        return params_to_record(self.layout, average), metrics


def _fedavg_options(settings: RunSettings, model: TorchGlobal, start: ArrayRecord) -> dict:
    return {
        "model": model,
        "start": start,
        "seed": settings.seed,
        "fraction_train": settings.fraction_train,
        "eval_with_train": settings.eval_with_train,
    }


def build_fedavg(settings: RunSettings, task: TaskData) -> CheckedFedAvg:
    model = TorchGlobal(settings, task)
    return CheckedFedAvg(**_fedavg_options(settings, model, ArrayRecord(model.model.state_dict())))


def build_fedprox(settings: RunSettings, task: TaskData) -> CheckedFedProx:
    model = TorchGlobal(settings, task)
    return CheckedFedProx(
        settings.fedprox_mu,
        **_fedavg_options(settings, model, ArrayRecord(model.model.state_dict())),
    )


def build_projected_fedavg(settings: RunSettings, task: TaskData) -> ProjectedFedAvg:
    """Projected FedAvg over D from the ``fedfw.*`` keys; it starts at the init projected onto D."""
    domain = constraint_set(settings)
    model = TorchGlobal(settings, task)
    start = params_to_record(model.layout, model.projected_start(domain))
    return ProjectedFedAvg(domain, **_fedavg_options(settings, model, start))


BUILDERS = {"fedavg": build_fedavg, "fedprox": build_fedprox, PROJECTED: build_projected_fedavg}


def build_fedavg_family(settings: RunSettings, task: TaskData) -> CheckedFedAvg:
    """The strategy of the run's algorithm: FedAvg, FedProx or projected FedAvg."""
    return BUILDERS[settings.algorithm](settings, task)
