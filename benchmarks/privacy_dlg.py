"""What the server can rebuild of a node's training image from its message: the Deep Leakage from
Gradients attack (``benchmarks.dlg``) on FedAvg's update, FedFW's extreme points (l2, l1 and box
balls) and FFGB's weak learner; the FedFW paper's Figure 1 (section 3.2) on digits.

One node, one example (DLG's batch of 1), round 1, the project's default settings of each family
(run config defaults, task ``digits``): FedAvg's one SGD step and FedFW's LMO at the run's initial
global ``--models``; FFGB's first learner (64-32-32-10, Adam from a seeded start) fitted with
``--ffgb-steps`` Adam steps instead of the run's ``ffgb.oracle-steps``, so that unrolling the fit
stays affordable (every evaluation of the attack's loss unrolls the whole fit and differentiates
back through it; an L-BFGS iteration takes up to 20). Images: the first training image of each
class 0, 1, ...; PSNR of the dummy clipped to [0, 1] against the image.

    python -m benchmarks.privacy_dlg            # about 5 min on 2 cores
    python -m benchmarks.privacy_dlg --quick    # seconds

Writes ``results/privacy_dlg.md``, ``.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from benchmarks import dlg
from benchmarks.common import (
    command_line,
    machine_info,
    md_table,
    parser,
    results_dir,
    write_report,
)
from oracles.local_sgd import default_step
from oracles.weak_learning import fit_seed
from run_config.common import RunSettings
from run_config.declared import with_overrides
from run_config.fedfw import FedFWSettings, fedfw_settings
from run_config.ffgb import ffgb_settings
from tasks.datasets import TaskData
from tasks.federation import task_for
from tasks.models import model_for

TASK = "digits"
NODES = 10  # the default job's SuperNodes: FedFW's n (the LMO ignores its gradient's scale)
RECOVERED_DB = 30.0  # a reconstruction this close is the image to the eye
FEDFW_SETS = ("l2", "l1", "box")
FFGB_KINDS = ("ffgb", "ffgb-zeros")
NOISE = (0.0, 0.01, 0.1, 0.3)  # standard deviations of the noise around the true image
LABELS = {
    "fedavg": "FedAvg update (gradient)",
    "fedfw-l2": "FedFW LMO, l2 ball",
    "fedfw-l1": "FedFW LMO, l1 ball",
    "fedfw-box": "FedFW LMO, box (default)",
    "ffgb": "FFGB learner",
    "ffgb-zeros": "FFGB learner, from its silhouette",
}


@dataclass
class Runs:
    """One message kind's attacks: per run (an example and a random start), the example's index,
    the PSNR trace, the final image, whether the label is right, whether the dummy makes the
    message (None where no dummy makes it to the bit), the loss evaluations and the final
    matching loss; the time."""

    examples: list[int]
    traces: list[list[float]]
    images: list[list[float]]
    labels: list[bool]
    reproduced: list[bool | None]
    evaluations: list[int]
    losses: list[float]
    wall_s: float = 0.0


def settings(**keys: object) -> RunSettings:
    """The run's settings: the project's defaults on ``TASK`` with ``keys`` overridden."""
    return RunSettings.from_run_config(with_overrides({"task": TASK, **keys}))


def examples(task: TaskData, count: int) -> list[dlg.Example]:
    """The first training image of each class 0 .. count - 1 (a writable copy)."""
    chosen = [int(np.flatnonzero(task.y_train == c)[0]) for c in range(count)]
    return [dlg.Example(np.array(task.x_train[i : i + 1]), int(task.y_train[i])) for i in chosen]


Check = Callable[[dlg.Reconstruction], bool | None]  # does the final dummy make the message?
Start = tuple[np.ndarray | None, np.ndarray | None]  # a start image and known zero pixels


def run_attacks(
    make: Callable[[int], tuple[dlg.Match, Check]],
    cases: list[dlg.Example],
    seeds: int,
    iterations: int,
    classes: int,
    start: Callable[[int], Start] | None = None,
) -> Runs:
    """Attack example i from ``seeds`` random starts; ``make(i)`` gives the matching loss and
    the check of the final dummy's message, ``start(i)`` a start image and known zeros."""
    runs, began = Runs([], [], [], [], [], [], []), time.perf_counter()
    for i, example in enumerate(cases):
        match, check = make(i)
        image, zeros = start(i) if start else (None, None)
        truth = example.x.astype(np.float64)
        for seed in range(seeds):
            out = dlg.attack(match, truth, classes, iterations, seed, image, zeros)
            runs.examples.append(i)
            runs.traces.append([round(db, 3) for db in out.psnr])
            runs.images.append(np.round(out.image.ravel(), 4).tolist())
            runs.labels.append(out.label == example.label)
            runs.reproduced.append(check(out))
            runs.evaluations.append(out.evaluations)
            runs.losses.append(out.loss)
    runs.wall_s = time.perf_counter() - began
    return runs


