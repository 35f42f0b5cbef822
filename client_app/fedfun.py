"""Client half of FedFun (FSR) and its decentralised baselines: a node with its own model.

Before round 0 a node states each feature's range widened to the powers of two just outside it
(``query.bounds``: no row's value), from which the server agrees the domain. A node keeps, in
its Context.state, the agreed domain, its own models by version (the last one the server
accepted and the one it just sent) and its neighbours' latest models with their versions. Each
message lists every neighbour model the node should hold and carries only the changed ones; a
node that lacks one (it lost its state, or missed a message) answers with an error and the
server sends everything next time. Training runs one local step (``oracles.fedfun_local``);
evaluation measures the node's own model and its disagreement with its neighbours.

With ``relay-encryption`` the node seals its new model to the vertices the message names (itself
and its neighbours, with their public sealing keys) and opens the sealed models it receives
(``functions.sealed_relay``) before anything else reads them; the server never holds a model in
the clear.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from client_app.job import ClientJob
from client_app.node_info import describe_node
from client_app.node_state import LostStateError
from client_app.secure_sum import sealing_pair
from functions.errors import DecodeError
from functions.kddt import squared_distance
from functions.networks import NetworkSpec
from functions.node_models import (
    TREE,
    ModelLimits,
    NodeModel,
    decode_node_model,
    encode_node_model,
    reprefixed,
    require_unit_cube,
    torch_function,
)
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import (
    BOUNDS,
    CONFIG,
    CONSENSUS,
    EVALUATE,
    EVALUATE_FIRST,
    EVALUATION,
    INITIAL,
    LOCAL_ACCURACY,
    LOSS,
    METRICS,
    MODEL_ARRAYS,
    MODELS,
    NEIGHBOUR_COUNT,
    NEIGHBOURS,
    OWN_PREFIX,
    QUERY_BOUNDS,
    QUERY_NODE,
    RELAY_KEYS,
    REPLY_PREFIX,
    SERVER_ROUND,
    SETUP,
    TEST_ACCURACY,
    TRAIN,
    TRAIN_ACCURACY,
    TRAIN_EXAMPLES,
    neighbour_prefix,
)
from functions.sealed_relay import BOX, open_model, seal_model
from oracles.domain import UnitCube
from oracles.fedfun_local import (
    FSR,
    MIXING,
    LocalProblem,
    StepSettings,
    baseline_step,
    fsr_network_step,
    fsr_tree_step,
    initial_model,
    mixed_model,
)
from oracles.fsr_network import monte_carlo_distance, penalty_weights
from run_config.fedfun import FedFunSettings, max_leaves, model_limits
from tasks.site_facts import outside

Job = ClientJob[FedFunSettings, tuple[str, tuple[int, ...]]]  # overrides: learner, widths

DOMAIN, DOMAIN_BOX = "fedfun.domain", "fedfun.domain-box"  # {samples}, {lower, upper}
OWN = "fedfun.own"  # {versions}: the versions of the own models held
NBR, NBR_MODELS, NBR_ARRAYS = "fedfun.nbr", "fedfun.nbr-models", "fedfun.nbr-arrays"
CONSENSUS_SAMPLES = 4096  # uniform points of the Monte-Carlo distance to a network neighbour


def _own_key(version: int) -> tuple[str, str]:
    return f"fedfun.own-{version}.config", f"fedfun.own-{version}.arrays"


def _domain(job: Job, fedfun: FedFunSettings) -> tuple[UnitCube, int]:
    """The agreed box (from the message on first contact, else from the state) as the map to the
    unit cube, and the total number of training samples."""
    content, state = job.content, job.state
    if SETUP in content:
        state[DOMAIN] = ConfigRecord({"samples": int(content[SETUP][TRAIN_EXAMPLES])})
        state[DOMAIN_BOX] = content[BOUNDS]
    if DOMAIN not in state:
        raise LostStateError("no domain on this node; the server will resend it")
    box = record_to_arrays(state[DOMAIN_BOX])
    return UnitCube(box["lower"], box["upper"], fedfun.delta), int(state[DOMAIN]["samples"])


def _own_model(job: Job, limits: ModelLimits) -> NodeModel | None:
    """The node's model of the version the server accepted last (None before round 0's)."""
    version = int(job.content[CONFIG]["own-version"])
    if version < 0:
        return None
    models = job.content[MODELS]
    if OWN_PREFIX + "kind" in models:  # re-sent after a loss: hold it again
        own = decode_node_model(
            dict(models), record_to_arrays(job.content[MODEL_ARRAYS]), OWN_PREFIX, limits
        )
        _store_own(job, own, version)
        return own
    config_key, arrays_key = _own_key(version)
    if config_key not in job.state:
        raise LostStateError(f"this node does not hold its own model of round {version}")
    return decode_node_model(
        dict(job.state[config_key]), record_to_arrays(job.state[arrays_key]), "", limits
    )


def _keep_own(job: Job, keep: list[int]) -> None:
    """Drop every own model but the versions in ``keep``."""
    held = [] if OWN not in job.state else list(job.state[OWN]["versions"])
    for version in held:
        if version not in keep:
            for key in _own_key(version):
                del job.state[key]
    job.state[OWN] = ConfigRecord({"versions": [v for v in held if v in keep]})


def _store_own(job: Job, model: NodeModel, version: int) -> None:
    config, arrays = encode_node_model(model, "")
    config_key, arrays_key = _own_key(version)
    job.state[config_key], job.state[arrays_key] = ConfigRecord(config), arrays_to_record(arrays)
    held = list(job.state[OWN]["versions"]) if OWN in job.state else []
    job.state[OWN] = ConfigRecord({"versions": sorted(set(held) | {version})})


def _open_sealed(job: Job, limits: ModelLimits) -> None:
    """The message's sealed models opened in place, under their prefixes, for the code that
    reads plain ones (which validates them)."""
    config = dict(job.content[MODELS])
    arrays = record_to_arrays(job.content[MODEL_ARRAYS])
    prefixes = sorted({k[: -len(BOX)] for k in config if k.endswith(BOX)})
    if not prefixes:
        return
    private, _ = sealing_pair(job.state)
    for prefix in prefixes:
        sealed, _ = reprefixed(config, {}, prefix, "")
        opened = open_model(sealed, job.data.partition_id, private, limits.max_bytes)
        config = {k: v for k, v in config.items() if not k.startswith(prefix)}
        c, a = reprefixed(*opened, REPLY_PREFIX, prefix)
        config.update(c)
        arrays.update(a)
    job.content[MODELS], job.content[MODEL_ARRAYS] = ConfigRecord(config), arrays_to_record(arrays)


def _sealed(job: Job, config: dict, arrays: dict) -> dict:
    """The node's new model (keys under ``REPLY_PREFIX``) sealed to the vertices the message
    names, itself among them, under the same prefix."""
    keys = job.content[RELAY_KEYS]
    vertices, publics = keys.get("vertices"), keys.get("keys")
    if (
        not isinstance(vertices, list)
        or not isinstance(publics, list)
        or len(vertices) != len(publics)
        or job.data.partition_id not in vertices
    ):
        raise DecodeError(f"{RELAY_KEYS}: the vertices to seal to, this node's among them")
    private, public = sealing_pair(job.state)
    sealed = seal_model(config, arrays, private, public, dict(zip(vertices, publics)))
    return {REPLY_PREFIX + k: v for k, v in sealed.items()}


def _neighbours(job: Job, limits: ModelLimits) -> dict[int, NodeModel]:
    """Every listed neighbour's model: sent now, or held from before at the listed version."""
    listing, state = job.content[NEIGHBOURS], job.state
    sent_config = dict(job.content[MODELS])
    sent_arrays = record_to_arrays(job.content[MODEL_ARRAYS])
    held = {} if NBR not in state else dict(zip(state[NBR]["ids"], state[NBR]["versions"]))
    held_config = dict(state[NBR_MODELS]) if NBR_MODELS in state else {}
    held_arrays = record_to_arrays(state[NBR_ARRAYS]) if NBR_ARRAYS in state else {}
    config, arrays, models = {}, {}, {}
    for vertex, version in zip(listing["ids"], listing["versions"]):
        prefix = neighbour_prefix(vertex)
        if prefix + "kind" in sent_config:
            source = sent_config, sent_arrays
        elif held.get(vertex) == version:
            source = held_config, held_arrays
        else:
            raise LostStateError(f"the model of neighbour {vertex} (round {version}) is not held")
        c, a = reprefixed(*source, prefix, prefix)
        models[vertex] = require_unit_cube(decode_node_model(c, a, prefix, limits))
        config.update(c)
        arrays.update(a)
    state[NBR] = ConfigRecord({"ids": list(listing["ids"]), "versions": list(listing["versions"])})
    state[NBR_MODELS], state[NBR_ARRAYS] = ConfigRecord(config), arrays_to_record(arrays)
    return models


