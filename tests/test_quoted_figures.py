"""Figures with a source: every figure the README or a page of docs/ marks as quoted from a
results file (``<figure><!-- figure: <results file> <path> --></figure>``, or ``... <path> /1000
-->`` for a value quoted in thousands) equals that file's value, written with as many decimals
as the quote has. A re-run that changes a number fails
here until the text is updated from the file.

The results file is ``benchmarks/results/<name>.json``; the path walks its dicts by key and
its lists by index (``runs.penguins.last.test_accuracy``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"(-?[\d,]*\.?\d+)(%?)<!-- figure: ([\w.-]+) ([\w.\[\]-]+)(?: /(\d+))? -->")


def quoted() -> list[tuple[str, str, str, str, str, str | None]]:
    """(page, quoted text, % sign, results file, path, divisor) of every marked figure."""
    found = []
    for page in PAGES:
        for match in MARK.finditer(page.read_text()):
            found.append((page.name, *match.groups()))
    return found


def value_at(source: str, path: str) -> float:
    node = json.loads((ROOT / "benchmarks" / "results" / f"{source}.json").read_text())
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return float(node)


def written(value: float, like: str, percent: str) -> str:
    """``value`` written as ``like`` is: its decimals, its thousands separators, a percent."""
    value = value * 100 if percent else value
    decimals = len(like.split(".")[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}" if "," in like else f"{value:.{decimals}f}"
    return text


def test_the_readme_marks_its_figures():
    assert len([q for q in quoted() if q[0] == "README.md"]) >= 10


@pytest.mark.parametrize(
    ("page", "text", "percent", "source", "path", "divisor"),
    quoted(),
    ids=[f"{q[0]}:{q[4]}" for q in quoted()],
)
def test_a_quoted_figure_equals_its_source(page, text, percent, source, path, divisor):
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

    run = json.loads((ROOT / "benchmarks" / "results" / "readme.json").read_text())
    default = run["runs"]["default"]
    lines = (ROOT / page).read_text().splitlines()
    assert format_row(default["last"], default["last"]["round"]) in lines
    assert default["outcome"]["line"] in lines
