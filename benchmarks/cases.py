"""Every benchmark, declared once: its module, its smoke version for CI (``quick``: the
arguments after ``--quick``; None: it has none) and the tables and figures of the three papers
it reproduces. The runner (``python -m benchmarks``) and the CI's quick stage
(``tests/benchmark_suite/test_benchmarks_quick.py``) read these declarations; a benchmark's
one-line summary is its module's docstring.

``PAPERS`` lists every table and figure of the three papers (``../shared/papers/``) with the
case that reproduces it, or why none does yet.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
# a benchmark whose jobs go through ``benchmarks.common.run_jobs`` runs them in its own process
# in the quick stage (a worker process costs seconds of CPU to start)
ONE_WORKER = ("--workers", "1")


@dataclass(frozen=True)
class Case:
    """One benchmark: ``python -m benchmarks.<name>``."""

    name: str
    quick: tuple[str, ...] | None = None  # the smoke version's arguments after --quick
    papers: tuple[str, ...] = field(default=())  # the papers' tables and figures it reproduces
    quick_in: str = ""  # the serial e2e test that runs its smoke version ("": the quick stage)
    reports: tuple[str, ...] | None = None  # its files in results/ (None: just <name>.md)
    tables: int = 1  # how many leading tables of each Markdown report README.md shows
    full: tuple[str, ...] = ()  # the arguments of the run that writes its main report

    @property
    def results(self) -> tuple[str, ...]:
        """Its result files in ``benchmarks/results/``, the first one its main report."""
        return (f"{self.name}.md",) if self.reports is None else self.reports

    @property
    def summary(self) -> str:
        """The first sentence of the module's docstring."""
        tree = ast.parse((BENCH_DIR / f"{self.name}.py").read_text())
        paragraph = " ".join((ast.get_docstring(tree) or "").split("\n\n")[0].split())
        return textwrap.shorten(paragraph.split(". ")[0].rstrip("."), 110, placeholder=" ...")


