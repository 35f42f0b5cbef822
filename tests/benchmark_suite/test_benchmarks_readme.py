"""benchmarks/README.md is generated from the declared cases, their result files and the written
conclusions (``python -m benchmarks.readme``): it is current, every result file belongs to one
case, and every case has its conclusion."""

from __future__ import annotations

from collections import Counter

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
