"""Client half of FFGB, FFGB.C and FFGB.L (Algorithms 2, 5, 4 of the FFGB paper).

A node never holds the global ensemble: it keeps f's values on its own training points and test
shard, at a version, and applies each delta the server sends (only the learners it lacks;
``functions.ensembles``). It also keeps, until the next delta, the values of its own last
learners: the server does not send a node back what it sent (the paper's (N - 1) K down), but
says how they entered the average (``own_count``, ``own_factor``). A delta the node cannot apply
(it lost its state, or missed a message) is an error reply; the server then sends everything.
With ``relay-encryption`` the node opens the learners it receives and seals those it sends under
the run's group key (``client_app.group_key``, ``functions.learner_sealing``).
"""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from client_app.evaluation import sums_record
from client_app.ffgb_l_fits import fits_key, kept_fits
from client_app.group_key import message_key
from client_app.job import ClientJob
from client_app.node_info import describe_node
from client_app.node_state import LostStateError
from functions.acceptance import last_accepted
from functions.ensembles import (
    Delta,
    PredictionCache,
    lone_learner,
    pack_delta,
    read_lone_learner,
    unpack_delta,
    weighted_sum,
)
from functions.errors import DecodeError
from functions.learner_sealing import open_learners, seal_learners
from functions.learners import learner_spec
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import (
    CONFIG,
    DELTA,
    DELTA_ARRAYS,
    DISTILL_ERROR,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    METRICS,
    ORACLE_ERROR,
    QUERY_NODE,
    SERVER_ROUND,
    STUDENT,
    STUDENT_ARRAYS,
    TRAIN,
    TRAIN_EXAMPLES,
)
from oracles.boosting import Fitted, Increment, LipschitzFit, ffgb_increment, ffgb_l_increment
from oracles.boosting_model import BoostingModel
from oracles.distillation import NONE, distill_increment
from oracles.lipschitz import LipschitzExtension, data_lipschitz_constant
from oracles.weak_learning import (
    NEWTON,
    boosting_oracle,
    clip_learner,
    fit_seed,
    lipschitz_oracle,
    new_network,
    newton_leaf_step,
    train_least_squares,
)
from run_config.ffgb import DISTILL, FFGBSettings
from tasks.federation import LocalData

Job = ClientJob[FFGBSettings, None]

CACHE, VALUES = "ffgb.cache", "ffgb.values"  # {version}, {train, test}: f on this node's data
OWN, OWN_VALUES = "ffgb.own", "ffgb.own-values"  # {round, count}, {train, test}: own learners


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(len(x), -1)


def _read_delta(job: Job, model: BoostingModel) -> Delta:
    """The message's delta; with relay encryption its learners opened under the group key and
    checked as the server checks a plain reply's."""
    config, arrays = job.content[DELTA], job.content[DELTA_ARRAYS]
    delta = unpack_delta(dict(config), record_to_arrays(arrays), model.limits)
    if not job.family.relay_encryption:
        return delta
    return open_learners(
        delta, message_key(job.content, job.state), model.limits, model.check_learner
    )


def _own_values(job: Job, delta: Delta) -> dict[str, np.ndarray] | None:
    """This node's pending own contribution, if the delta includes it."""
    if delta.own_count == 0:
        return None
    own = job.state.get(OWN)
    accepted = last_accepted(job.content[CONFIG])
    if own is None or own["round"] != accepted or own["count"] != delta.own_count:
        raise LostStateError(
            f"the delta includes {delta.own_count} learners of this node from "
            f"round {accepted}, which it does not hold"
        )
    return {k: v.numpy() for k, v in job.state[OWN_VALUES].items()}


def current_values(job: Job, model: BoostingModel) -> tuple[int, dict[str, np.ndarray]]:
    """Apply the message's delta to the node's values of f; return the version and the values
    on ``train`` and ``test`` (float64, (n, outputs))."""
    delta = _read_delta(job, model)
    data, state = job.data, job.state
    points = {"train": _flat(data.x_train), "test": _flat(data.x_test)}
    own = _own_values(job, delta)
    if delta.full:
        version, values = 0, {name: None for name in points}
    elif CACHE not in state:
        raise LostStateError("no FFGB values on this node; the server will send everything")
    else:
        version = int(state[CACHE]["version"])
        values = {name: array.numpy() for name, array in state[VALUES].items()}
    updated = {}
    for name, x in points.items():
        cache = PredictionCache(x, version, values[name], job.device)
        updated[name] = cache.update(delta, None if own is None else own[name])
    for key in (OWN, OWN_VALUES):  # included now, or not accepted
        if key in state:
            del state[key]
    state[CACHE] = ConfigRecord({"version": delta.version})
    state[VALUES] = arrays_to_record(updated)
    return delta.version, updated


