"""The kinds of claim the docs made that drifted from the code, checked against it: the folders
docs/architecture.md lays out are the project's and the modules it names in each exist; every
``make`` target the README and docs/ name is one of the Makefile's; every ``python -m`` module
they name can be imported; tests/README.md maps every test file.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "docker" / "README.md",
    ROOT / "benchmarks" / "README.md",
)
LAYOUT = re.compile(r"^# How the code is organised.*?^```\n(.*?)^```", re.MULTILINE | re.DOTALL)


def layout() -> dict[str, str]:
    """docs/architecture.md's layout block: each folder and what it says of it."""
    block = LAYOUT.search((ROOT / "docs" / "architecture.md").read_text())[1]
    folders: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        if match := re.match(r"^(\S+)\s*(.*)$", line):
            current, text = match[1], match[2]
            folders[current] = text
        else:
            folders[current] += " " + line.strip()
    return folders


def tracked_folders() -> set[str]:
    """The repository's top-level folders (git's files; hidden ones left out)."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {f.split("/")[0] + "/" for f in files if "/" in f and not f.startswith(".")}


def test_the_layout_lists_every_folder_and_no_other():
    listed = {name for name in layout() if name.endswith("/")}
    assert listed == tracked_folders()


def test_every_module_the_layout_names_is_in_its_folder():
    missing = []
    for folder, text in layout().items():
        if not folder.endswith("/"):
            continue
        for name in re.findall(r"\b([\w/]+\.py)\b", text):
            path = ROOT / (name if "/" in name else folder + name)
            if not path.exists():
                missing.append(f"{folder}: {name}")
    assert missing == []


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))


def test_every_make_target_the_docs_name_is_the_makefiles():
    targets = make_targets()
    named = {
        (page.relative_to(ROOT).as_posix(), target)
        for page in PAGES
        for target in re.findall(r"(?:`|^\s*)make ([a-z][\w-]*)", page.read_text(), re.MULTILINE)
    }
    assert named and {(page, t) for page, t in named if t not in targets} == set()


def test_every_python_module_the_docs_run_exists():
    named = {
        (page.relative_to(ROOT).as_posix(), module)
        for page in PAGES
        for module in re.findall(r"python3? -m ([\w.]+)", page.read_text())
    }
    missing = {(page, m) for page, m in named if importlib.util.find_spec(m) is None}
    assert named and missing == set()


def test_the_tests_map_lists_every_test_file_once():
    listed = re.findall(r"`(test_\w+\.py)`", (ROOT / "tests" / "README.md").read_text())
    files = sorted(path.name for path in (ROOT / "tests").glob("test_*.py"))
    assert sorted(listed) == files
