"""docs/architecture.md's recipe for a new algorithm family, followed to the letter in a copy of
the project: a family ``toy-local`` (each node fits its own tree, the server reports the spread
of their accuracies; one key, ``toy.depth``) gets its declaration and key table in
``run_config/``, its server half in ``strategies/``, its client half in ``client_app/``, an
import and an entry in each of ``run_config/families.py``, ``strategies/registry.py`` and
``client_app/registry.py``, and its client module in the ClientApp's layer contract of
``pyproject.toml``; ``python -m run_config.reference`` then writes its key. In the copy, the
import contracts hold (``lint-imports``), the registries agree
(``tests/lifecycle/test_registries.py``) and a run of the family completes. A step the recipe
leaves out, or one it names that the code no longer needs, fails here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE_FILES = (
    "run_config/families.py",
    "strategies/registry.py",
    "client_app/registry.py",
    "pyproject.toml",
)

DECLARATION = '''"""``toy-local``: each node fits its own tree; nothing global (the recipe)."""

from __future__ import annotations

from dataclasses import dataclass

from functions.protocol import EVALUATE, QUERY_NODE, TRAIN
from run_config.common import RunSettings
from run_config.family import Algorithm, Family, Table
from run_config.keys import Key, build, read_keys, within

TOY_KEYS = (Key("toy.depth", int, 2, "depth of each node's tree", within(1, 8)),)


@dataclass(frozen=True)
class ToySettings:
    depth: int


def toy_settings(settings: RunSettings) -> ToySettings:
    return build(ToySettings, read_keys(settings.raw, TOY_KEYS), TOY_KEYS)


TOY = Family(
    "toy-local",
    (Algorithm("toy-local", "one tree per node"),),
    toy_settings,
    tables=(Table("`toy.*`", "the recipe's toy family", TOY_KEYS),),
    message_types=(TRAIN, EVALUATE, QUERY_NODE),
)
'''

SERVER_HALF = '''"""Server half of ``toy-local``: it only asks, and reports the nodes' spread."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from functions.protocol import CONFIG, EVALUATE, METRICS, SERVER_ROUND, TRAIN
from run_config.common import RunSettings
from strategies.base import FederatedStrategy
from strategies.evaluation import checked_metrics, spread_over_nodes
from strategies.screening import exact_records
from tasks.datasets import TaskData


class ToyStrategy(FederatedStrategy):
    label = "toy-local"

    def summary(self) -> None:
        """Nothing to configure."""

    def _messages(self, server_round: int, kind: str, nodes: list[int]) -> list[Message]:
        content = RecordDict({CONFIG: ConfigRecord({SERVER_ROUND: server_round})})
        return [Message(content, n, kind, group_id=str(server_round)) for n in nodes]

    def train_messages(
        self, server_round: int, nodes: list[int], arrays: ArrayRecord, config: ConfigRecord,
        grid: Grid,
    ) -> Iterable[Message]:
        return self._messages(server_round, TRAIN, nodes)

    def aggregate(self, server_round: int, replies: Iterable[Message]):
        return None, {"participants": sum(not r.has_error() for r in replies)}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self._messages(server_round, EVALUATE, self.book.node_ids)

    def check_evaluation(self, reply: Message) -> dict[str, float]:
        record = exact_records(reply.content, {METRICS: MetricRecord})[METRICS]
        return checked_metrics(record, ["test_accuracy"])

    def evaluation_metrics(self, accepted: dict[int, dict[str, float]]) -> dict[str, float]:
        return spread_over_nodes(accepted)


def build_toy(settings: RunSettings, task: TaskData) -> ToyStrategy:
    return ToyStrategy(settings.num_rounds)
'''

CLIENT_HALF = '''"""Client half of ``toy-local``: this node's own tree, fitted and evaluated."""

from __future__ import annotations

import numpy as np
from flwr.app import MetricRecord, RecordDict
from sklearn.tree import DecisionTreeClassifier

from client_app.job import ClientJob
from client_app.node_info import describe_node
from functions.protocol import EVALUATE, METRICS, QUERY_NODE, TRAIN
from run_config.toy import ToySettings


def _fit(job: ClientJob[ToySettings, None]) -> DecisionTreeClassifier:
    data = job.data
    x = data.x_train.reshape(len(data.x_train), -1)
    return DecisionTreeClassifier(max_depth=job.family.depth, random_state=0).fit(x, data.y_train)


def train(job: ClientJob[ToySettings, None]) -> RecordDict:
    _fit(job)
    return RecordDict()


