"""Deep Leakage from Gradients (Zhu, Liu, Han, NeurIPS 2019) against what one node of each family
sends about its one training example, from the server's seat.

The server holds the message and what the run tells it (the global model, the step size, the
constraint set, the seeds); it optimises a dummy image and a soft label (softmax of free logits)
with L-BFGS so that the message they would produce matches the one it received. The messages are
made by the project's own code (``observe_*``); each ``*_match`` is a differentiable loss that is
zero when the dummy reproduces its message:

- FedAvg: one SGD step's update is -lr * gradient, so the server has the gradient; the loss is
  DLG's squared distance between gradients.
- FedFW, l2 ball per tensor: s = -r g / ||g|| reveals each tensor's gradient direction; the loss
  is one minus their cosine.
- FedFW, l1 ball per tensor: s = -r sign(g_j) e_j at j = argmax |g| reveals one index and sign per
  tensor. The argmax is piecewise constant in the dummy (its derivative is zero wherever it
  exists), so the loss relaxes it: the cross-entropy at j of a softmax of |g| over its root mean
  square (the LMO ignores the gradient's scale), plus a logistic loss on the sign of g_j; it is
  small exactly where j wins by a margin with the revealed sign.
- FedFW, box (the project's default set): s = -r sign(g) reveals every coordinate's sign, a zero
  reading as negative; the loss is a logistic loss on each coordinate's sign, the gradient over
  its root mean square.
- FFGB: the weak learner fitted by Adam to the example's functional gradient from a seeded start
  the server can rebuild; the loss unrolls the same Adam steps on the dummy, differentiably, and
  compares the learner's weights.

Some messages also show the zero pixels directly (``*_zero_inputs``): with one example a
first-layer column's gradient is (its unit's error) x (the pixel), zero exactly where the pixel is.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from functions.extreme_points import decode_model_point, encode_model_point
from functions.networks import NetworkSpec
from oracles.boosting import ffgb_increment
from oracles.frank_wolfe import FWClientState, fedfw_client_step
from oracles.functional_losses import PointwiseLoss
from oracles.lmo import Constraint
from oracles.local_sgd import SGDConfig, train_sgd
from oracles.mlp_least_squares import BETAS, EPS
from oracles.schedules import FWSchedule
from oracles.torch_grad import loss_and_grad
from oracles.weak_learning import OracleSettings, boosting_oracle, new_network

Params = list[torch.Tensor]
Match = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (image, label logits) -> loss
DTYPE = torch.float64  # the attack's arithmetic (the messages are float32 on the wire)
SHARPNESS = 3.0  # slope of the l1 and box relaxations on RMS-normalised gradients
CLASSIFICATION = "classification"


@dataclass(frozen=True)
class Example:
    """The node's one training example: an image in [0, 1] (with its batch axis) and its class."""

    x: np.ndarray  # (1, *shape) float32
    label: int