def _problem(job: Job, cube: UnitCube) -> LocalProblem:
    data = job.data
    x = cube(data.x_train.reshape(len(data.x_train), -1))
    return LocalProblem(x, np.asarray(data.y_train), data.task.num_outputs, cube.radius, job.device)


def _step_settings(fedfun: FedFunSettings, job: Job, samples: int, initial: bool) -> StepSettings:
    config = job.content[CONFIG]
    w_own, w_nbr = penalty_weights(
        fedfun.step, float(config["gamma"]), fedfun.lam, int(config["degree"])
    )
    server_round = int(config[SERVER_ROUND])
    seed = int(
        np.random.SeedSequence(
            [job.settings.seed, job.data.partition_id, server_round]
        ).generate_state(1)[0]
    )
    return StepSettings(
        algorithm=fedfun.algorithm,
        steps=fedfun.round_zero_steps() if initial else fedfun.local_steps,
        batch_size=fedfun.batch_size,
        lr=fedfun.lr,
        seed=seed,
        penalty_samples=fedfun.penalty_samples,
        w_own=w_own,
        w_nbr=w_nbr,
        max_leaves=max_leaves(fedfun, samples),
        psr_lambda=fedfun.psr_lambda,
        momentum_lr=fedfun.momentum_lr,
        momentum=fedfun.momentum,
        distill_steps=fedfun.distill_steps,
        distill_samples=fedfun.distill_samples,
    )


