"""benchmarks/README.md is generated from the declared cases, their result files and the written
conclusions (``python -m benchmarks.readme``): it is current, every result file belongs to one
case, and every case has its conclusion."""

from __future__ import annotations

import shlex
from collections import Counter

import pytest

from benchmarks import readme
from benchmarks.cases import CASES


def test_the_benchmarks_readme_is_current():
    assert readme.README.read_text() == readme.render(), (
        "benchmarks/README.md is not current: run python -m benchmarks.readme"
    )


def test_every_result_file_belongs_to_one_declared_case_and_exists():
    claimed = Counter(name for declared in CASES for name in declared.results)
    assert [name for name, count in claimed.items() if count > 1] == []
    on_disk = {path.name for path in readme.RESULTS.iterdir() if path.is_file()}
    assert sorted(on_disk - set(claimed)) == [], "result files no case declares"
    assert sorted(set(claimed) - on_disk) == [], "declared result files not on record"


def test_every_result_file_records_the_command_and_the_commit_that_wrote_it():
    """A report, or a JSON without a report of its stem, names its own command and commit (a plot
    or a report's JSON rides with the report)."""
    recorded = {
        name: readme.provenance(name)
        for declared in CASES
        for name, _ in readme.grouped(declared.results)
        if not name.endswith(".png")
    }
    unrecorded = [name for name, where in recorded.items() if not (where.command and where.commit)]
    assert unrecorded == []


def test_every_case_has_a_conclusion_and_every_conclusion_a_case():
    written = {path.stem for path in readme.CONCLUSIONS.glob("*.md")}
    assert written == {declared.name for declared in CASES}


def test_a_report_header_gives_its_provenance(tmp_path, monkeypatch):
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    (tmp_path / "x.md").write_text(
        "# X\n\n- command: `python -m benchmarks.x --n 2` (from the repository root)\n"
        "- wall time: 1.5 min (90 s)\n- cpu: AMD EPYC (2 cores available)\n"
        "- commit: abc1234\n- date: 2026-11-29 07:00 UTC\n\n| a | b |\n|--|--|\n| 1 | 2 |\n"
    )
    found = readme.provenance("x.md")
    assert (found.command, found.commit, found.wall) == (
        "python -m benchmarks.x --n 2",
        "abc1234",
        "1.5 min",
    )
    assert readme.markdown_tables((tmp_path / "x.md").read_text()) == [
        "| a | b |\n|--|--|\n| 1 | 2 |"
    ]
    assert readme.provenance("absent.md").commit == ""


# cases whose main report is not one run of ``python -m benchmarks run NAME``, and why
NOT_ONE_RUN = {
    "defaults": "assembled with --reuse a few families at a time; its report lists runs by commit",
    "devices": "several calls on lent GPU machines",
    "same_rows": "a subcommand: `write` the reference, `compare` two files",
}
# options that change how a benchmark runs or where it writes, not what it measures
HOW = {"--workers": 1, "--reuse": 0, "--fresh": 0, "--out": 1}


def measured(command: str) -> list[str]:
    """A recorded command's words without the HOW options."""
    words, kept = shlex.split(command), []
    while words:
        word = words.pop(0)
        if word in HOW:
            del words[: HOW[word]]
        else:
            kept.append(word)
    return kept


@pytest.mark.parametrize("declared", CASES, ids=lambda c: c.name)
def test_running_a_case_as_declared_is_the_run_that_wrote_its_main_report(declared):
    """`python -m benchmarks run NAME` passes the case's declared ``full`` arguments, so it
    must be the command the committed main report records (hist_time's --large was once left
    out, and the runner's run would have dropped its 10,000,000-row table)."""
    if declared.name in NOT_ONE_RUN:
        return
    recorded = readme.provenance(declared.results[0]).command
    expected = ["python", "-m", f"benchmarks.{declared.name}", *declared.full]
    assert measured(recorded) == expected, (
        f"{declared.results[0]} was written by `{recorded}`; declare its arguments in "
        f"benchmarks/cases.py (full=...) or run the case again"
    )
