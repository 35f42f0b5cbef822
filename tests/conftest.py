"""Fixtures several test modules share."""

from __future__ import annotations

import pytest

from tasks.sites import write_sites


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    """The Palmer penguins as three site files by island (``tasks.sites``): 0.csv Biscoe,
    1.csv Dream, 2.csv Torgersen; written once per module."""
    folder = tmp_path_factory.mktemp("penguins")
    write_sites("penguins", folder)
    return folder
