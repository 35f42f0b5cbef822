"""A site's own data file, read and checked: what a SuperNode holds on its own disk (node config
``dataset-path``). What a node discloses about it, and the schema the sites agree, are
``tasks.site_schema``'s.

Formats: CSV and Parquet (read with pandas, pyarrow's engine for Parquet: kept libraries that
read a local file straight into columns; Hugging Face ``datasets``' local loaders would also
write an Arrow cache into the node's home folder, which a site should not have to allow), and NPZ
with arrays ``x`` (rows, features...) and ``y`` (rows,), read with ``allow_pickle=False``. A
folder is an image folder (``tasks.site_images``: one sub-folder per class), read as the table an
NPZ file of its images gives.

Everything is checked before use, and every fault is a ``SiteDataError`` naming the file and the
problem: a missing path, a folder that is not an image folder, an unknown suffix, a file (or
image folder) over the size limit (checked with ``stat`` before anything is read), an empty,
unreadable or truncated file, duplicate or missing columns, text in a numeric column,
infinities, a site without rows. Missing numeric values (NaN,
empty CSV cells) are allowed: the federated preprocessing imputes them.

A table is read once per process and file version: the cache key is the resolved path, its size
and its modification time (an image folder's: its bytes, images and latest modification time),
so a changed file is read again.
"""

from __future__ import annotations

import csv
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.site_errors import SiteDataError
from tasks.site_images import ImageFile, folder_version, image_files, read_image_folder

MAX_BYTES = 256 * 2**20  # default of the node config's ``dataset-max-bytes``
NUMERIC, CATEGORICAL = "numeric", "categorical"
SUFFIXES = (".csv", ".parquet", ".npz")
MAX_CACHED = 16  # tables kept per process


@dataclass(frozen=True)
class SiteTable:
    """A site's rows: each column numeric (float64, NaN where missing) or categorical (str)."""

    path: Path
    frame: pd.DataFrame

    @property
    def rows(self) -> int:
        return len(self.frame)


_CACHE: OrderedDict[tuple, SiteTable] = OrderedDict()
_LOCK = threading.Lock()


def read_site_file(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> SiteTable:
    """The table in ``path`` (checked; see the module docstring), from the cache when the file
    has not changed since it was read."""
    file = Path(path).expanduser()
    try:
        status = file.stat()
    except FileNotFoundError:
        raise SiteDataError(f"{file}: no such file") from None
    except OSError as err:
        raise SiteDataError(f"{file}: cannot be read ({err.strerror or err})") from None
    images = image_files(file) if file.is_dir() else []
    version = folder_version(file, images) if images else (status.st_size, status.st_mtime_ns)
    key = (str(file.resolve()), version, max_bytes)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    table = _read(file, version[0], max_bytes, images)
    with _LOCK:
        _CACHE[key] = table
        while len(_CACHE) > MAX_CACHED:
            _CACHE.popitem(last=False)
    return table


def _read(file: Path, size: int, max_bytes: int, images: list[ImageFile]) -> SiteTable:
    """The table of ``file``, or of the image folder whose ``images`` these are."""
    suffix = file.suffix.lower()
    if not images and suffix not in SUFFIXES:
        raise SiteDataError(
            f"{file}: unknown format {suffix or '(no suffix)'!r}; expected "
            f"{', '.join(SUFFIXES)} or an image folder"
        )
    if size > max_bytes:
        raise SiteDataError(
            f"{file}: {size} bytes, more than the limit of {max_bytes} (node "
            "config dataset-max-bytes)"
        )
    if size == 0:
        raise SiteDataError(f"{file}: empty file")
    if images:
        return SiteTable(file, _checked(read_image_folder(images), file))
    try:
        frame = _READERS[suffix](file)
    except SiteDataError:
        raise
    except Exception as err:  # any fault of a file from a site's disk
        raise SiteDataError(
            f"{file}: unreadable {suffix[1:].upper()} ({type(err).__name__}: {_first_line(err)})"
        ) from None
    return SiteTable(file, _checked(frame, file))


def _read_npz(file: Path) -> pd.DataFrame:
    with np.load(file, allow_pickle=False) as arrays:
        if sorted(arrays.files) != ["x", "y"]:
            raise SiteDataError(f"{file}: expected arrays x and y, found {sorted(arrays.files)}")
        x, y = arrays["x"], arrays["y"]
    if x.ndim < 2 or y.ndim != 1 or len(x) != len(y):
        raise SiteDataError(
            f"{file}: expected x of shape (rows, features...) and y of shape "
            f"(rows,), got {x.shape} and {y.shape}"
        )
    if x.dtype.kind not in "biuf":
        raise SiteDataError(f"{file}: x must be numeric, got {x.dtype}")
    flat = x.reshape(len(x), -1).astype(np.float64)
    frame = pd.DataFrame(flat, columns=[f"x{i}" for i in range(flat.shape[1])])
    frame["y"] = y if y.dtype.kind in "biuf" else y.astype(str)
    return frame


def _read_csv(file: Path) -> pd.DataFrame:
    """pandas' reader, after a look at the header (pandas would rename a repeated name)."""
    with open(file, newline="", encoding="utf-8") as handle:
        names = [name.strip() for name in next(csv.reader(handle), [])]
    if len(set(names)) != len(names):
        raise SiteDataError(f"{file}: column names must be unique and not empty, got {names}")
    return pd.read_csv(file, skipinitialspace=True)


_READERS = {
    ".csv": _read_csv,
    ".parquet": lambda file: pd.read_parquet(file, engine="pyarrow"),
    ".npz": _read_npz,
}


def _checked(frame: pd.DataFrame, file: Path) -> pd.DataFrame:
    """Unique string column names, at least one row, numbers as float64 (finite or missing),
    everything else as text."""
    names = [str(c) for c in frame.columns]
    if len(set(names)) != len(names) or any(n.startswith("Unnamed: ") for n in names):
        raise SiteDataError(f"{file}: column names must be unique and not empty, got {names}")
    if frame.empty:
        raise SiteDataError(f"{file}: no rows")
    frame = frame.copy()
    frame.columns = names
    for name in names:
        column = frame[name]
        if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_numeric_dtype(column):
            frame[name] = column.map(lambda v: None if _missing(v) else str(v)).astype(object)
            continue
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isinf(values).any():
            row = int(np.flatnonzero(np.isinf(values))[0])
            raise SiteDataError(f"{file}: column {name!r} holds an infinite value (row {row})")
        frame[name] = values
    return frame


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def numeric_column(table: SiteTable, name: str) -> np.ndarray:
    """Column ``name`` as float64 (NaN where missing); ``SiteDataError`` naming the column and
    the first value that is not a number (text in a numeric column)."""
    column = table.frame[name]
    if pd.api.types.is_float_dtype(column):
        return column.to_numpy()
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(values) & column.notna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SiteDataError(
            f"{table.path}: column {name!r} must be numeric; row {row} holds {column.iloc[row]!r}"
        )
    if np.isinf(values).any():
        raise SiteDataError(f"{table.path}: column {name!r} holds an infinite value")
    return values


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""
