"""The README and docs/ say what to type; the commands marked quick run here, as written.

A shell block whose fence is opened with ```` ```bash quick ```` is quick: every command in it runs
offline in seconds, and each one runs here with this virtualenv's python (``python``,
``python3`` and ``.venv/bin/python`` all mean it) in a temporary folder, so whatever it writes
(``--out sites/penguins``) lands there; it must exit 0. Only ``python -m <module>`` commands may be
marked quick (nothing that starts an engine, a build or a download). The other commands of the
README and docs are run by hand (the README's examples: see its text for what each took).

The pages' relative links (``docs/results.md``, ``../docker/README.md``, ``failures.md#...``)
must name files that exist and, after ``#``, a heading of that file.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
QUICK = re.compile(r"^```bash quick[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
PYTHONS = ("python", "python3", ".venv/bin/python")
TIMEOUT_S = 120


def commands(markdown: str) -> Iterator[tuple[str, ...]]:
    """Each command of the text's quick blocks, as words: continuation lines joined, comments and
    blank lines left out."""
    for block in QUICK.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            words = tuple(shlex.split(line, comments=True))
            if words:
                yield words


def quick_commands() -> dict[tuple[str, ...], str]:
    """Every quick command of the README and docs/, once (``.venv/bin/python`` is ``python``),
    with the first page that shows it."""
    found: dict[tuple[str, ...], str] = {}
    for page in PAGES:
        for words in commands(page.read_text(encoding="utf-8")):
            if words[0] in PYTHONS:
                words = ("python", *words[1:])
            found.setdefault(words, str(page.relative_to(ROOT)))
    return found


QUICK_COMMANDS = quick_commands()


def test_commands_are_read_from_quick_blocks_only():
    text = (
        "```bash\nmake run\n```\n"
        "```bash quick\n# a comment\npython -m a.b --x 1 \\\n    \"k='v w'\"   # why\n\n"
        ".venv/bin/python -m c\n```\n"
    )
    assert list(commands(text)) == [
        ("python", "-m", "a.b", "--x", "1", "k='v w'"),
        (".venv/bin/python", "-m", "c"),
    ]


def test_the_readme_and_the_docs_have_quick_commands():
    pages = set(QUICK_COMMANDS.values())
    assert "README.md" in pages and any(page.startswith("docs/") for page in pages), pages


@pytest.mark.parametrize("words", list(QUICK_COMMANDS), ids=" ".join)
def test_a_quick_command_is_a_python_module_run(words):
    assert words[0] in PYTHONS and words[1] == "-m" and len(words) > 2, (
        f"{QUICK_COMMANDS[words]}: only `python -m <module> ...` may be marked quick: "
        f"{shlex.join(words)}"
    )


@pytest.mark.parametrize("words", list(QUICK_COMMANDS), ids=" ".join)
def test_a_quick_command_runs_offline_and_exits_0(words, tmp_path):
    if words[0] not in PYTHONS:
        pytest.fail(f"not a python command: {shlex.join(words)}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    }
    done = subprocess.run(
        [sys.executable, *words[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, (
        f"{QUICK_COMMANDS[words]}: `{shlex.join(words)}` exited {done.returncode}\n"
        f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    return {anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_files_and_headings_that_exist(page):
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}: no such file"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked), f"{page.name}: {target}: no such heading"