def train(job: Job) -> RecordDict:
    """Round 0: fit h_i^0 on local data; later rounds: one step of the run's algorithm. When
    the server asks (``evaluate-first``), the figures of the node's model of the last round
    too (``evaluate``'s), computed before the step."""
    fedfun = job.family
    limits = model_limits(fedfun, job.data.task)
    cube, samples = _domain(job, fedfun)
    _open_sealed(job, limits)
    own = _own_model(job, limits)
    neighbours = _neighbours(job, limits)
    config = job.content[CONFIG]
    evaluation = _figures(job, cube, own, neighbours) if EVALUATE_FIRST in config else None
    initial = bool(config[INITIAL]) or own is None
    s = _step_settings(fedfun, job, samples, initial)
    problem = _problem(job, cube)
    learner, hidden = job.overrides  # the run's, or this node's own (FSR)
    if initial:
        spec = NetworkSpec((problem.x.shape[1], *hidden, problem.n_outputs))
        model = initial_model(learner, spec, problem, s)
    elif fedfun.algorithm != FSR:
        model = baseline_step(own, list(neighbours.values()), problem, s)
    elif own.kind == TREE:
        model = fsr_tree_step(own, list(neighbours.values()), problem, s)
    else:
        model = fsr_network_step(own, list(neighbours.values()), problem, s)
    version = int(config[SERVER_ROUND])
    _keep_own(job, [int(config["own-version"])])
    _store_own(job, model, version)
    reply_config, reply_arrays = encode_node_model(model, REPLY_PREFIX)
    if job.settings.relay_encryption:
        reply_config, reply_arrays = _sealed(job, reply_config, reply_arrays), {}
    loss = _squared_error(model, problem)
    reply = RecordDict(
        {
            MODELS: ConfigRecord(reply_config),
            MODEL_ARRAYS: arrays_to_record(reply_arrays),
            METRICS: MetricRecord({LOSS: loss, TRAIN_EXAMPLES: len(problem.x)}),
        }
    )
    if evaluation is not None:
        reply[EVALUATION] = evaluation
    return reply


