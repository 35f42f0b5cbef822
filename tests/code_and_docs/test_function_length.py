"""No production function is over ``MAX_LINES`` lines (from its ``def`` to its last line, as
``ast`` counts them): every package of the checkout (a top-level folder with an ``__init__.py``)
except the benchmarks and the tests. A longer function is split into named steps.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60
NOT_PRODUCTION = {"benchmarks", "tests", "build", ".venv"}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def production_packages() -> list[Path]:
    """The checkout's top-level packages, less those of ``NOT_PRODUCTION``."""
    return sorted(
        init.parent for init in ROOT.glob("*/__init__.py") if init.parent.name not in NOT_PRODUCTION
    )


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function under ``node`` with its qualified name (``Class.method``,
    ``outer.inner``), nested ones included."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield name, child
            yield from functions(child, f"{name}.")
        else:
            yield from functions(child, prefix)


def lengths(path: Path) -> Iterator[tuple[str, int]]:
    """Each function of the file at ``path`` with its length in lines."""
    for name, function in functions(ast.parse(path.read_text(), filename=str(path))):
        yield name, function.end_lineno - function.lineno + 1


def test_the_walk_sees_every_production_package():
    names = {package.name for package in production_packages()}
    assert {"server_app", "client_app", "strategies", "oracles", "functions", "deploy"} <= names
    assert not names & NOT_PRODUCTION


def test_no_production_function_is_over_60_lines():
    too_long = [
        f"{path.relative_to(ROOT).as_posix()}: {name} has {length} lines"
        for package in production_packages()
        for path in sorted(package.rglob("*.py"))
        for name, length in lengths(path)
        if length > MAX_LINES
    ]
    assert too_long == [], f"over {MAX_LINES} lines (split into named steps): {too_long}"