def _unchecked(_: dlg.Reconstruction) -> None:
    return None


def gradient_kinds(
    model_name: str, task: TaskData, cases: list[dlg.Example], args: argparse.Namespace
) -> dict[str, Runs]:
    """FedAvg's update and FedFW's points at the run's initial ``model_name`` network."""
    base = settings(model=model_name)
    model = model_for(model_name, task, base.seed)
    lr = base.learning_rate or default_step("classification")
    attack = (cases, args.seeds, args.iterations, task.num_classes)

    def fedavg(i: int) -> tuple[dlg.Match, Check]:
        gradient = dlg.observe_fedavg(model, cases[i], lr, base.seed)
        return dlg.gradient_match(model, gradient), _unchecked

    out = {"fedavg": run_attacks(fedavg, *attack)}
    print(f"  {model_name}, fedavg: {out['fedavg'].wall_s:.1f} s", flush=True)
    for kind in FEDFW_SETS:
        fw = fedfw_settings(
            settings(algorithm="fedfw", model=model_name, **{"fedfw.constraint": kind})
        )
        out[f"fedfw-{kind}"] = run_attacks(fedfw_attack(model, cases, fw), *attack)
        print(f"  {model_name}, fedfw {kind}: {out[f'fedfw-{kind}'].wall_s:.1f} s", flush=True)
    return out


def fedfw_attack(
    model: torch.nn.Module, cases: list[dlg.Example], fw: FedFWSettings
) -> Callable[[int], tuple[dlg.Match, Check]]:
    """Example i -> the matching loss of its FedFW point and the check that a dummy makes that
    point (none for l2: no dummy makes a dense point to the bit)."""
    constraint = fw.constraint
    match = {"l2": dlg.l2_match, "l1": dlg.l1_match, "box": dlg.box_match}[constraint.kind]

    def make(i: int) -> tuple[dlg.Match, Check]:
        points = dlg.observe_fedfw(model, cases[i], constraint, fw.scope, fw.schedule, NODES)
        if constraint.kind == "l2":
            return match(model, points), _unchecked
        return match(model, points), partial(_makes, model, constraint, points)

    return make


def _makes(
    model: torch.nn.Module, constraint, points: list[np.ndarray], r: dlg.Reconstruction
) -> bool:
    return dlg.reproduces(model, constraint, points, r.image, r.label_logits)


def fill_value(task: TaskData) -> float:
    """The mean nonzero pixel of the training split: the attacker's guess of an inked pixel."""
    return float(task.x_train[task.x_train > 0].mean())


