"""The kinds of claim the docs made that drifted from the code, checked against it: the folders
docs/architecture.md lays out are the project's and the modules it names in each exist; every
``make`` target the README and docs/ name is one of the Makefile's; every ``python -m`` module
they name can be imported; tests/README.md maps every test file; nothing points into
benchmarks/README.md by section number (it is generated, one numbered section per case, so the
numbers shift when a case is added), and every case named there is declared.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from benchmarks.cases import CASES

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
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


def test_the_tests_map_lists_every_test_file_once_in_its_folders_row():
    listed = [
        f"{folder}{name}"
        for folder, names in re.findall(
            r"^\| `(\w+/)` \|.*\| (`test_.*) \|$", (ROOT / "tests" / "README.md").read_text(), re.M
        )
        for name in re.findall(r"`(test_\w+\.py)`", names)
    ]
    files = sorted(path.relative_to(ROOT / "tests").as_posix() for path in TESTS.rglob("test_*.py"))
    assert sorted(listed) == files
    assert not list(TESTS.glob("test_*.py"))  # no test file outside an area's folder


# the folders whose modules and scripts may point into benchmarks/README.md
TEXT_FOLDERS = (
    "benchmarks", "client_app", "deploy", "functions", "oracles", "run_config", "server_app",
    "strategies", "tasks", "testing",
)  # fmt: skip
BENCH_README = re.compile(r"benchmarks/README\.md`?(?:\]\([^)\s]*\))?")
# "section 18", "sections 16-16d", "§ 9", or a bare "5b" right after the path; not a paper's
# "section 4.2", "section 5 of the FFGB paper" or "the paper's section 3"
BY_NUMBER = re.compile(
    r"(?<!paper's )(?<!paper, )(?:\bsections?|§)\s*\d+[a-z]?\b(?!\.\d)(?!\s+of\b)"
    r"|^[ \t]+\d+[a-z]?(?=[\s,;)|]|$)",
    re.IGNORECASE,
)
# "case `latency`", "cases `a`, `b` and `c`", "the `latency` case"; not a docstring's ``name``
CASE_LIST = re.compile(r"(?<!\bin )\bcases?\s+((?:`\w+`(?!`)(?:\s*,\s*|\s+and\s+|\s+or\s+)?)+)")
THE_CASE = re.compile(r"\bthe\s+`([a-z]\w*)`\s+case\b")


def text_files() -> list[Path]:
    """The READMEs (benchmarks/README.md with its conclusions too), docs/, and the modules and
    scripts of the packages, benchmarks/ and testing/."""
    pages = [ROOT / "README.md", ROOT / "docker" / "README.md", ROOT / "tests" / "README.md"]
    pages.append(ROOT / "benchmarks" / "README.md")
    pages += sorted((ROOT / "docs").glob("*.md"))
    for folder in TEXT_FOLDERS:
        pages += sorted(
            path
            for suffix in ("*.py", "*.sh")
            for path in (ROOT / folder).rglob(suffix)
            if "results" not in path.relative_to(ROOT).parts
        )
    return pages


def section_references(text: str) -> list[str]:
    """Each place that names a section of benchmarks/README.md by number: a number in the rest of
    the sentence (to its full stop or a blank line) after the path."""
    found = []
    for match in BENCH_README.finditer(text):
        rest = re.split(r"\.(?=\s|$)|\n\s*\n", text[match.end() : match.end() + 300])[0]
        if text[match.end() : match.end() + 1] == "#" and rest[1:2].isdigit():
            found.append(match[0] + rest[:12])  # an anchor of a numbered heading
        elif number := BY_NUMBER.search(rest):
            found.append(" ".join((match[0] + rest[: number.end()]).split()))
    return found


def case_mentions(text: str) -> list[str]:
    """Every benchmark case the text names as one: "case `x`", "cases `x` and `y`", "the `x`
    case"."""
    names = [name for group in CASE_LIST.findall(text) for name in re.findall(r"`(\w+)`", group)]
    return names + THE_CASE.findall(text)


@pytest.mark.parametrize(
    ("text", "references"),
    [
        ("Figures: benchmarks/README.md, section 18. In short", 1),
        ("[benchmarks/README.md](../benchmarks/README.md) section 16c), every row", 1),
        ("(0.1 s a message, benchmarks/README.md section\n    18). Keyed", 1),
        ("| 3.90 s | benchmarks/README.md 5b |", 1),
        ("[benchmarks/README.md](benchmarks/README.md): scale (sections 16-16d) and", 1),
        ("(benchmarks/README.md#18-deployment-round-latency)", 1),
        ("(benchmarks/README.md, case `latency`, gives a deployment's round latency)", 0),
        ("(see benchmarks/README.md; the paper's section 4.2 schedule)", 0),
        ("benchmarks/README.md, case `ffgb_distillation` (section 5 of the FFGB paper)", 0),
        ("see benchmarks/README.md. Section 5 of the paper", 0),
        ("benchmarks/README.md (Section 22)", 1),
        ("benchmarks/README.md, 3 seeds, section 4.1 of the paper", 0),
    ],
)
def test_the_section_number_check_tells_the_readme_from_the_papers(text, references):
    assert len(section_references(text)) == references


def test_nothing_points_into_the_benchmarks_readme_by_section_number():
    found = {
        (path.relative_to(ROOT).as_posix(), reference)
        for path in text_files()
        for reference in section_references(path.read_text(encoding="utf-8"))
    }
    assert found == set(), "name the case instead: benchmarks/README.md, case `NAME`"


def test_every_benchmark_case_the_docs_and_modules_name_is_declared():
    declared = {case.name for case in CASES}
    named = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in text_files()
        for name in case_mentions(path.read_text(encoding="utf-8"))
    }
    assert named and {(path, name) for path, name in named if name not in declared} == set()