def _squared_error(model: NodeModel, problem: LocalProblem) -> float:
    """Mean squared error of the model's outputs against one-hot labels on local data."""
    return float(np.mean((model.predict(problem.x) - problem.one_hot()) ** 2))


def _accuracy(model: NodeModel, cube: UnitCube, x: np.ndarray, y: np.ndarray) -> float:
    predicted = model.predict(cube(x.reshape(len(x), -1))).argmax(axis=1)
    return float(np.mean(predicted == np.asarray(y)))


def _distance(a: NodeModel, b: NodeModel, n_features: int, seed: int) -> float:
    """||a - b||^2 over the unit cube: exact between trees, Monte-Carlo otherwise."""
    if a.kind == TREE and b.kind == TREE:
        return squared_distance(a.function, b.function)
    cpu = torch.device("cpu")
    return monte_carlo_distance(
        torch_function(a, cpu),
        torch_function(b, cpu),
        n_features,
        CONSENSUS_SAMPLES,
        torch.Generator().manual_seed(seed),
    )


def evaluate(job: Job) -> RecordDict:
    """The node's model on the test set and on the union of the training sets (the paper's
    section 6 metrics; bundled data make both available on every node) and on its own
    partition, and its squared distance to each neighbour's (``_figures``)."""
    limits = model_limits(job.family, job.data.task)
    cube, _ = _domain(job, job.family)
    _open_sealed(job, limits)
    figures = _figures(job, cube, _own_model(job, limits), _neighbours(job, limits))
    return RecordDict({METRICS: figures})


def _figures(
    job: Job, cube: UnitCube, own: NodeModel | None, neighbours: dict[int, NodeModel]
) -> MetricRecord:
    """``evaluate``'s figures of ``own`` with ``neighbours``. The node's model is its trained
    one, or for the mixing baselines the mix with its neighbours' (``mixed_model``)."""
    if own is None:
        raise LostStateError("this node has no model yet")
    fedfun, data, task = job.family, job.data, job.data.task
    n_features = model_limits(fedfun, task).n_features
    seed = int(np.random.SeedSequence([job.settings.seed, data.partition_id]).generate_state(1)[0])
    distances = [_distance(own, m, n_features, seed) for m in neighbours.values()]
    model = (
        mixed_model(fedfun.algorithm, own, list(neighbours.values()))
        if fedfun.algorithm in MIXING
        else own
    )
    return MetricRecord(
        {
            TEST_ACCURACY: _accuracy(model, cube, task.x_test, task.y_test),
            TRAIN_ACCURACY: _accuracy(model, cube, task.x_train, task.y_train),
            LOCAL_ACCURACY: _accuracy(model, cube, data.x_train, data.y_train),
            CONSENSUS: float(sum(distances)),
            NEIGHBOUR_COUNT: len(distances),
        }
    )


def bounds(job: Job) -> RecordDict:
    """``query.bounds``: each feature's range over this node's training rows, widened to the
    powers of two just outside it (``tasks.site_facts.outside``: no end is a row's value), and
    its number of samples."""
    x = job.data.x_train.reshape(len(job.data.x_train), -1).astype(np.float64)
    ends = np.array(
        [outside(float(low), float(high)) for low, high in zip(x.min(axis=0), x.max(axis=0))]
    )
    return RecordDict(
        {
            BOUNDS: arrays_to_record({"lower": ends[:, 0], "upper": ends[:, 1]}),
            METRICS: MetricRecord({TRAIN_EXAMPLES: len(x)}),
        }
    )


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node, QUERY_BOUNDS: bounds}