def read_off(
    cases: list[dlg.Example], zeros_of: Callable[[int], np.ndarray], fill: float
) -> dict[str, list]:
    """Per example: whether the zero pixels read off a message are exactly the image's, and the
    silhouette (the other pixels at ``fill``) with its PSNR."""
    exact, scores, images = [], [], []
    for i, example in enumerate(cases):
        zeros = zeros_of(i).reshape(example.x.shape[1:])
        image = (~zeros) * fill
        exact.append(bool(np.array_equal(zeros, example.x[0] == 0)))
        scores.append(dlg.psnr(image, example.x[0]))
        images.append(image.ravel().tolist())
    return {"exact": exact, "psnr": scores, "images": images}


def box_zeros(
    model_name: str, task: TaskData, cases: list[dlg.Example]
) -> Callable[[int], np.ndarray]:
    """Example i -> the zero pixels its FedFW box point shows (first-layer columns all +r)."""
    fw = fedfw_settings(settings(algorithm="fedfw", model=model_name))
    model = model_for(model_name, task, settings(model=model_name).seed)
    return lambda i: dlg.box_zero_inputs(
        dlg.observe_fedfw(model, cases[i], fw.constraint, fw.scope, fw.schedule, NODES)
    )


def ffgb_kinds(
    task: TaskData, cases: list[dlg.Example], args: argparse.Namespace
) -> tuple[dict[str, Runs], dict[str, list]]:
    """FFGB's first learner (one node per example), attacked from a random start and from the
    silhouette its zero pixels give (pinned at zero); and that silhouette alone."""
    base = settings(algorithm="ffgb")
    ffgb = ffgb_settings(base)
    spec = ffgb.model(task).spec
    oracle = replace(ffgb.oracle, steps=args.ffgb_steps)
    messages = [
        dlg.observe_ffgb(
            spec,
            example,
            task.num_classes,
            oracle,
            ffgb.steps.etas(0),
            partial(fit_seed, base.seed, 0, partition),
        )
        for partition, example in enumerate(cases)
    ]
    fill = fill_value(task)

    def make(i: int) -> tuple[dlg.Match, Check]:
        return dlg.learner_match(messages[i], task.num_classes), _unchecked

    def silhouette(i: int) -> Start:
        zeros = dlg.learner_zero_inputs(messages[i]).reshape(cases[i].x.shape[1:])
        return (~zeros) * fill, zeros

    attack = (cases, 1, args.ffgb_iterations, task.num_classes)
    runs = {"ffgb": run_attacks(make, *attack)}
    print(f"  ffgb: {runs['ffgb'].wall_s:.1f} s", flush=True)
    runs["ffgb-zeros"] = run_attacks(make, *attack, start=silhouette)
    print(f"  ffgb, zeros read off: {runs['ffgb-zeros'].wall_s:.1f} s", flush=True)
    return runs, read_off(cases, lambda i: dlg.learner_zero_inputs(messages[i]), fill)


def learner_landscape(
    task: TaskData, example: dlg.Example, steps: list[int]
) -> dict[int, dict[str, list[float]]]:
    """FFGB's matching loss, true label, at the true image plus Gaussian noise of each of
    ``NOISE``'s deviations on its nonzero pixels: for fits of each number of Adam ``steps``."""
    base = settings(algorithm="ffgb")
    ffgb = ffgb_settings(base)
    rng = np.random.default_rng(0)
    noisy = [example.x + s * rng.standard_normal(example.x.shape) * (example.x != 0) for s in NOISE]
    label = 50.0 * torch.nn.functional.one_hot(torch.tensor([example.label]), task.num_classes)
    rows = {}
    for count in steps:
        message = dlg.observe_ffgb(
            ffgb.model(task).spec,
            example,
            task.num_classes,
            replace(ffgb.oracle, steps=count),
            ffgb.steps.etas(0),
            partial(fit_seed, base.seed, 0, 0),
        )
        match = dlg.learner_match(message, task.num_classes)
        rows[count] = {
            "loss": [float(match(*dlg.tensors([x, label])).detach()) for x in noisy],
            "psnr": [dlg.psnr(x, example.x) for x in noisy],
        }
    return rows


