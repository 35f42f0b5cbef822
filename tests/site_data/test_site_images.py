"""Sites that hold image folders (one sub-folder per class): read as the table an NPZ of the same
images gives, so image and NPZ sites agree and train alike; every fault of a folder names the
file; a changed folder is read again; bad folders leave their site out through the real apps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tasks import site_files
from tasks.schema_agreement import agree
from tasks.site_facts import site_facts
from tasks.site_files import SiteDataError, read_site_file
from tasks.site_images import MAX_VALUES
from tasks.site_schema import CLASSIFICATION, SiteSpec
from tasks.sites import write_image_sites
from tests.helpers import run_app

DIGITS = {
    "task": "site",
    "data.label": "y",
    "algorithm": "ffgb",
    "ffgb.learner": "tree",
    "num-server-rounds": 2,
}


@pytest.fixture(autouse=True)
def fresh_cache():
    site_files._CACHE.clear()


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("digits")
    write_image_sites(folder)
    return folder


def as_npz(image_folder: Path, out: Path) -> Path:
    """The images of ``image_folder`` as an NPZ file (x: rows x 8 x 8, y: class names)."""
    files = sorted(image_folder.glob("*/*.png"), key=lambda f: (f.parent.name, f.name))
    x = np.stack([np.asarray(Image.open(f)) for f in files])
    np.savez(out, x=x, y=np.array([f.parent.name for f in files]))
    return out


def image(path: Path, size=(8, 8), mode="L", value=7) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value if mode == "L" else (value,) * len(mode)).save(path)
    return path


def test_the_image_sites_are_split_by_label_and_read_as_pixel_columns(digits):
    manifest = json.loads((digits / "sites.json").read_text())
    rows = [manifest["sites"][str(p)]["rows"] for p in range(3)]
    assert sum(rows) == 1797 and min(rows) > 100
    table = read_site_file(digits / "0")
    assert table.rows == rows[0]
    assert list(table.frame.columns) == [f"x{i}" for i in range(64)] + ["y"]
    assert table.frame.filter(like="x").to_numpy().max() == 255.0
    labels = [set(read_site_file(digits / str(p)).frame["y"]) for p in range(3)]
    counts = [read_site_file(digits / str(p)).frame["y"].value_counts() for p in range(3)]
    assert set().union(*labels) == {str(d) for d in range(10)}
    assert any(c.max() > 3 * c.min() for c in counts)  # label skew across classes


def test_an_image_folder_is_the_table_of_an_npz_of_its_images(digits, tmp_path):
    folder = digits / "1"
    images, npz = read_site_file(folder), read_site_file(as_npz(folder, tmp_path / "1.npz"))
    pd.testing.assert_frame_equal(images.frame, npz.frame)
    spec = SiteSpec(CLASSIFICATION, "y")
    assert site_facts(images, spec) == site_facts(npz, spec)
    names = [c.name for c in agree(spec, {1: site_facts(images, spec)}).schema.columns]
    assert names == [f"x{i}" for i in range(64)]  # natural order: x2 before x10


def test_image_and_npz_sites_train_alike(digits, tmp_path):
    npz = tmp_path / "npz"
    npz.mkdir()
    for p in range(3):
        as_npz(digits / str(p), npz / f"{p}.npz")
    runs = [
        run_app(tmp_path / name, 3, **DIGITS, **{"dataset-path": template})
        for name, template in [
            ("images", f"{digits}/{{partition-id}}"),
            ("npz", f"{npz}/{{partition-id}}.npz"),
        ]
    ]
    columns = ["test_accuracy", "site0_test_accuracy", "site2_test_loss", "train_loss"]
    assert [[row.get(c) for c in columns] for row in runs[0].rows] == [
        [row.get(c) for c in columns] for row in runs[1].rows
    ]
    assert runs[0].rows[-1]["test_accuracy"] > 0.5 and runs[0].rows[-1]["failures"] == 0


def test_a_changed_image_folder_is_read_again(tmp_path):
    folder = tmp_path / "site"
    image(folder / "a" / "1.png")
    image(folder / "b" / "1.png")
    assert read_site_file(folder).rows == 2
    assert read_site_file(folder) is read_site_file(folder)
    image(folder / "b" / "2.png", value=9)
    assert read_site_file(folder).rows == 3
    (folder / "b" / "2.png").rename(folder / "a" / "2.png")
    assert list(read_site_file(folder).frame["y"]) == ["a", "a", "b"]


def test_a_colour_image_among_grey_ones_takes_their_mode(tmp_path):
    folder = tmp_path / "site"
    image(folder / "a" / "1.png")
    image(folder / "a" / "2.png", mode="RGB", value=200)
    image(folder / "b" / ".DS_Store.png", size=(3, 3))  # hidden entries are skipped
    frame = read_site_file(folder).frame
    assert frame.shape == (2, 65) and frame.loc[1, "x0"] == 200.0


def bad_folders(root: Path) -> list[tuple[Path, dict, str]]:
    """(folder, node config, what the error says) for each fault of an image folder."""
    cases = []

    def case(name, reason, node_config=None, good=True):
        folder = root / name
        if good:
            image(folder / "a" / "1.png")
            image(folder / "b" / "1.png")
        cases.append((folder, node_config or {}, reason.format(folder=folder)))
        return folder

    case("flat", "{folder}: a folder with no class sub-folders", good=False).mkdir(parents=True)
    image(case("stray", "{folder}/notes.png: not a class folder") / "notes.png")
    (case("text", "{folder}/a/notes.txt: not an image file") / "a" / "notes.txt").write_text("x")
    (case("truncated", "{folder}/b/2.png: unreadable image") / "b" / "2.png").write_bytes(
        (root / "stray" / "a" / "1.png").read_bytes()[:20]
    )
    image(
        case("sizes", "{folder}/b/2.png: 9x8, but {folder}/a/1.png is 8x8") / "b" / "2.png",
        size=(9, 8),
    )
    image(
        case("huge", f"{{folder}}/a/0.png: 100x100 L, more than {MAX_VALUES} values")
        / "a"
        / "0.png",
        size=(100, 100),
    )
    (case("empty", "{folder}: no images in its class folders", good=False) / "a").mkdir(
        parents=True
    )
    case(
        "bytes",
        "bytes, more than the limit of 100 (node config dataset-max-bytes)",
        {"dataset-max-bytes": 100},
    )
    return cases


def test_each_fault_of_an_image_folder_names_the_file(tmp_path):
    for folder, node_config, reason in bad_folders(tmp_path):
        with pytest.raises(SiteDataError) as err:
            read_site_file(folder, node_config.get("dataset-max-bytes", site_files.MAX_BYTES))
        assert reason in str(err.value), (folder.name, str(err.value))


def test_a_bad_image_folder_leaves_its_site_out_and_the_run_goes_on(digits, tmp_path):
    for folder, node_config, reason in bad_folders(tmp_path / "bad")[2:4]:
        run = run_app(
            tmp_path / folder.name,
            3,
            [{}, {}, {"dataset-path": str(folder), **node_config}],
            **{**DIGITS, "num-server-rounds": 1, "dataset-path": f"{digits}/{{partition-id}}"},
        )
        record = json.loads((run.out_dir / "config.json").read_text())["sites"]
        assert record["partitions"] == [0, 1]
        (left_out,) = record["left-out"].values()
        assert reason in left_out and "Traceback" not in left_out
        assert run.rows[-1]["failures"] == 0
