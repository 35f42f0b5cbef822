"""Figures with a source: every figure the README, a page of docs/, docker/README.md or
benchmarks/README.md marks as quoted from a results file equals that file's value.

``<figure><!-- figure: <name> <path> --></figure>`` (``... <path> /1000 -->`` for a value quoted in
thousands) quotes ``benchmarks/results/<name>.json``: the path walks its dicts by key and its
lists by index (``runs.penguins.last.test_accuracy``), and the value, written with as many
decimals as the quote has, must equal the quote. ``<figure><!-- figure: <name>.md -->`` quotes a
Markdown report: the quoted number, as written, must occur in it as a whole number (0.86 does
not match inside 0.864). A re-run that changes a number fails here until the text is updated
from the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "docker" / "README.md",
    ROOT / "benchmarks" / "README.md",
]
# a minus after a digit or a marker is a range's dash (2.13-7.84), not a sign
NUMBER = r"((?:(?<![\d>])-)?[\d,]*\.?\d+)(%?)"
MARK = re.compile(NUMBER + r"<!-- figure: ([\w.-]+)(?: ([\w.\[\]-]+))?(?: /(\d+))? -->")


def quoted() -> list[tuple[str, str, str, str, str | None, str | None]]:
    """(page, quoted text, % sign, results file, path, divisor) of every marked figure."""
    found = []
    for page in PAGES:
        for match in MARK.finditer(page.read_text()):
            found.append((page.relative_to(ROOT).as_posix(), *match.groups()))
    return found


def value_at(source: str, path: str) -> float:
    """The number at ``path`` in ``benchmarks/results/<source>.json``."""
    node = json.loads((RESULTS / f"{source}.json").read_text())
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return float(node)


def written(value: float, like: str, percent: str) -> str:
    """``value`` written as ``like`` is: its decimals, its thousands separators, a percent."""
    value = value * 100 if percent else value
    decimals = len(like.split(".")[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}" if "," in like else f"{value:.{decimals}f}"
    return text


def in_report(text: str, source: str) -> bool:
    """Whether ``text`` occurs in the Markdown report ``source`` as a whole number."""
    number = rf"(?<![\d.])(?<!\d,){re.escape(text)}(?![\d]|[.,]\d)"
    return re.search(number, (RESULTS / source).read_text()) is not None


def test_the_readme_marks_its_figures():
    assert len([q for q in quoted() if q[0] == "README.md"]) >= 10


@pytest.mark.parametrize(
    ("page", "text", "percent", "source", "path", "divisor"),
    quoted(),
    ids=[f"{q[0]}:{q[4] or q[3]}:{q[1]}" for q in quoted()],
)
def test_a_quoted_figure_equals_its_source(page, text, percent, source, path, divisor):
    if source.endswith(".md"):
        assert path is None and divisor is None, f"{page}: a Markdown source takes no path"
        assert in_report(text, source), (
            f"{page} quotes {text}{percent} from {source}, which does not hold it: update the "
            "page from the file"
        )
        return
    assert path, f"{page}: a figure from {source}.json needs the path of its value"
    value = value_at(source, path) / int(divisor or 1)
    assert written(value, text, percent) == text, (
        f"{page} quotes {text}{percent} for {source}.json {path}"
        f"{f' / {divisor}' if divisor else ''}, which now holds {value}: update the page from "
        "the file"
    )


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_sample_log_lines_are_the_default_jobs(page):
    """The round line and the health line a page shows are those of the default job's run in
    readme.json (the same rounds, bytes and time)."""
    from server_app.recording import format_row

    run = json.loads((RESULTS / "readme.json").read_text())
    default = run["runs"]["default"]
    lines = (ROOT / page).read_text().splitlines()
    assert format_row(default["last"], default["last"]["round"]) in lines
    assert default["outcome"]["line"] in lines


def test_the_sample_health_lines_are_the_runs_they_stand_for():
    """docs/results.md's completed health line is that of the README's penguins run, its
    failed one that of FedAvg diverging on diabetes."""
    run = json.loads((RESULTS / "readme.json").read_text())
    lines = (ROOT / "docs" / "results.md").read_text().splitlines()
    assert run["runs"]["penguins"]["outcome"]["line"] in lines
    assert run["runs"]["fedavg-diverges"]["outcome"]["line"] in lines
