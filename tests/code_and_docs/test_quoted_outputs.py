"""Output the docs quote from commands stays what the commands print: make's "[Makefile:N:
target]" lines point at the recipe line that exits so, the preflight's refusals quoted in
docs/failures.md are what it prints now, and deploy.local's example log in docs/deployment.md is
the one ``benchmarks.deploy_examples`` recorded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from server_app import preflight

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAKE_ERROR = re.compile(r"make: \*\*\* \[Makefile:(\d+): ([\w-]+)\] Error (\d+)")
# the command of a recipe line that exits with each status
EXITS = {"2": "server_app.preflight", "1": "server_app.run_status"}


def _make_errors() -> list[tuple[str, int, str, str]]:
    return [
        (page.name, int(m.group(1)), m.group(2), m.group(3))
        for page in PAGES
        for m in MAKE_ERROR.finditer(page.read_text())
    ]


@pytest.mark.parametrize(("page", "line", "target", "status"), _make_errors())
def test_a_quoted_make_error_points_at_the_recipe_line_that_exits_so(page, line, target, status):
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipe = lines[line - 1]
    assert recipe.startswith("\t") and EXITS[status] in recipe, (page, line, recipe)
    head = next(x for x in reversed(lines[: line - 1]) if not x.startswith(("\t", "#")) and x)
    assert head.startswith(f"{target}:"), (page, line, head)


def test_the_quoted_refusals_of_the_preflight_are_what_it_prints(capsys):
    text = (ROOT / "docs" / "failures.md").read_text()
    quoted = re.findall(r'\$ make run RUN_CONFIG="(.+)"\n  (Invalid run config: .+)\n', text)
    assert len(quoted) >= 2
    for config, line in quoted:
        assert preflight.main(["--nodes", "10", config]) == 2
        assert capsys.readouterr().err.strip() == line, config


def test_the_quoted_deploy_local_log_is_the_recorded_one():
    text = (ROOT / "docs" / "deployment.md").read_text()
    block = text[text.index(".venv/bin/python -m deploy.local --nodes 2 --tls --auth \\") :]
    quoted = [
        line[2:] for line in block[: block.index("```")].splitlines() if line.startswith("# ")
    ]
    recorded = (ROOT / "benchmarks" / "results" / "deploy_examples.md").read_text().splitlines()
    assert len(quoted) >= 8 and [line for line in quoted if line not in recorded] == []
