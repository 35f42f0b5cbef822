"""FedAvg, FedProx and projected FedAvg: Flower's FedAvg, screened replies, a fixed node order.

Flower's ``FedAvg``, held as a part (``flower``, as Flower's DP wrappers hold the strategy they
wrap), averages the models (its public ``aggregate_train``) and logs its settings; around it
every reply is checked before Flower sees it (a bad one is a counted failure, never an
exception), nodes are sampled with the run's seed in partition order (``strategies.sampling``) so
the same seed picks the same partitions on every engine, and every round ends with a federated
evaluation of the global model on all nodes (``train_loss`` = F(x), as for every algorithm),
which rides on the next round's train messages when every node trains (``eval-with-train``).

FedProx is FedAvg whose train config carries ``proximal-mu`` (all that Flower's ``FedProx`` adds);
it is written as that one key here because the node sampling replaces FedAvg's ``configure_train``.
Projected FedAvg replaces the average by proj_D of the sample-weighted mean (``oracles``).

With ``secure-aggregation`` the round's training is a secure sum (``strategies.secure_sum``):
every node sends its sample count, its model and its training loss each multiplied by that count,
masked, and the server learns only their sums over the nodes, from which it takes the mean
(exact in float64 to the fixed point's resolution, then float32 as every global model).

With ``dp.noise-multiplier`` z > 0, client-level differential privacy (DP-FedAvg, McMahan et al.
2018, as Flower's ``DifferentialPrivacyClientSideFixedClipping``): every node clips its update to
the norm C, the mean of the m models is unweighted, and Gaussian noise of standard deviation
z C / m is added to it: by the server from the run's seed, or with secure aggregation by the
nodes (each N(0, (z C)^2 / n) of the n asked, from the OS's randomness), so the server never
sees the noiseless sum. Flower's Renyi-DP accountant gives the run's epsilon
(``strategies.privacy_budget``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from functions.params import Params, params_to_record, record_to_params
from functions.protocol import (
    ARRAYS,
    CONFIG,
    DP_NOISE_STD,
    EVALUATE_FIRST,
    LOCAL_TRAIN_LOSS,
    METRICS,
    NUM_EXAMPLES,
    PROXIMAL_MU,
    SERVER_ROUND,
)
from functions.secure_sum import SumField
from oracles.douglas_rachford import project_params, projected_average
from run_config.common import NodeDP, RunSettings
from run_config.fedavg import PROJECTED
from run_config.fedfw import ConstraintSet, constraint_set
from strategies.base import flower_options
from strategies.evaluation import checked_count, checked_metrics, example_limit
from strategies.node_book import messages_to
from strategies.privacy_budget import PrivacyBudget, Releases
from strategies.sampling import Sampler
from strategies.screening import exact_records
from strategies.secure_training import SecureTraining
from strategies.torch_model import TorchGlobal, TorchModelStrategy
from tasks.datasets import TaskData

LOSS_BOUND = 1e6  # the largest mean local training loss a node sends into a secure sum
WEIGHT = f"{METRICS}/{NUM_EXAMPLES}"


@dataclass(frozen=True)
class CheckedModel:
    """A train reply that passed the checks: the message, its model and its sample count."""

    reply: Message
    model: Params
    weight: float


class CheckedFedAvg(TorchModelStrategy):
    """McMahan et al.'s FedAvg: sample-weighted average of locally trained models.

    The base's round lifecycle (admission, the seeded sampler, failures); Flower's FedAvg
    (``flower``) gives the averaging and the summary."""

    label = "FedAvg"

    def __init__(
        self,
        model: TorchGlobal,
        start: ArrayRecord,
        seed: int,
        fraction_train: float,
        eval_with_train: bool,
        secure_bound: float | None = None,
        dp: NodeDP | None = None,
        num_rounds: int = 0,
    ) -> None:
        """``secure_bound``: with secure aggregation, the largest |weight| a node may send
        (None: plain replies); ``dp``: client-level differential privacy (None: none)."""
        super().__init__(num_rounds)
        self.flower = FedAvg(
            **flower_options(fraction_train), min_train_nodes=1, min_evaluate_nodes=1
        )
        self.model, self.start = model, start
        self.sampler = Sampler(fraction_train, seed)
        self.eval_with_train = eval_with_train
        self.secure_bound = secure_bound
        if secure_bound is not None:
            self.secure_training = SecureTraining(self.label, seed)
        self.seed, self.dp = seed, dp
        self.budget = None if dp is None else PrivacyBudget(dp.delta, "a node's data")
        self.State = None if dp is None else Releases  # a run with DP continues its budget

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
            config[EVALUATE_FIRST] = True
        return config

    def _noise_shares(self, config: ConfigRecord, nodes: int) -> None:
        """With differential privacy under secure aggregation: the noise each of ``nodes``
        adds, so that their sum carries N(0, (z C)^2)."""
        if self.dp is not None and self.secure_training is not None:
            config[DP_NOISE_STD] = self.dp.noise_multiplier * self.dp.clipping_norm / nodes**0.5

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
        self._noise_shares(record[CONFIG], len(nodes))
        messages = messages_to(record, nodes, MessageType.TRAIN)
        if self.secure_training is None:
            return messages
        self.secure_training.run(
            grid,
            server_round,
            messages,
            self._secure_fields(),
            self.check_evaluation_record,
            "" if self.dp else WEIGHT,
        )
        return []

    def _secure_fields(self) -> list[SumField]:
        """What a node sends into the round's secure sum, each times its sample count (with
        differential privacy, unweighted): its model's tensors, its training loss, and the
        count itself."""
        most = 1 if self.dp is not None else example_limit(self.model.task)
        weights = [
            SumField(ARRAYS, name, int(np.prod(shape, dtype=np.int64)), self.secure_bound * most)
            for name, shape in zip(self.layout.names, self.layout.shapes)
        ]
        return [
            *weights,
            SumField(METRICS, LOCAL_TRAIN_LOSS, 1, LOSS_BOUND * most),
            SumField(METRICS, NUM_EXAMPLES, 1, float(example_limit(self.model.task)), integer=True),
        ]

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
        """The average of the replies that pass the checks; bad ones are dropped and counted.
        With secure aggregation, the mean from the round's secure sum."""
        if self.secure_training is not None:
            return self._secure_aggregate(server_round)
        good = list(self.screen(server_round, replies, self._checked_model).values())
        metrics = {"participants": len(good)}
        if not good:
            return None, metrics  # Flower keeps the previous global model
        if self.dp is not None:
            return self._private_average(good, server_round)
        arrays, train_metrics = self._average(good, server_round)
        return arrays, {**metrics, **train_metrics}

    def _private_average(
        self, good: list[CheckedModel], server_round: int
    ) -> tuple[ArrayRecord, dict[str, float]]:
        """Differential privacy, plain replies: the unweighted mean of the (clipped) models
        with Gaussian noise of standard deviation z C / m from the run's seed, then the
        server's step; the release counted."""
        m = len(good)
        mean = [sum(c.model[k] for c in good) / m for k in range(len(self.layout.names))]
        rng = np.random.default_rng([self.seed, server_round, 7])
        std = self.dp.noise_multiplier * self.dp.clipping_norm / m
        noisy = [a + rng.normal(0.0, std, a.shape) for a in mean]
        loss = float(np.mean([c.reply.content[METRICS][LOCAL_TRAIN_LOSS] for c in good]))
        epsilon = self.budget.release(self.dp.noise_multiplier, m)
        metrics = {"participants": m, LOCAL_TRAIN_LOSS: loss, "dp_epsilon": epsilon}
        return params_to_record(self.layout, self._server_step(noisy)), metrics

    def _average(
        self, good: list[CheckedModel], server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Flower's FedAvg aggregation over the checked replies, in node order."""
        return self.flower.aggregate_train(server_round, [c.reply for c in good])

    def _secure_aggregate(self, server_round: int) -> tuple[ArrayRecord | None, dict[str, float]]:
        """The sample-weighted mean model and training loss from the round's secure sum;
        nothing when there is none (the global model stays; ``Diverged`` when every node
        refused NaN or inf values)."""
        outcome = self.secure_outcome(server_round)
        if outcome is None:
            return None, {"participants": 0}
        sums, m = outcome.sums, len(outcome.contributors)
        weight = float(m if self.dp is not None else sums[WEIGHT][0])
        mean = [
            sums[f"{ARRAYS}/{name}"].reshape(shape) / weight
            for name, shape in zip(self.layout.names, self.layout.shapes)
        ]
        loss = float(sums[f"{METRICS}/{LOCAL_TRAIN_LOSS}"][0]) / weight
        metrics = {"participants": m, LOCAL_TRAIN_LOSS: loss}
        if self.dp is not None:  # the m noise shares of n: z sqrt(m / n) times C
            multiplier = self.dp.noise_multiplier * (m / self.secure_training.asked) ** 0.5
            metrics["dp_epsilon"] = self.budget.release(multiplier, m)
        return params_to_record(self.layout, self._server_step(mean)), metrics

    def _server_step(self, mean: Params) -> Params:
        """What the global model becomes from the nodes' mean: the mean itself."""
        return mean

    # -- differential privacy ---------------------------------------------------------------
    def privacy(self) -> dict[str, Any] | None:
        return None if self.budget is None else self.budget.record()

    def family_state(self) -> Releases | None:
        return None if self.budget is None else self.budget.state()

    def load_family_state(self, state: Releases) -> None:
        self.budget.load(state)

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
        return messages_to(record, self.book.node_ids, MessageType.EVALUATE)

    def summary(self) -> None:
        self.flower.summary()


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
        flower = self.flower
        metrics = flower.train_metrics_aggr_fn(
            [c.reply.content for c in good], flower.weighted_by_key
        )
        return params_to_record(self.layout, average), metrics

    def _server_step(self, mean: Params) -> Params:
        """proj_D of the nodes' mean."""
        return project_params(self.domain.constraint, mean, self.domain.scope)


def _fedavg_options(settings: RunSettings, model: TorchGlobal, start: ArrayRecord) -> dict:
    return {
        "model": model,
        "start": start,
        "seed": settings.seed,
        "fraction_train": settings.fraction_train,
        "eval_with_train": settings.eval_with_train,
        "secure_bound": settings.secure_bound if settings.secure_aggregation else None,
        "dp": settings.node_dp,
        "num_rounds": settings.num_rounds,
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
