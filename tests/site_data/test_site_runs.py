"""Sites' own files through the real ServerApp and ClientApp (in-process engine): every family
trains on the schema the sites agree, a site whose file is bad is left out with a reason that
names the file and the problem (config.json records it), and the run goes on."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from server_app.app import InvalidRunConfig
from tasks import site_files
from tasks.sites import write_sites
from tests.helpers import run_app

PENGUINS = {
    "task": "site",
    "data.label": "species",
    "data.categorical": "sex",
    "num-server-rounds": 2,
}
FAMILIES = [
    ("ffgb", {"ffgb.learner": "tree"}),
    ("ffgb", {}),
    ("ffgb-c", {"ffgb.learner": "tree"}),
    ("fedfw", {}),
    ("fedavg", {}),
    ("fedprox", {}),
    ("feddr", {}),
    ("fedavg-proj", {}),
    ("fedfun", {"fedfun.local-steps": 5}),
    ("fedxgb-bagging", {}),
    ("fedxgb-cyclic", {}),
    ("fedxgb-hist", {}),
]


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


def site_run(tmp_path, folder, node_configs=None, **overrides):
    return run_app(
        tmp_path,
        3,
        node_configs,
        **{**PENGUINS, "dataset-path": f"{folder}/{{partition-id}}.csv", **overrides},
    )


def sites_record(run) -> dict:
    return json.loads((run.out_dir / "config.json").read_text())["sites"]


@pytest.mark.parametrize(
    "algorithm, keys", FAMILIES, ids=[f"{a}-{k.get('ffgb.learner', '')}" for a, k in FAMILIES]
)
def test_every_family_trains_on_the_sites_files(tmp_path, penguins, algorithm, keys):
    run = site_run(tmp_path, penguins, algorithm=algorithm, plots=True, **keys)
    record = sites_record(run)
    assert record["partitions"] == [0, 1, 2] and record["left-out"] == {}
    assert [c["name"] for c in record["schema"]["columns"]] == [
        "bill_depth_mm",
        "bill_length_mm",
        "body_mass_g",
        "flipper_length_mm",
        "sex",
        "year",
    ]
    assert record["schema"]["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    last = run.rows[-1]
    accuracy = last.get("test_accuracy", last.get("test_accuracy_mean"))
    assert accuracy is not None and 0.0 <= accuracy <= 1.0 and last["failures"] == 0
    own = [last[f"site{p}_test_accuracy"] for p in range(3)]  # each site's own test rows
    assert all(0.0 <= a <= 1.0 for a in own)
    assert (run.out_dir / "sites_vs_round.png").stat().st_size > 0
    assert all(math.isfinite(v) for v in last.values() if isinstance(v, float))
    agreement = run.rows[0]  # round 0 counts the schema agreement's facts, schema and moments
    assert agreement["bytes_up"] > 3 * 100 and agreement["bytes_down"] > 3 * 500


def test_columns_in_another_order_change_nothing(tmp_path, penguins):
    first = site_run(tmp_path / "a", penguins, algorithm="ffgb", **{"ffgb.learner": "tree"})
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for pid in range(3):
        frame = pd.read_csv(penguins / f"{pid}.csv")
        frame[list(reversed(frame.columns))].to_csv(shuffled / f"{pid}.csv", index=False)
    again = site_run(tmp_path / "b", shuffled, algorithm="ffgb", **{"ffgb.learner": "tree"})
    keep = ("test_loss", "test_accuracy", "train_loss")
    assert [{k: r.get(k) for k in keep} for r in first.rows] == [
        {k: r.get(k) for k in keep} for r in again.rows
    ]


def bad_inputs(tmp_path, penguins):
    """(file or node config of partition 2, what its left-out reason must say)."""
    good = pd.read_csv(penguins / "2.csv")
    truncated = (penguins / "2.csv").read_bytes()[:-40] + b'"unclosed'
    write = {
        "empty.csv": b"",
        "truncated.csv": truncated,
        "broken.parquet": b"PAR1 not parquet",
    }
    for name, data in write.items():
        (tmp_path / name).write_bytes(data)
    frames = {
        "nolabel.csv": good.drop(columns="species"),
        "text.csv": good.assign(bill_length_mm=["long"] + list(good.bill_length_mm[1:])),
        "inf.csv": good.assign(body_mass_g=[math.inf] + list(good.body_mass_g[1:])),
        "one.csv": good.iloc[:1],
        "unseen.csv": good.assign(species="Emperor"),
    }
    for name, frame in frames.items():
        frame.to_csv(tmp_path / name, index=False)
    (tmp_path / "folder.csv").mkdir()
    return [
        ({"dataset-path": str(tmp_path / "missing.csv")}, "missing.csv: no such file"),
        ({"dataset-path": str(tmp_path / "folder.csv")}, "folder.csv: a folder"),
        ({"dataset-path": str(tmp_path / "empty.csv")}, "empty.csv: empty file"),
        ({"dataset-path": str(tmp_path / "truncated.csv")}, "truncated.csv: unreadable CSV"),
        ({"dataset-path": str(tmp_path / "broken.parquet")}, "broken.parquet: unreadable PARQUET"),
        ({"dataset-path": str(tmp_path / "nolabel.csv")}, "nolabel.csv: no column 'species'"),
        (
            {"dataset-path": str(tmp_path / "text.csv")},
            "column 'bill_length_mm' is categorical here but numeric at the other sites",
        ),
        ({"dataset-path": str(tmp_path / "inf.csv")}, "'body_mass_g' holds an infinite value"),
        ({"dataset-path": str(tmp_path / "one.csv")}, "one.csv: 1 row; a site needs at least 2"),
        (
            {"dataset-test-path": str(tmp_path / "unseen.csv")},
            "'species' holds 'Emperor', which is not one of the agreed values",
        ),
        ({"dataset-max-bytes": 100}, "more than the limit of 100 (node config dataset-max-bytes)"),
    ]


def test_each_bad_input_leaves_its_site_out_with_a_reason_and_the_run_goes_on(tmp_path, penguins):
    for case, (node_config, reason) in enumerate(bad_inputs(tmp_path, penguins)):
        run = site_run(
            tmp_path / f"run{case}",
            penguins,
            [{}, {}, node_config],
            algorithm="ffgb",
            **{"ffgb.learner": "tree", "num-server-rounds": 1},
        )
        record = sites_record(run)
        assert record["partitions"] == [0, 1], node_config
        (left_out,) = record["left-out"].values()
        assert reason in left_out, (node_config, left_out)
        assert "Traceback" not in left_out
        assert run.rows[-1]["failures"] == 0  # left out before round 1, not a round's failure


def test_a_regression_site_table_reports_each_sites_error(tmp_path):
    folder = tmp_path / "cars"
    write_sites("cars", folder)
    run = run_app(
        tmp_path / "run",
        3,
        None,
        task="site",
        algorithm="ffgb-l",
        **{
            "data.kind": "regression",
            "data.label": "Miles_per_Gallon",
            "dataset-path": f"{folder}/{{partition-id}}.csv",
            "num-server-rounds": 2,
            "ffgb.oracle-steps": 50,
        },
    )
    record = sites_record(run)
    assert record["partitions"] == [0, 1, 2] and record["schema"]["classes"] == []
    mean, std = record["schema"]["target"]
    assert 20 < mean < 27 and 6 < std < 9  # miles per gallon, from federated sums
    last = run.rows[-1]
    assert all(math.isfinite(last[f"site{p}_test_mse"]) for p in range(3))
    assert math.isfinite(last["test_mse"])


def test_sites_that_share_one_label_are_refused_by_name_for_cross_entropy(tmp_path, penguins):
    only_adelie = [{"dataset-path": str(penguins / "2.csv")}] * 3  # Torgersen: Adelie only
    with pytest.raises(InvalidRunConfig, match="ffgb needs at least 2 classes; the task has 1"):
        site_run(tmp_path, penguins, only_adelie, algorithm="ffgb", **{"ffgb.learner": "tree"})


def test_when_every_site_fails_the_run_names_every_sites_reason(tmp_path, penguins):
    with pytest.raises(InvalidRunConfig) as raised:
        site_run(tmp_path, tmp_path / "nowhere", algorithm="ffgb")
    message = str(raised.value)
    assert message.startswith("no site's data could be described; node ")
    assert [f"nowhere/{p}.csv: no such file" in message for p in range(3)] == [True] * 3
    with pytest.raises(InvalidRunConfig) as raised:  # the label's name in the wrong case
        site_run(tmp_path / "b", penguins, algorithm="ffgb", **{"data.label": "Species"})
    assert str(raised.value).count("no column 'Species'") == 3