def psnr(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of ``estimate`` clipped to [0, 1] against ``truth``."""
    mse = float(np.mean((np.clip(estimate, 0.0, 1.0) - truth) ** 2))
    return 10.0 * math.log10(1.0 / max(mse, 1e-12))


def _numpy(model: nn.Module) -> list[np.ndarray]:
    return [p.detach().cpu().numpy().astype(np.float64) for p in model.parameters()]


# -- what the server receives, made by the project's code -----------------------------------
def observe_fedavg(model: nn.Module, example: Example, lr: float, seed: int) -> list[np.ndarray]:
    """FedAvg's reply after one SGD step on the example (``oracles.local_sgd``), as the server
    reads it: (w - w') / lr from the global weights w it sent and the weights w' it received."""
    local = copy.deepcopy(model)
    config = SGDConfig(epochs=1, batch_size=1, learning_rate=lr)
    train_sgd(local, example.x, np.array([example.label]), CLASSIFICATION, config, seed)
    return [(w - w_new) / lr for w, w_new in zip(_numpy(model), _numpy(local))]


def observe_fedfw(
    model: nn.Module,
    example: Example,
    constraint: Constraint,
    scope: str,
    schedule: FWSchedule,
    num_clients: int,
) -> list[np.ndarray]:
    """The extreme point a FedFW node sends in round 1 (its iterate is x-bar, so the LMO's input
    is its gradient over n), encoded for the wire and decoded as the server decodes it."""
    x_bar = _numpy(model)
    _, grad = loss_and_grad(model, x_bar, example.x, np.array([example.label]), CLASSIFICATION)
    state = FWClientState(x=x_bar)
    s, _ = fedfw_client_step(
        "fedfw", state, x_bar, grad, 1, schedule, num_clients, constraint, scope
    )
    wire = encode_model_point(constraint, s, scope)
    return decode_model_point(constraint, wire, [a.shape for a in x_bar], scope)


@dataclass(frozen=True)
class LearnerMessage:
    """FFGB's first weak learner of round 1 as the server receives it, and what the server can
    rebuild: the learners' spec, the seeded initial weights and the fit's Adam settings."""

    spec: NetworkSpec
    initial: list[np.ndarray]
    learner: list[np.ndarray]
    oracle: OracleSettings


def observe_ffgb(
    spec: NetworkSpec,
    example: Example,
    classes: int,
    oracle: OracleSettings,
    etas: Sequence[float],
    seed_of: Callable[[int], int],
) -> LearnerMessage:
    """A node's round-1 increment (``ffgb_increment`` with the WO2 oracle, from f = 0) on the
    example; its first learner, and the initial weights ``seed_of(1)`` gives that learner."""
    fit = boosting_oracle(spec, example.x, oracle, False, 1, seed_of)
    increment = ffgb_increment(
        np.zeros((1, classes)),
        np.array([example.label]),
        PointwiseLoss("cross-entropy", classes),
        etas,
        0.0,
        fit,
    )
    initial = new_network(spec, seed_of(1))
    return LearnerMessage(spec, _numpy(initial), _numpy(increment.learners[0]), oracle)


def learner_zero_inputs(message: LearnerMessage) -> np.ndarray:
    """The inputs whose first-layer weights the fit left exactly as initialised: with one
    example, the zero pixels (their weights' gradient is zero at every Adam step)."""
    return np.all(message.learner[0] == message.initial[0], axis=0)


def box_zero_inputs(points: Sequence[np.ndarray]) -> np.ndarray:
    """The inputs whose first-layer column of a box point is +r in every row, i.e. a gradient
    read as negative or zero for every unit: a zero pixel (or all units' errors <= 0)."""
    first = np.asarray(points[0]).reshape(len(points[0]), -1)
    return np.all(first > 0, axis=0)


# -- the dummy's side -----------------------------------------------------------------------
def tensors(arrays: Sequence[np.ndarray]) -> Params:
    """The arrays as float64 tensors (the attack's dtype)."""
    return [torch.as_tensor(np.asarray(a), dtype=DTYPE) for a in arrays]


def _soft_cross_entropy(logits: torch.Tensor, label_logits: torch.Tensor) -> torch.Tensor:
    """DLG's loss: cross-entropy of the outputs against the soft label softmax(label_logits)."""
    return -(F.softmax(label_logits, -1) * F.log_softmax(logits, -1)).sum(-1).mean()


def dummy_gradient(model: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], Params]:
    """(image, label logits) -> the loss gradient at the model's weights, differentiable in both
    (DLG's double backward)."""
    network = copy.deepcopy(model).to(DTYPE)
    names = [name for name, _ in network.named_parameters()]
    weights = [p.detach().requires_grad_(True) for p in network.parameters()]

    def gradient(x: torch.Tensor, label_logits: torch.Tensor) -> Params:
        logits = functional_call(network, dict(zip(names, weights)), (x,))
        loss = _soft_cross_entropy(logits, label_logits)
        return list(torch.autograd.grad(loss, weights, create_graph=True))

    return gradient


def torch_lmo(constraint: Constraint, g: torch.Tensor) -> torch.Tensor:
    """``Constraint.lmo`` for l1, l2 and box in torch, with its ties and zeros: the point the
    dummy's gradient would make a node send."""
    r, flat = constraint.radius, g.reshape(-1)
    if constraint.kind == "box":
        return torch.where(flat > 0, flat.new_tensor(-r), flat.new_tensor(r)).reshape(g.shape)
    out = torch.zeros_like(flat)
    if constraint.kind == "l2" and bool(flat.any()):
        out = -r * flat / flat.norm()
    elif constraint.kind in ("l1", "l2"):
        j = int(torch.argmax(flat.abs()))
        out[j] = -r if flat[j] > 0 else r
    else:
        raise ValueError(f"no torch LMO for {constraint.kind!r}")
    return out.reshape(g.shape)


def reproduces(
    model: nn.Module,
    constraint: Constraint,
    points: Sequence[np.ndarray],
    image: np.ndarray,
    label_logits: np.ndarray,
) -> bool:
    """Whether the dummy makes exactly the received point (l1, box: every index and sign)."""
    gradient = dummy_gradient(model)(*tensors([image, label_logits]))
    return all(
        torch.equal(torch_lmo(constraint, g.detach()), s) for g, s in zip(gradient, tensors(points))
    )


def gradient_match(model: nn.Module, observed: Sequence[np.ndarray]) -> Match:
    """DLG: the squared distance between the dummy's gradient and the observed one."""
    gradient, target = dummy_gradient(model), tensors(observed)
    return lambda x, y: sum(((g - t) ** 2).sum() for g, t in zip(gradient(x, y), target))


def l2_match(model: nn.Module, points: Sequence[np.ndarray]) -> Match:
    """Per tensor, one minus the cosine of the dummy's gradient and the received -s."""
    gradient, target = dummy_gradient(model), tensors(points)
    return lambda x, y: sum(
        1.0 - F.cosine_similarity(g.reshape(1, -1), -s.reshape(1, -1)).squeeze()
        for g, s in zip(gradient(x, y), target)
    )


def _normalised(g: torch.Tensor) -> torch.Tensor:
    """SHARPNESS * g over its root mean square (the LMOs ignore the gradient's scale)."""
    return SHARPNESS * g.reshape(-1) / g.pow(2).mean().sqrt().clamp_min(1e-30)


def l1_match(model: nn.Module, points: Sequence[np.ndarray]) -> Match:
    """Per tensor: the cross-entropy at the revealed index of a softmax of the normalised |g|,
    plus a logistic loss on the sign of g there (the LMO puts -sign(g_j) r at j)."""
    gradient = dummy_gradient(model)
    revealed = []
    for point in points:
        flat = np.asarray(point).ravel()
        j = int(np.flatnonzero(flat)[0])
        revealed.append((j, -float(np.sign(flat[j]))))

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = x.new_zeros(())
        for g, (j, sign) in zip(gradient(x, y), revealed):
            scaled = _normalised(g)
            total = total - F.log_softmax(scaled.abs(), 0)[j] + F.softplus(-sign * scaled[j])
        return total

    return loss


def box_match(model: nn.Module, points: Sequence[np.ndarray]) -> Match:
    """Per tensor, the mean logistic loss of every coordinate's sign on the normalised gradient
    (the box LMO is -r sign(g), a zero reading as negative)."""
    gradient, target = dummy_gradient(model), tensors(points)

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        terms = [
            F.softplus(torch.sign(s.reshape(-1)) * _normalised(g)).mean()
            for g, s in zip(gradient(x, y), target)
        ]
        return torch.stack(terms).sum()

    return loss


def unrolled_fit(message: LearnerMessage, x: torch.Tensor, target: torch.Tensor) -> Params:
    """The learner after the fit's Adam steps (torch.optim.Adam's formulas, as
    ``oracles.mlp_least_squares``) on mean((h(x) - target)^2) from the seeded start,
    differentiable in ``x`` and ``target``. One example: every minibatch is that example."""
    network = new_network(message.spec, 0).to(DTYPE)
    names = [name for name, _ in network.named_parameters()]
    weights = [w.requires_grad_(True) for w in tensors(message.initial)]
    m = [torch.zeros_like(w) for w in weights]
    v = [torch.zeros_like(w) for w in weights]
    beta1, beta2 = BETAS
    inputs = x.reshape(len(x), -1)
    for step in range(1, message.oracle.steps + 1):
        output = functional_call(network, dict(zip(names, weights)), (inputs,))
        grads = torch.autograd.grad(((output - target) ** 2).mean(), weights, create_graph=True)
        m = [beta1 * mk + (1 - beta1) * g for mk, g in zip(m, grads)]
        v = [beta2 * vk + (1 - beta2) * g * g for vk, g in zip(v, grads)]
        # sqrt's derivative is infinite at 0: a floor far below any squared gradient avoids it
        root = [(vk + 1e-300).sqrt() / math.sqrt(1 - beta2**step) + EPS for vk in v]
        step_size = message.oracle.lr / (1 - beta1**step)
        weights = [w - step_size * mk / d for w, mk, d in zip(weights, m, root)]
    return weights


def learner_match(message: LearnerMessage, classes: int) -> Match:
    """Per tensor, the squared error of the dummy's unrolled learner against the received one,
    over the squared change of the received one from its start. Round 1's first target is
    softmax(0) - onehot(label): here with the dummy's soft label."""
    received, initial = tensors(message.learner), tensors(message.initial)
    scales = [((r - i) ** 2).sum().clamp_min(1e-30) for r, i in zip(received, initial)]

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fitted = unrolled_fit(message, x, 1.0 / classes - F.softmax(y, -1))
        return sum(((f - r) ** 2).sum() / s for f, r, s in zip(fitted, received, scales))

    return loss


# -- the attack -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Reconstruction:
    """One attack's outcome: PSNR after each L-BFGS iteration (index 0: the start), the final
    image and label logits, the final matching loss and the loss evaluations spent."""

    psnr: list[float]
    image: np.ndarray
    label_logits: np.ndarray
    loss: float
    evaluations: int

    @property
    def label(self) -> int:
        return int(np.argmax(self.label_logits))


def attack(
    match: Match,
    truth: np.ndarray,
    classes: int,
    iterations: int,
    seed: int,
    start: np.ndarray | None = None,
    known_zeros: np.ndarray | None = None,
) -> Reconstruction:
    """DLG: L-BFGS on a dummy image (uniform in [0, 1], or ``start``) and label logits drawn
    from N(0, 1); ``known_zeros`` (one image's shape) pins those pixels to zero. An iteration
    that leaves the dummy unchanged (L-BFGS stopped on its tolerances) restarts L-BFGS; a
    non-finite loss ends the attack at the last finite dummy, whose loss is the one reported."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(truth.shape, generator=generator, dtype=DTYPE)
    y = torch.randn((1, classes), generator=generator, dtype=DTYPE).requires_grad_(True)
    if start is not None:
        x = torch.as_tensor(start, dtype=DTYPE).reshape(truth.shape).clone()
    keep = torch.ones_like(x)
    if known_zeros is not None:
        keep = torch.as_tensor(~known_zeros, dtype=DTYPE).reshape(x.shape)
    x = (x * keep).requires_grad_(True)
    evaluations = [0]

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        evaluations[0] += 1
        value = match(x * keep, y)
        value.backward()
        return value

    optimiser = _lbfgs(x, y)
    last = (x * keep).detach().clone(), y.detach().clone()
    trace = [psnr(last[0].numpy(), truth)]
    for _ in range(iterations):
        loss = float(optimiser.step(closure).detach())
        if not (math.isfinite(loss) and torch.isfinite(x).all() and torch.isfinite(y).all()):
            trace += [trace[-1]] * (iterations + 1 - len(trace))
            break
        current = (x * keep).detach().clone(), y.detach().clone()
        if all(torch.equal(a, b) for a, b in zip(current, last)):
            optimiser = _lbfgs(x, y)
        last = current
        trace.append(psnr(last[0].numpy(), truth))
    final = float(match(*last).detach())
    return Reconstruction(trace, last[0].numpy(), last[1].numpy(), final, evaluations[0])


def _lbfgs(x: torch.Tensor, y: torch.Tensor) -> torch.optim.LBFGS:
    """DLG's L-BFGS: torch's defaults (lr 1, 20 inner iterations, no line search), history 100."""
    return torch.optim.LBFGS([x, y], lr=1.0, max_iter=20, history_size=100)