def evaluate(job: ClientJob[ToySettings, None]) -> RecordDict:
    data = job.data
    predicted = _fit(job).predict(data.x_test.reshape(len(data.x_test), -1))
    accuracy = float(np.mean(predicted == data.y_test))
    return RecordDict({METRICS: MetricRecord({"test_accuracy": accuracy})})


HANDLERS = {TRAIN: train, EVALUATE: evaluate, QUERY_NODE: describe_node}
'''

RUN = """
import json, sys
from pathlib import Path
from tests.helpers import run_app
run = run_app(Path(sys.argv[1]), 3, algorithm="toy-local", **{"num-server-rounds": 2})
print(json.dumps(run.rows))
"""


def add_entry(path: Path, opening: str, line: str) -> None:
    """``line`` as the last entry of the literal that opens with ``opening`` (its order is the
    catalogue's)."""
    text = path.read_text()
    start = text.index(opening)
    end = text.index("\n}\n", start) + 1
    path.write_text(text[:end] + line + "\n" + text[end:])


def follow_the_recipe(app: Path) -> None:
    """The three modules, then an import and an entry in each registry, then the contract."""
    (app / "run_config" / "toy.py").write_text(DECLARATION)
    (app / "strategies" / "toy.py").write_text(SERVER_HALF)
    (app / "client_app" / "toy.py").write_text(CLIENT_HALF)
    families = app / "run_config" / "families.py"
    text = families.read_text().replace(
        "from tasks.errors", "from run_config.toy import TOY\nfrom tasks.errors", 1
    )
    families.write_text(
        re.sub(r"(FAMILIES: tuple\[Family, \.\.\.\] = \([^)]*)\)", r"\1, TOY)", text)
    )
    registry = app / "strategies" / "registry.py"
    text = registry.read_text()
    text = text.replace(
        "from tasks.datasets import TaskData",
        "from run_config.toy import TOY\nfrom strategies.toy import build_toy\n"
        "from tasks.datasets import TaskData",
    )
    registry.write_text(text)
    add_entry(registry, "STRATEGIES: dict[Family, StrategyBuilder] = {", "    TOY: build_toy,")
    client = app / "client_app" / "registry.py"
    text = client.read_text().replace(
        "from client_app import fedavg,",
        "from client_app import toy\nfrom client_app import fedavg,",
    )
    client.write_text(
        text.replace("from tasks.errors", "from run_config.toy import TOY\nfrom tasks.errors")
    )
    add_entry(client, "CLIENT_HALVES: dict[Family", "    TOY: toy.HANDLERS,")
    pyproject = app / "pyproject.toml"
    text = pyproject.read_text()
    families_layer = re.search(r'^    "fedavg \| feddr[^"]*', text, re.MULTILINE)[0]
    pyproject.write_text(text.replace(families_layer, families_layer + " | toy", 1))


def copy_of_the_project(target: Path) -> Path:
    """The tracked files of this checkout, as they are now (uncommitted changes too)."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def test_the_recipe_names_the_files_it_takes():
    recipe = (ROOT / "docs" / "architecture.md").read_text().split("**Adding an algorithm")[1]
    recipe = recipe.split("\n\n")[0]
    assert all(f"`{name}`" in recipe for name in RECIPE_FILES), recipe
    assert "layer contract" in recipe and "python -m run_config.reference" in recipe


@pytest.mark.e2e
def test_a_family_added_by_the_recipe_passes_the_contracts_and_runs(tmp_path):
    app = copy_of_the_project(tmp_path / "app")
    follow_the_recipe(app)

    def in_copy(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(args, cwd=app, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done

    python = sys.executable
    in_copy(python, "-m", "run_config.reference")
    assert re.search(r'^"toy\.depth" = 2$', (app / "pyproject.toml").read_text(), re.MULTILINE)
    assert "`toy.depth`" in (app / "docs" / "configuration.md").read_text()
    lint = in_copy(str(Path(python).parent / "lint-imports"))
    assert "0 broken" in lint.stdout and "client_app.toy" not in lint.stdout
    in_copy(
        python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/lifecycle/test_registries.py"
    )
    rows = json.loads(in_copy(python, "-c", RUN, str(tmp_path / "out")).stdout.splitlines()[-1])
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert all(r["failures"] == 0 and r["participants"] == 3 for r in rows[1:])
    assert all(0 < r["test_accuracy_mean"] <= 1 for r in rows[1:])