def _seed_of(ffgb: FFGBSettings, job: Job, t: int):
    def seed_of(k: int) -> int:
        # FFGB.L's oracle calls do not depend on t (Remark 3.1): the same learners every round
        return fit_seed(
            job.settings.seed, 0 if ffgb.variant == "ffgb-l" else t, job.data.partition_id, k
        )

    return seed_of


def _increment(ffgb: FFGBSettings, model: BoostingModel, job: Job, f_train: np.ndarray, t: int):
    """This node's K local steps of boosting round t (0-based) from f^t's values on its points."""
    data, spec, loss = job.data, model.spec, model.loss
    etas = ffgb.steps.etas(t)
    seed_of = _seed_of(ffgb, job, t)
    if ffgb.variant == "ffgb-l":
        return _ffgb_l_increment(ffgb, model, job, etas, seed_of)
    fit = boosting_oracle(
        spec,
        data.x_train,
        ffgb.oracle,
        ffgb.variant == "ffgb-c",
        ffgb.tree_depth,
        seed_of,
        job.device,
        ffgb.tree_fitter,
    )
    leaf_step = newton_leaf_step(data.x_train, loss) if ffgb.tree_leaves == NEWTON else None
    return ffgb_increment(
        f_train,
        data.y_train,
        loss,
        etas,
        ffgb.mu,
        fit,
        ffgb.residual,
        model.clipping,
        clip_learner,
        leaf_step,
    )


def _ffgb_l_increment(
    ffgb: FFGBSettings, model: BoostingModel, job: Job, etas: list[float], seed_of
) -> Increment:
    """Algorithm 4's K local steps, with the K fits of the node's first round kept in its state
    (``client_app.ffgb_l_fits``: they are the same every round)."""
    data, spec = job.data, model.spec
    targets = model.loss.targets(data.y_train)
    x = _flat(data.x_train)

    def oracle() -> LipschitzFit:
        lipschitz = ffgb.lipschitz or data_lipschitz_constant(data.x_train, targets)
        extension = LipschitzExtension.of(data.x_train, targets, lipschitz, ffgb.extension)
        return lipschitz_oracle(spec, data.x_train, extension, ffgb.oracle, seed_of, job.device)

    settings = (seed_of(0), len(etas), ffgb.residual, ffgb.lipschitz, ffgb.extension)
    key = fits_key([x, targets], (*settings, ffgb.oracle, spec, str(job.device)))
    shape = (len(x), x.shape[1], targets.shape[1])
    fit = kept_fits(job.state, key, len(etas), shape, model.limits, oracle)
    return ffgb_l_increment(targets, etas, fit, ffgb.residual)


def _distiller(ffgb: FFGBSettings, model: BoostingModel, job: Job, t: int):
    """WO2 for one more learner (a tree in tree runs), clipped to G2 with FFGB.C."""
    clipping = model.clipping
    seed = _seed_of(ffgb, job, t)(ffgb.local_steps + 1)
    fit = boosting_oracle(
        model.spec,
        job.data.x_train,
        ffgb.oracle,
        False,
        ffgb.tree_depth,
        lambda k: seed,
        job.device,
        ffgb.tree_fitter,
    )

    def fit_one(target: np.ndarray) -> Fitted:
        fitted = fit(target, 0)
        if clipping is None:
            return fitted
        bound = clipping.learner_bound
        return Fitted(clip_learner(fitted.learner, bound), np.clip(fitted.values, -bound, bound))

    return fit_one


