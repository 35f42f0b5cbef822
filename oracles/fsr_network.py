"""FedFun's local step for neural networks: function space regularisation (FSR, eq. 14).

A node fits its smoothed squared error (section 5.1) while Monte Carlo penalties (section 5.2)
pull it, in L2([0,1]^p), towards anchors: its own previous model and its neighbours' models.
The caller rescales the data into [0, 1]^p, so the domain measure m(X) is 1, and gives targets
as one-hot rows (classification with squared error).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from oracles.decentralized import Tabled, adam_for, optimise, prepare_data, sample_rows, uniform

JACOBI, PROX_GRAD = "jacobi", "prox-grad"
STEP_FORMS = (JACOBI, PROX_GRAD)  # eq. 14 as run in the experiments; eq. 5 of the theory
DOMAIN_MEASURE = 1.0  # m(X) of the unit cube


@dataclass(frozen=True)
class Anchor:
    """A function the new model is pulled towards with ``weight``: ``predict`` maps (n, p)
    inputs to (n, q) outputs without gradients (a torch network, a tree ensemble, ...);
    ``replayable`` when it runs on the device alone (a network: no host copy, no sync), so that
    a step using it can be replayed as a CUDA graph."""

    weight: float
    predict: Callable[[torch.Tensor], torch.Tensor]
    replayable: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"anchor weight must be finite and >= 0, got {self.weight!r}")


def penalty_weights(step: str, gamma: float, lam: float, degree: int) -> tuple[float, float]:
    """(w_own, w_nbr): anchor weights of the node's previous model h_i^k and of each neighbour.

    "jacobi", eq. 14 as the paper's experiments run it: (1/(2 gamma), lam), i.e. the penalty
    (1/(2 gamma)) ||h - h_i^k||^2 + lam sum_{j in N(i)} ||h - h_j^k||^2.

    "prox-grad", eq. 5 (the proximal gradient method of Theorem 2): with d = deg(i),
    lam sum_j L_ij <h, h_j^k> = lam d <h, h_i^k> - lam sum_{j in N(i)} <h, h_j^k>, so
        (1/(2 gamma)) ||h - h_i^k||^2 + lam sum_j L_ij <h, h_j^k>
          = (1/(2 gamma)) ||h - u||^2 + const,  u = (1 - gamma lam d) h_i^k
                                                    + gamma lam sum_{j in N(i)} h_j^k,
    and w_own ||h - h_i^k||^2 + w_nbr sum_{j in N(i)} ||h - h_j^k||^2 is the same up to a
    constant when w_own + d w_nbr = 1/(2 gamma) and w_nbr = lam / 2:
    w_own = (1 - gamma lam d) / (2 gamma). Weights are non-negative only if gamma lam d < 1
    (``ValueError`` otherwise), which Assumption 3 (gamma < 1/(lam ||L||), ||L|| > max degree)
    implies.
    """
    if not (gamma > 0 and math.isfinite(gamma)):
        raise ValueError(f"gamma must be positive and finite, got {gamma!r}")
    if not (lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"lam must be >= 0 and finite, got {lam!r}")
    if type(degree) is not int or degree < 0:
        raise ValueError(f"degree must be a non-negative int, got {degree!r}")
    # The jacobi penalty's gradient at h_j = h_j^k is 2 lam (L h)_i, so its fixed points solve
    # problem (4) with 2 lam; prox-grad's fixed points solve (4) with lam itself.
    if step == JACOBI:
        return 1.0 / (2.0 * gamma), float(lam)
    if step == PROX_GRAD:
        if gamma * lam * degree >= 1:
            raise ValueError(
                f"prox-grad needs gamma * lam * degree < 1, got {gamma} * {lam} * "
                f"{degree} = {gamma * lam * degree:.4g}"
            )
        return (1.0 - gamma * lam * degree) / (2.0 * gamma), lam / 2.0
    raise ValueError(f"unknown step {step!r}; known: {STEP_FORMS}")


def fsr_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    anchors: Sequence[Anchor],
    steps: int,
    radius: float,
    batch_size: int = 200,
    penalty_samples: int = 1000,
    lr: float = 1e-3,
    generator: torch.Generator | None = None,
) -> float:
    """``steps`` Adam steps in place on eq. 14's loss, summed over the anchors a:

        (1/(b q)) sum_i ||h(x_i + eps_i) - y_i||^2
          + (m(X)/(N b' q)) sum_z sum_a w_a ||h(z) - a(z)||^2

    with b = min(batch_size, N) rows drawn each step, eps_i ~ Uniform([-radius, radius]^p) (box
    kernel; radius 0: no smoothing), b' = ``penalty_samples`` points z ~ Uniform([0, 1]^p).
    Without anchors this is plain smoothed training (round 0: h^0 = argmin R_i). Returns the
    mean loss of the last tenth of the steps.
    """
    if not y.is_floating_point():
        raise ValueError("y must hold float targets (one-hot rows), not integer labels")
    x, y = prepare_data(model, x, y, 2)
    if not (radius >= 0 and math.isfinite(radius)):
        raise ValueError(f"radius must be >= 0 and finite, got {radius!r}")
    if anchors and (type(penalty_samples) is not int or penalty_samples < 1):
        raise ValueError(f"penalty_samples must be a positive int, got {penalty_samples!r}")
    objective = _FSRObjective(model, x, y, anchors, radius, batch_size, penalty_samples, generator)
    model.train()
    replayable = all(anchor.replayable for anchor in anchors)
    optimizer = adam_for(model.parameters(), lr)
    tabled = Tabled(
        *_pooled_anchors(
            anchors, objective.anchor_values, objective.data_term, model, objective.penalty_scale
        )
    )
    return optimise(optimizer, steps, objective.draw, objective.loss, x.device, replayable, tabled)


@dataclass
class _FSRObjective:
    """``fsr_train``'s loss (eq. 14) on checked data (``x`` and one-hot ``y`` on the model's
    device): a step's draws (``draw``: rows, their noise, the penalty's points) and the loss at
    them (``loss``); its data term and the anchors' values also serve ``_pooled_anchors``."""

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    anchors: Sequence[Anchor]
    radius: float
    batch_size: int
    penalty_samples: int
    generator: torch.Generator | None
    n: int = field(init=False)  # points
    p: int = field(init=False)  # features
    q: int = field(init=False)  # outputs
    penalty_scale: float = field(init=False)  # m(X) / (N b' q)

    def __post_init__(self) -> None:
        (self.n, self.p), self.q = self.x.shape, self.y.shape[1]
        self.penalty_scale = DOMAIN_MEASURE / (self.n * self.penalty_samples * self.q)

    def draw(self) -> tuple[torch.Tensor, ...]:
        """A step's rows, the uniform draws of their noise and the penalty's points (empty
        where unused: no smoothing, no anchors)."""
        rows = sample_rows(self.n, self.batch_size, self.generator)
        noise = uniform((len(rows), self.p), self.generator) if self.radius > 0 else rows[:0]
        if not self.anchors:
            return rows, noise, rows[:0]
        return rows, noise, uniform((self.penalty_samples, self.p), self.generator)

    def data_term(self, rows: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The smoothed squared error of the drawn rows, per row and output."""
        inputs = self.x[rows]
        if self.radius > 0:
            inputs = inputs + self.radius * (2.0 * noise - 1.0)
        return ((self.model(inputs) - self.y[rows]) ** 2).sum() / (len(rows) * self.q)

    def anchor_values(self, z: torch.Tensor, anchor: Anchor) -> torch.Tensor:
        """``anchor`` at the points ``z``, without gradients; ``ValueError`` for a shape that
        is not one output row per point."""
        with torch.no_grad():
            target = anchor.predict(z)
        expected = (*z.shape[:-1], self.q)
        if target.shape != expected:
            raise ValueError(f"an anchor returned shape {tuple(target.shape)}, expected {expected}")
        return target

    def loss(self, rows: torch.Tensor, noise: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """eq. 14's loss at a step's draws: the data term plus each anchor's penalty."""
        value = self.data_term(rows, noise)
        if not self.anchors:
            return value
        out = self.model(z)
        for anchor in self.anchors:
            target = self.anchor_values(z, anchor)
            value = value + self.penalty_scale * anchor.weight * ((out - target) ** 2).sum()
        return value


def _pooled_anchors(
    anchors: Sequence[Anchor],
    anchor_values: Callable[[torch.Tensor, Anchor], torch.Tensor],
    data_term: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    model: nn.Module,
    penalty_scale: float,
) -> tuple[Callable[..., Sequence[torch.Tensor]], Callable[..., torch.Tensor]]:
    """eq. 14's penalty with its anchors pooled, for steps whose points are drawn beforehand:
    sum_a w_a ||h - a||^2 = W ||h - m||^2 + c with W = sum_a w_a, m = sum_a w_a a / W and
    c = sum_a w_a ||a||^2 - W ||m||^2, the anchors evaluated once at a whole chunk of steps'
    points (one forward each, not one per step): the same loss and gradient to float
    rounding, a step's graph without the anchors in it."""
    total = sum(anchor.weight for anchor in anchors)

    def prepare(rows: torch.Tensor, noise: torch.Tensor, z: torch.Tensor):
        if not anchors or total == 0:
            nothing = torch.zeros(len(rows), 0, device=rows.device)
            return rows, noise, z, nothing, nothing
        points = z.flatten(0, 1)
        weighted, squares = 0.0, 0.0
        for anchor in anchors:
            values = anchor_values(points, anchor)
            weighted = weighted + anchor.weight * values
            squares = squares + anchor.weight * values**2
        mean = weighted / total
        constant = (squares - total * mean**2).reshape(len(z), -1).sum(1)
        return rows, noise, z, mean.reshape(*z.shape[:2], -1), constant

    def loss(rows, noise, z, mean, constant) -> torch.Tensor:
        value = data_term(rows, noise)
        if not anchors or total == 0:
            return value
        pooled = total * ((model(z) - mean) ** 2).sum() + constant
        return value + penalty_scale * pooled

    return prepare, loss


def monte_carlo_distance(
    f: Callable[[torch.Tensor], torch.Tensor],
    g: Callable[[torch.Tensor], torch.Tensor],
    n_features: int,
    samples: int,
    generator: torch.Generator | None = None,
) -> float:
    """The squared L2([0,1]^p) distance ||f - g||^2 = m(X) E_z ||f(z) - g(z)||^2 (eq. 12),
    estimated on ``samples`` uniform points z (drawn on the generator's device)."""
    if type(samples) is not int or samples < 1:
        raise ValueError(f"samples must be a positive int, got {samples!r}")
    z = torch.rand(
        (samples, n_features),
        generator=generator,
        device=generator.device if generator is not None else None,
    )
    with torch.no_grad():
        return DOMAIN_MEASURE * float(((f(z) - g(z)) ** 2).sum(1).mean())
