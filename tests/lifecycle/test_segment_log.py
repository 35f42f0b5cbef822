"""The checkpoint's append-only segments: written once, read back only when intact."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from functions.errors import DecodeError
from functions.params import arrays_to_record
from server_app.segment_log import SegmentLog, generation_of, read_segments


def segment(name: str, size: int = 1000) -> RecordDict:
    values = np.full(size, float(len(name)))
    return RecordDict(
        {"meta": ConfigRecord({"name": name}), "arrays": arrays_to_record({"values": values})}
    )


def test_segments_are_written_once_and_read_back(tmp_path):
    log = SegmentLog(tmp_path)
    made = []

    def make(name):
        made.append(name)
        return segment(name)

    entries = log.store(["a", "bb"], make)
    size = log.path.stat().st_size
    entries = log.store(["a", "bb", "ccc"], make)
    assert made == ["a", "bb", "ccc"]  # a and bb were not made again
    assert log.path.stat().st_size > size
    back = read_segments(log.path, entries)
    assert back["ccc"]["meta"]["name"] == "ccc"
    assert np.array_equal(back["bb"]["arrays"]["values"].numpy(), np.full(1000, 2.0))


def test_dead_segments_are_dropped_in_a_new_generation(tmp_path):
    log = SegmentLog(tmp_path)
    log.store([f"old{i}" for i in range(40)], lambda n: segment(n, 5000))
    first = log.path
    entries = log.store(["new"], lambda n: segment(n, 5000))  # 40 dead, 1 live
    assert log.generation == 1 and log.path != first and first.exists()
    log.retire()  # after the checkpoint naming the new file
    assert not first.exists()
    assert list(read_segments(log.path, entries)) == ["new"]
    assert log.path.stat().st_size < 50_000


def test_a_run_resumed_into_its_folder_writes_a_new_generation(tmp_path):
    SegmentLog(tmp_path).store(["a"], segment)
    again = SegmentLog(tmp_path)
    assert again.generation == 1
    entries = again.store(["a"], segment)  # the new file holds every live segment
    again.retire()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.segments.1"]
    assert list(read_segments(again.path, entries)) == ["a"]


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_changed_or_missing_bytes_are_refused_naming_the_segment(tmp_path, damage):
    log = SegmentLog(tmp_path)
    entries = log.store(["a", "b"], segment)
    data = bytearray(log.path.read_bytes())
    if damage == "flip":
        data[entries["b"].offset + 40] ^= 1
    else:
        del data[-10:]
    log.path.write_bytes(bytes(data))
    with pytest.raises(DecodeError, match="segment 'b'"):
        read_segments(log.path, entries)


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint.segments.",
        "checkpoint.segments.-1",
        "checkpoint.segments.1/../x",
        "../checkpoint.segments.1",
        "checkpoint.segments.99999999999",
    ],
)
def test_only_segment_file_names_are_accepted(name):
    assert generation_of(name) is None
