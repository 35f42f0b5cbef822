"""One file per natural site of a real table, as sites would hold their own data.

- ``penguins``: the Palmer penguins (package ``palmerpenguins``, CC0), species by island:
  Biscoe 168, Dream 124, Torgersen 52 rows, strong label skew (Torgersen has Adelie only).
  Label ``species``; features bill and flipper lengths, bill depth, body mass, year (numeric)
  and ``sex`` (categorical, with missing values).
- ``cars``: the cars table of ``vega-datasets``, miles per gallon by origin: USA 249, Japan 79,
  Europe 70 rows (406 cars less the 8 without a label: 5 from USA, 3 from Europe). Label
  ``Miles_per_Gallon`` (regression); features cylinders, displacement, horsepower (6
  missing), weight, acceleration, year.

Rows are split by flwr-datasets' ``NaturalIdPartitioner`` on the site column, which each file
then drops (a site's identity is not a feature). Sites are numbered in the order of their names
and each file is named by that number, the partition id its SuperNode is given, so the run
config template ``dataset-path='<folder>/{partition-id}.csv'`` finds them; ``sites.json`` names
them. Both packages carry their data; no network (install them with the project's ``sites``
extra, which ``make install`` brings).

    python -m tasks.sites penguins --out sites/penguins # 0.csv Biscoe, 1.csv Dream, 2.csv Torgersen
    python -m tasks.sites cars --out sites/cars           # 0.csv Europe, 1.csv Japan, 2.csv USA

And sites that hold images: ``digits`` writes scikit-learn's 1,797 handwritten digits (8x8 grey,
bundled with scikit-learn) as three image folders ``0/``, ``1/``, ``2/`` of PNG files, one
sub-folder per class (``tasks.site_images``), split by flwr-datasets' ``DirichletPartitioner``
over the label (alpha 0.5, seed 0: label skew, as sites collecting different cases would have),
for the template ``dataset-path='<folder>/{partition-id}'`` (label ``y``).

    python -m tasks.sites digits --out sites/digits       # 0/, 1/, 2/: one image folder per site
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from datasets import Dataset
from flwr_datasets.partitioner import DirichletPartitioner, NaturalIdPartitioner
from PIL import Image
from sklearn.datasets import load_digits


@dataclass(frozen=True)
class Table:
    """A table with natural sites: how to load it, its site column, label and kind."""

    site: str
    label: str
    kind: str
    categorical: tuple[str, ...]

    def load(self, name: str) -> pd.DataFrame:
        if name == "penguins":
            from palmerpenguins import load_penguins

            return load_penguins()
        from vega_datasets import data

        cars = data.cars().drop(columns=["Name"]).dropna(subset=[self.label])
        return cars.assign(Year=pd.to_datetime(cars["Year"]).dt.year)


TABLES = {
    "penguins": Table("island", "species", "classification", ("sex",)),
    "cars": Table("Origin", "Miles_per_Gallon", "regression", ()),
}


def write_sites(name: str, out: Path) -> dict[str, int]:
    """Write ``out/<i>.csv`` for the i-th site of table ``name`` (in name order) and
    ``out/sites.json`` (the table's label, kind, categorical columns, and each site's partition
    id and rows); returns the rows by site, in partition order."""
    table = TABLES[name]
    frame = table.load(name)
    partitioner = NaturalIdPartitioner(partition_by=table.site)
    partitioner.dataset = Dataset.from_pandas(frame, preserve_index=False)
    out.mkdir(parents=True, exist_ok=True)
    parts = {}
    for pid in range(partitioner.num_partitions):
        part = partitioner.load_partition(pid).to_pandas()
        parts[str(part[table.site].iloc[0])] = part.drop(columns=[table.site])
    rows = {}
    for partition_id, site in enumerate(sorted(parts)):
        parts[site].to_csv(out / f"{partition_id}.csv", index=False)
        rows[site] = len(parts[site])
    manifest = {
        "table": name,
        "label": table.label,
        "kind": table.kind,
        "categorical": list(table.categorical),
        "sites": {
            site: {"partition-id": i, "rows": count} for i, (site, count) in enumerate(rows.items())
        },
    }
    (out / "sites.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return rows


IMAGE_SITES, IMAGE_ALPHA, IMAGE_SEED = 3, 0.5, 0


def write_image_sites(out: Path) -> dict[str, int]:
    """Write the digits as image folders ``out/<i>/<class>/<row>.png`` (see the module
    docstring) and ``out/sites.json``; returns the images by site, in partition order."""
    digits = load_digits()
    pixels = np.rint(digits.images * 255 / 16).astype(np.uint8)
    frame = pd.DataFrame({"row": np.arange(len(pixels)), "label": digits.target})
    partitioner = DirichletPartitioner(IMAGE_SITES, "label", IMAGE_ALPHA, seed=IMAGE_SEED)
    partitioner.dataset = Dataset.from_pandas(frame, preserve_index=False)
    rows = {}
    for pid in range(IMAGE_SITES):
        part = partitioner.load_partition(pid)
        for row, label in zip(part["row"], part["label"]):
            file = out / str(pid) / str(label) / f"{row:04d}.png"
            file.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels[row]).save(file)
        rows[str(pid)] = len(part)
    manifest = {
        "table": "digits",
        "label": "y",
        "kind": "classification",
        "categorical": [],
        "sites": {site: {"partition-id": int(site), "rows": count} for site, count in rows.items()},
    }
    (out / "sites.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=[*sorted(TABLES), "digits"])
    parser.add_argument("--out", type=Path, required=True, help="folder for the site files")
    args = parser.parse_args(argv)
    if args.table == "digits":
        for site, count in write_image_sites(args.out).items():
            print(f"{args.out / site}/: {count} images")
        return 0
    for partition_id, (site, count) in enumerate(write_sites(args.table, args.out).items()):
        print(f"{args.out / f'{partition_id}.csv'}: {site}, {count} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
