"""A site's image folder (node config ``dataset-path`` naming a folder): one sub-folder per class,
named by the class, holding that class's images (PNG, JPEG or BMP).

The folder becomes a table with the rows an NPZ file of the same images gives
(``tasks.site_files``): pixel columns ``x0`` .. ``x{D-1}`` (height, width and channels flattened
in that order, values 0-255) and the label ``y``, the class folder's name. A site holding images
and one holding an NPZ of them therefore agree one schema, and the federated preprocessing
standardises every pixel as it does any numeric column.

Read with Pillow (a dependency already, through matplotlib): it reads the header before the
pixels, so the size bound is checked before decoding, and ``formats=`` restricts the decoders to
the three formats named above. Hugging Face ``datasets``' ``imagefolder`` loader would also write
an Arrow cache into the node's home folder, which a site should not have to allow (as for
tables).

Rules, each fault a ``SiteDataError`` naming the file: only class folders at the top (hidden
entries are skipped), only image files in them, every image of one size, at most ``MAX_VALUES``
values an image. Every image takes the first one's colour mode: grey when that one is grey, else
RGB (alpha is dropped), so a stray colour scan among grey ones still fits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, UnidentifiedImageError

from tasks.site_errors import SiteDataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
FORMATS = ("PNG", "JPEG", "BMP")
GREY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "F"})
MAX_VALUES = 9_999  # pixel values an image may hold: tasks.site_schema.MAX_COLUMNS less the label


@dataclass(frozen=True)
class ImageFile:
    """One image of a site: its class (the folder's name), path, size and modification time."""

    label: str
    path: Path
    size: int
    mtime_ns: int


def _visible(folder: Path) -> list[os.DirEntry]:
    with os.scandir(folder) as entries:
        return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def image_files(folder: Path) -> list[ImageFile]:
    """The images of ``folder``, class by class in name order, each class's files in name
    order; ``SiteDataError`` for anything else in it or a folder without images."""
    classes = _visible(folder)
    if not any(entry.is_dir() for entry in classes):
        raise SiteDataError(
            f"{folder}: a folder with no class sub-folders; expected an image "
            "folder (one sub-folder per class) or a data file"
        )
    images = []
    for entry in classes:
        if not entry.is_dir():
            raise SiteDataError(
                f"{entry.path}: not a class folder; an image folder holds only "
                "one sub-folder per class"
            )
        for item in _visible(Path(entry.path)):
            if not item.is_file() or Path(item.name).suffix.lower() not in IMAGE_SUFFIXES:
                raise SiteDataError(
                    f"{item.path}: not an image file (expected {', '.join(IMAGE_SUFFIXES)})"
                )
            status = item.stat()
            images.append(
                ImageFile(entry.name, Path(item.path), status.st_size, status.st_mtime_ns)
            )
    if not images:
        raise SiteDataError(f"{folder}: no images in its class folders")
    return images


def folder_version(folder: Path, images: list[ImageFile]) -> tuple[int, int, int]:
    """What changes when the folder's content does: bytes, images and the latest modification
    time of an image or a class folder (a rename or removal changes its folder's)."""
    folders = {image.path.parent for image in images} | {folder}
    latest = max([image.mtime_ns for image in images] + [f.stat().st_mtime_ns for f in folders])
    return sum(image.size for image in images), len(images), latest


def read_image_folder(images: list[ImageFile]) -> pd.DataFrame:
    """The table of ``images`` (see the module docstring)."""
    first: tuple[tuple[int, int], str, Path] | None = None
    pixels = []
    for image in images:
        try:
            with Image.open(image.path, formats=FORMATS) as picture:
                mode = first[1] if first else ("L" if picture.mode in GREY_MODES else "RGB")
                values = picture.width * picture.height * (1 if mode == "L" else 3)
                if values > MAX_VALUES:
                    raise SiteDataError(
                        f"{image.path}: {picture.width}x{picture.height} "
                        f"{mode}, more than {MAX_VALUES} values an image"
                    )
                if first is None:
                    first = (picture.size, mode, image.path)
                elif picture.size != first[0]:
                    raise SiteDataError(
                        f"{image.path}: {picture.width}x{picture.height}, but {first[2]} is "
                        f"{first[0][0]}x{first[0][1]}; a site's images must share one size"
                    )
                pixels.append(np.asarray(picture.convert(mode), dtype=np.float64).ravel())
        except SiteDataError:
            raise
        except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as err:
            raise SiteDataError(
                f"{image.path}: unreadable image ({type(err).__name__}: {str(err).strip()[:200]})"
            ) from None
    x = np.stack(pixels)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(x.shape[1])])
    frame["y"] = [image.label for image in images]
    return frame