def summary_row(name: str, model: str, runs: dict) -> list[str]:
    """One message kind's row: final PSNR over its runs, recovered, labels, messages made."""
    finals = np.array([trace[-1] for trace in runs["traces"]])
    checked = [r for r in runs["reproduced"] if r is not None]
    return [
        name,
        model,
        str(len(finals)),
        f"{finals.mean():.1f} ± {finals.std():.1f}",
        f"{np.median(finals):.1f}",
        f"{finals.min():.1f} – {finals.max():.1f}",
        f"{int((finals >= RECOVERED_DB).sum())}/{len(finals)}",
        _best_starts(runs, finals),
        f"{sum(runs['labels'])}/{len(runs['labels'])}",
        f"{sum(checked)}/{len(checked)}" if checked else "–",
        str(int(np.median(runs["evaluations"]))),
        f"{np.median(runs['losses']):.2g}",
        f"{runs['wall_s']:.0f}",
    ]


def _best_starts(runs: dict, finals: np.ndarray) -> str:
    """Images recovered when the server keeps, per image, its start of lowest final loss (it
    cannot see the PSNR)."""
    examples, losses = np.array(runs["examples"]), np.array(runs["losses"])
    losses = np.where(np.isfinite(losses), losses, np.inf)  # a run that ended non-finite
    best = [
        finals[np.flatnonzero(examples == e)[np.argmin(losses[examples == e])]]
        for e in np.unique(examples)
    ]
    return f"{sum(b >= RECOVERED_DB for b in best)}/{len(best)}"


def plot(results: dict, path: Path) -> None:
    """PSNR over L-BFGS iterations per message kind, one panel per model (mean, and the band
    of the 25th to 75th percentile); below, each image beside its final reconstructions (first
    random start, first model) and its FFGB silhouette."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(results["attacks"])
    first = results["attacks"][models[0]]
    side = int(round(len(results["truth"][0]) ** 0.5))
    shown = min(len(results["truth"]), 4)
    columns = 2 + len(first)
    fig = plt.figure(figsize=(1.5 * columns, 3.0 + 1.35 * shown))
    grid = fig.add_gridspec(1 + shown, columns, height_ratios=[2.4] + [1] * shown)
    width = columns // len(models)
    for m, model in enumerate(models):
        ax = fig.add_subplot(grid[0, m * width : (m + 1) * width])
        for kind, runs in results["attacks"][model].items():
            traces = np.array(runs["traces"])
            steps = np.arange(traces.shape[1])
            color = f"C{list(LABELS).index(kind)}"
            ax.plot(steps, traces.mean(0), color=color, label=LABELS[kind])
            low, high = np.percentile(traces, [25, 75], axis=0)
            ax.fill_between(steps, low, high, color=color, alpha=0.15)
        ax.set_title(f"{TASK}, {model}" + (" (FFGB: its learner)" if m == 0 else ""), fontsize=8)
        ax.set_xlabel("L-BFGS iterations", fontsize=8)
        ax.set_ylabel("PSNR (dB)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5.5, loc="upper right")
    for row in range(shown):
        panels = [("image", results["truth"][row], "")]
        for kind, runs in first.items():
            if row in runs["examples"]:
                index = runs["examples"].index(row)  # its first random start
                db = f"{runs['traces'][index][-1]:.1f} dB"
                panels.append((LABELS[kind], runs["images"][index], db))
        silhouettes = results["read_off"]["ffgb"]["images"]
        if row < len(silhouettes):
            silhouette_db = results["read_off"]["ffgb"]["psnr"][row]
            panels.append(
                ("FFGB silhouette (read off)", silhouettes[row], f"{silhouette_db:.1f} dB")
            )
        for col, (title, image, caption) in enumerate(panels):
            ax = fig.add_subplot(grid[1 + row, col])
            ax.imshow(np.clip(np.reshape(image, (side, side)), 0, 1), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(caption, fontsize=6)
            if row == 0:
                ax.set_title(title.replace(", ", ",\n"), fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(results: dict, png: str) -> str:
    """The markdown body: the attacks' table, what the messages show without optimisation, the
    FFGB matching loss around the true image, the figure and how to read them."""
    s = results["settings"]
    headers = [
        "message (what the server attacks)",
        "model",
        "runs",
        "final PSNR dB, mean ± std",
        "median",
        "min – max",
        f"≥ {RECOVERED_DB:g} dB",
        "images ≥ it, best start",
        "label right",
        "message made",
        "evaluations (median)",
        "final loss (median)",
        "time s",
    ]
    rows = [
        summary_row(LABELS[kind], results["ffgb_learner"] if kind in FFGB_KINDS else model, runs)
        for model, kinds in results["attacks"].items()
        for kind, runs in kinds.items()
    ]
    prior, starts = np.array(results["prior_psnr"]), np.array(results["start_psnr"])
    read = [
        [f"FedFW box point, {model}", *_read_row(box)]
        for model, box in results["read_off"]["box"].items()
    ]
    read.append(["FFGB learner", *_read_row(results["read_off"]["ffgb"])])
    landscape = results["landscape"]
    steps = sorted(landscape, key=int)
    noise_rows = [
        [f"{sigma:g}", f"{landscape[steps[0]]['psnr'][n]:.1f}"]
        + [f"{landscape[k]['loss'][n]:.3g}" for k in steps]
        for n, sigma in enumerate(NOISE)
    ]
    return f"""One node holds one training image of `{TASK}` (8x8, pixels in [0, 1]) and sends what