CASES = (
    Case(
        "boosting",
        full=(
            "--datasets",
            "penguins",
            "cars",
            "synth50k",
            "breast-cancer-label-5",
            "breast-cancer-dirichlet-5",
            "breast-cancer-label-20",
            "breast-cancer-dirichlet-20",
            "diabetes-label-5",
            "diabetes-dirichlet-5",
            "diabetes-label-20",
            "diabetes-dirichlet-20",
            "--fewer-seeds",
            "synth50k=0",
            "--fewer-rounds",
            "ffgb-mlp@synth50k=5",
        ),
        reports=(
            "boosting.md",
            "boosting.json",
            "boosting-synth1m.md",
            "boosting-synth1m.json",
        ),
    ),
    Case("boosting_ablation", reports=("boosting_ablation.md", "boosting_ablation.json")),
    Case("defaults", reports=("defaults.md", "defaults.json")),
    Case("deploy_examples", reports=("deploy_examples.md", "docker-runs.md")),
    Case(
        "devices",
        ("--devices", "cpu", "--only", "the default job|FedFW"),
        reports=("devices-cpu-together.md", "devices-cpu-together.json"),
    ),
    Case("dp_tradeoff", ONE_WORKER, reports=("dp_tradeoff.md", "dp_tradeoff.json")),
    Case("ensemble_eval", (), reports=("ensemble_eval.md", "ensemble_eval.json")),
    Case("fab_build", ()),
    Case("fedfun_long", ONE_WORKER, ("FedFun Table 1", "FedFun Table 3"), tables=2),
    Case("fedfun_sensitivity", ONE_WORKER, ("FedFun Table 6", "FedFun Table 7"), tables=6),
    Case("fedfun_tables", ONE_WORKER, ("FedFun Table 2", "FedFun Table 4"), tables=3),
    Case(
        "fedfun_widths",
        ONE_WORKER,
        ("FedFun Figure 3",),
        reports=("fedfun_widths.md", "fedfun_widths.png"),
    ),
    Case("fedfw_downlink", ONE_WORKER),
    Case(
        "fedfw_figures34",
        ONE_WORKER,
        ("FedFW Figure 3", "FedFW Figure 4"),
        reports=("fedfw_figure3.md", "fedfw_figure3.png", "fedfw_figure4.md", "fedfw_figure4.png"),
    ),
    Case("fedfw_l1_optimum", ()),
    Case(
        "fedfw_participation",
        ONE_WORKER,
        ("FedFW Figure 2",),
        reports=("fedfw_participation.md", "fedfw_participation.png"),
    ),
    Case("fedfw_seeds", ONE_WORKER, tables=3),
    Case(
        "fedfw_table1",
        ONE_WORKER,
        ("FedFW Table 1",),
        reports=("fedfw_table1.md", "hparams.json"),
        tables=3,
    ),
    Case("fedfw_table2", ONE_WORKER, ("FedFW Table 2",), tables=2),
    Case(  # its default pool of 2 workers
        "fedfw_table3",
        (),
        ("FedFW Table 3",),
        reports=("fedfw_table3.md", "fedfw_table3_samples6000.md"),
    ),
    Case("fedfw_wire", ONE_WORKER, tables=2),
    Case(
        "ffgb_distillation", ONE_WORKER, reports=("ffgb_distillation.md", "ffgb_distillation.png")
    ),
    Case("ffgb_downlink"),
    Case(
        "ffgb_figure1",
        ONE_WORKER,
        ("FFGB Figure 1", "FFGB Figure 4"),
        reports=("ffgb_figure1.md", "ffgb_figure1.png"),
    ),
    Case(
        "ffgb_heterogeneous",
        ONE_WORKER,
        reports=("ffgb_heterogeneous.md", "ffgb_heterogeneous.png"),
        tables=3,
    ),
    Case(
        "ffgb_mnist",
        ONE_WORKER,
        ("FFGB Figure 2", "FFGB Figure 3"),
        reports=("ffgb_mnist.md", "ffgb_mnist.png"),
        tables=2,
    ),
    Case("hist_privacy", reports=("hist_privacy.md", "hist_privacy.json")),
    Case("hist_time", (), full=("--large",), tables=3),
    Case("kddt_fit"),
    Case(
        "latency",
        full=("--ways", "simulation", "flower", "deployed", "runbook", "namespaces", "compose"),
        reports=("latency.md", "latency.json", "compose-latency.md"),
    ),
    Case("learner_decode", ()),
    Case("oracle_speed", ()),
    Case("perimeter_memory", reports=("perimeter_memory.md", "perimeter_memory.json")),
    Case("privacy", (), reports=("privacy.md", "privacy.json")),
    Case(
        "privacy_dlg",
        (),
        ("FedFW Figure 1",),
        reports=("privacy_dlg.md", "privacy_dlg.json", "privacy_dlg.png"),
        tables=3,
    ),
    Case("readme_figures", reports=("readme.json",)),
    Case("same_rows", reports=("same_rows.json",)),
    Case(
        "scale",
        full=("--sizes", "10", "100", "--timeout", "300"),
        reports=("scale.md", "scale.json"),
    ),
    Case(
        "scale_engines",
        reports=(
            "scale-engines.md",
            "scale-engines.json",
            "scale-engines-cluster.md",
            "scale-engines-cluster.json",
        ),
    ),
    Case("secure_cost", (), reports=("secure_cost.md", "secure_cost.json")),
    Case(  # a live deployment on timers
        "soak", (), quick_in="tests/deployment/test_soak.py", reports=("soak.md", "soak.json")
    ),
    Case("sites", reports=("sites.md", "sites.json"), tables=2),
    Case("tree_fit", ()),
)

PAPERS: dict[str, str] = {  # every table and figure of the papers -> its case, or why none
    "FedFW Figure 1": "privacy_dlg",
    "FedFW Table 1": "fedfw_table1",
    "FedFW Table 2": "fedfw_table2",
    "FedFW Table 3": "fedfw_table3",
    "FedFW Figure 2": "fedfw_participation",
    "FedFW Figure 3": "fedfw_figures34",
    "FedFW Figure 4": "fedfw_figures34",
    "FFGB Figure 1": "ffgb_figure1",
    "FFGB Figure 2": "ffgb_mnist",
    "FFGB Figure 3": "ffgb_mnist",
    "FFGB Figure 4": "ffgb_figure1",
    "FedFun Table 1": "fedfun_long",
    "FedFun Table 2": "fedfun_tables",
    "FedFun Table 3": "fedfun_long",
    "FedFun Table 4": "fedfun_tables",
    "FedFun Table 5": "no experiment: the data sets' sizes",
    "FedFun Figure 1": "no experiment: how the clusters split the data",
    "FedFun Figure 2": "no experiment: how the classes split the data",
    "FedFun Figure 3": "fedfun_widths",
    "FedFun Table 6": "fedfun_sensitivity",
    "FedFun Table 7": "fedfun_sensitivity",
}


def case(name: str) -> Case:
    """The declared case ``name``; KeyError naming the known ones otherwise."""
    for declared in CASES:
        if declared.name == name:
            return declared
    raise KeyError(f"no benchmark {name!r}; `python -m benchmarks list` lists them")