def _train_student(
    job: Job, ffgb: FFGBSettings, model: BoostingModel, f_train: np.ndarray
) -> RecordDict:
    """One FedAvg round of a global distillation: train the server's student towards f^t on
    this node's points; reply with it and the number of points (FedAvg's weight)."""
    data, spec = job.data, model.spec
    received = read_lone_learner(
        unpack_delta(
            dict(job.content[STUDENT]),
            record_to_arrays(job.content[STUDENT_ARRAYS]),
            model.limits,
        )
    )
    if learner_spec(received) != spec:
        raise DecodeError(f"the student is not the run's {spec}")
    student = new_network(spec, 0)
    student.load_state_dict(received.state_dict())
    seed = fit_seed(job.settings.seed, int(job.content[CONFIG][SERVER_ROUND]), data.partition_id, 0)
    fitted = train_least_squares(
        student,
        spec,
        _flat(data.x_train),
        f_train,
        ffgb.student_training(),
        seed,
        device=job.device,
    )
    error = float(np.sqrt(np.mean((f_train - fitted.values) ** 2)))
    config, arrays = pack_delta(lone_learner(student, spec.n_features, data.task.num_outputs))
    return RecordDict(
        {
            STUDENT: ConfigRecord(config),
            STUDENT_ARRAYS: arrays_to_record(arrays),
            METRICS: MetricRecord({TRAIN_EXAMPLES: len(data.y_train), DISTILL_ERROR: error}),
        }
    )


def train(job: Job) -> RecordDict:
    """K local boosting steps from f^t; reply with the K learners (or their distillation),
    their weights and the scale. In a distillation round: train the student instead. When the
    server asks (``evaluate-first``), f^t's evaluation sums too, computed before training."""
    model = job.family.model(job.data.task)
    version, values = current_values(job, model)
    evaluation = None
    if EVALUATE_FIRST in job.content[CONFIG]:
        evaluation = evaluation_sums(model, job.data, values)
    reply = _train(job, model, version, values)
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def _train(job: Job, model: BoostingModel, version: int, values: dict[str, np.ndarray]):
    """The train reply from f^t's ``values`` on this node's data, at ``version``."""
    ffgb, data = job.family, job.data
    server_round = int(job.content[CONFIG][SERVER_ROUND])
    phase, t = ffgb.phase(server_round)
    if phase == DISTILL:
        return _train_student(job, ffgb, model, values["train"])
    increment = _increment(ffgb, model, job, values["train"], t)
    metrics = {ORACLE_ERROR: increment.oracle_error}
    if ffgb.distill != NONE:
        increment, metrics[DISTILL_ERROR] = distill_increment(
            increment, values["train"], ffgb.distill, _distiller(ffgb, model, job, t)
        )
    own_test = weighted_sum(
        increment.learners,
        increment.weights,
        _flat(data.x_test),
        data.task.num_outputs,
        device=job.device,
    )
    job.state[OWN] = ConfigRecord({"round": server_round, "count": len(increment.learners)})
    job.state[OWN_VALUES] = arrays_to_record({"train": increment.own_values, "test": own_test})
    reply = Delta(
        version,
        increment.scale,
        tuple(increment.learners),
        tuple(increment.weights),
        int(_flat(data.x_train).shape[1]),
        data.task.num_outputs,
    )
    if ffgb.relay_encryption:
        reply = seal_learners(reply, message_key(job.content, job.state))
    config, arrays = pack_delta(reply)
    return RecordDict(
        {
            DELTA: ConfigRecord(config),
            DELTA_ARRAYS: arrays_to_record(arrays),
            METRICS: MetricRecord(metrics),
        }
    )


def evaluation_sums(
    model: BoostingModel, data: LocalData, values: dict[str, np.ndarray]
) -> MetricRecord:
    """Loss sums and counts of f (clipped to B for FFGB.C) on the node's test shard and data."""
    loss, bound = model.loss, model.final_bound
    if bound is not None:
        values = {k: np.clip(v, -bound, bound) for k, v in values.items()}
    test_loss, correct = loss.sums(values["test"], data.y_test)
    train_loss, _ = loss.sums(values["train"], data.y_train)
    return sums_record(data, test_loss, train_loss, correct)


def evaluate(job: Job) -> RecordDict:
    """Apply the round's delta, then report f's loss sums on this node's data."""
    model = job.family.model(job.data.task)
    _, values = current_values(job, model)
    return RecordDict({METRICS: evaluation_sums(model, job.data, values)})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node}