its family sends in round 1 with the project's defaults; the server runs DLG (L-BFGS on a dummy
image and soft label, `benchmarks/dlg.py`) to match the message. Images: the first training
image of classes 0 to {s["images"] - 1}, {s["seeds"]} random starts each (dummy uniform in
[0, 1], label logits N(0, 1)), {s["iterations"]} L-BFGS iterations of up to 20 loss evaluations,
at the run's initial global model ({", ".join(results["attacks"])}). FFGB: its first learner of
round 1 fitted with {s["ffgb_steps"]} Adam steps, not the run's {s["real_steps"]}
(`ffgb.oracle-steps`), whose unrolling would cost {s["real_steps"] / s["ffgb_steps"]:g} times as
much per evaluation; the first {s["ffgb_images"]} images, one random start,
{s["ffgb_iterations"]} iterations; "from its silhouette" starts from the silhouette below with
its zero pixels pinned. PSNR of the dummy clipped to [0, 1]; "message made": the final dummy's
own LMO output equals the received point in every index and sign (l1, box; a gradient or a
dense l2 point is matched only to a tolerance).

The FedFW paper's Figure 1 attacks CIFAR-100 images (32x32x3) for 10^5 iterations and plots
PSNR per iteration; here the images are 64 pixels, the networks the project's own, and L-BFGS
settles within tens of iterations (a stalled L-BFGS is restarted; after that the curves stay
flat), so the budget is in tens of iterations, not 10^5.

{md_table(headers, rows)}

For scale: the mean training image scores {prior.mean():.1f} ± {prior.std():.1f} dB against these
images, the random starts {starts.mean():.1f} ± {starts.std():.1f} dB.

**What a message shows without any optimisation.** With one example, a first-layer weight's
gradient is its unit's error times the pixel: zero exactly where the pixel is zero. A FedFW box
point reads a zero as negative, so a zero pixel's column is +r in every row; an FFGB learner's
first-layer column of a zero pixel never moves from its seeded start, which the server can
rebuild. The silhouette fills the other pixels with the mean nonzero training pixel.

{md_table(["message", "zero pixels read off exactly", "silhouette PSNR dB, mean ± std"], read)}

