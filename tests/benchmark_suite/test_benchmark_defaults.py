"""benchmarks.defaults: a table assembled with --reuse says which commit each run ran at."""

from benchmarks.defaults import provenance, render


def run(family: str, task: str, commit: str | None) -> dict:
    row = {"family": family, "task": task, "last": {"test_accuracy": 0.9}, "error": None}
    return row if commit is None else {**row, "commit": commit}


def test_each_commit_is_listed_with_its_runs_and_families() -> None:
    text = provenance(
        [
            run("fedavg", "iris", "abc1234"),
            run("fedfw", "iris", "abc1234"),
            run("psr", "iris", None),
        ]
    )
    assert "- `abc1234`: 2 runs (fedavg, fedfw)" in text
    assert "- `not recorded`: 1 run (psr)" in text
    assert text.index("abc1234") < text.index("not recorded")


def test_the_report_names_the_commits() -> None:
    data = {
        "tasks": ["iris"],
        "families": ["fedavg", "fedfw"],
        "trivial": {"iris": 0.333},
        "results": [run("fedavg", "iris", "abc1234"), run("fedfw", "iris", "def5678")],
    }
    body = render(data)
    assert "`abc1234`: 1 run (fedavg)" in body
    assert "`def5678`: 1 run (fedfw)" in body