**Why unrolling the FFGB fit does not get there.** The matching loss of the learner (true label)
at the true image plus Gaussian noise of deviation sigma on its nonzero pixels, for a fit of
each number of Adam steps (first image). At sigma = 0 it is the unrolled fit (float64) against
the project's (float32): the attack models the fit exactly. The attacks' final losses are in
the table above.

{md_table(["sigma", "PSNR dB", *[f"loss, {k} steps" for k in steps]], noise_rows)}

![PSNR over L-BFGS iterations per message kind; images and final reconstructions]({png})

Top: mean PSNR over the runs after each L-BFGS iteration (band: 25th to 75th percentile); below,
each image beside its reconstruction from each message (first random start, first model) and
its FFGB silhouette.
"""


def _read_row(read: dict[str, list]) -> list[str]:
    scores = np.array(read["psnr"])
    return [
        f"{sum(read['exact'])}/{len(read['exact'])}",
        f"{scores.mean():.1f} ± {scores.std():.1f}",
    ]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=10, help="examples: classes 0, 1, ...")
    p.add_argument("--seeds", type=int, default=3, help="random starts per example")
    p.add_argument("--iterations", type=int, default=50, help="L-BFGS iterations")
    p.add_argument("--models", nargs="+", default=["mlp", "mclr"])
    p.add_argument("--ffgb-images", type=int, default=4)
    p.add_argument("--ffgb-steps", type=int, default=50, help="Adam steps of the attacked fit")
    p.add_argument("--ffgb-iterations", type=int, default=10)
    p.add_argument("--real-steps", type=int, default=500, help="the run's fit, in the landscape")
    args = p.parse_args(argv)
    if args.quick:
        args.images, args.seeds, args.iterations, args.ffgb_images = 2, 1, 3, 1
        args.ffgb_steps, args.ffgb_iterations, args.real_steps = 5, 1, 10
    torch.set_num_threads(1)
    began = time.perf_counter()
    task = task_for(settings().data)
    cases = examples(task, args.images)
    fill = fill_value(task)
    attacks, box = {}, {}
    for model_name in args.models:
        attacks[model_name] = gradient_kinds(model_name, task, cases, args)
        box[model_name] = read_off(cases, box_zeros(model_name, task, cases), fill)
    ffgb_runs, ffgb_read = ffgb_kinds(task, cases[: args.ffgb_images], args)
    attacks[args.models[0]].update(ffgb_runs)
    landscape = learner_landscape(task, cases[0], sorted({args.ffgb_steps, args.real_steps}))
    learner = ffgb_settings(settings(algorithm="ffgb")).model(task).spec
    results = {
        "settings": {**vars(args), "task": TASK},
        "labels": [e.label for e in cases],
        "truth": [e.x.ravel().tolist() for e in cases],
        "attacks": {m: {k: asdict(r) for k, r in kinds.items()} for m, kinds in attacks.items()},
        "read_off": {"box": box, "ffgb": ffgb_read},
        "landscape": landscape,
        "ffgb_learner": "-".join(map(str, learner.sizes)),
        "prior_psnr": [dlg.psnr(task.x_train.mean(0), e.x[0]) for e in cases],
        "start_psnr": [trace[0] for trace in attacks[args.models[0]]["fedavg"].traces],
    }
    out = results_dir(args.quick)
    plot(results, out / "privacy_dlg.png")
    wall = time.perf_counter() - began
    info = machine_info()
    meta = {"command": command_line(), "wall_s": wall, "machine": info}
    (out / "privacy_dlg.json").write_text(json.dumps(rounded({**meta, **results})) + "\n")
    title = "DLG on what a node sends: FedAvg's update, FedFW's extreme points, FFGB's learner"
    write_report(out / "privacy_dlg.md", title, wall, report(results, "privacy_dlg.png"), info=info)
    return 0


def rounded(value: object, digits: int = 4) -> object:
    """``value`` with every float rounded to ``digits`` decimals: the curves' JSON, compact."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
