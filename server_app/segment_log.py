"""The checkpoint's append-only part: records a strategy never changes once made, written once.

A strategy's state has a part that only grows (FFGB's learners: each round appends K per node,
and none changes later). Rewriting it into every round's ``checkpoint.pb`` makes a round's
checkpoint cost grow with the whole run. Instead each such record (a *segment*, named by the
strategy) is appended once to ``checkpoint.segments.<generation>`` beside the checkpoint, and the
checkpoint lists the live segments by name, offset, length and SHA-256.

Written before the checkpoint that refers to it, so a crash leaves at worst bytes no checkpoint
names. When dead segments (ones the strategy no longer lists, e.g. learners a distillation
replaced) outweigh the live ones, the live ones are copied to the next generation's file (written
atomically) and the old file is removed after the checkpoint naming the new one is written.
Reading back checks every segment's bounds and hash before Flower's protobuf parser sees it;
nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from flwr.app import RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from functions.errors import DecodeError
from server_app.results import write_atomic

PREFIX = "checkpoint.segments."


@dataclass(frozen=True)
class Entry:
    """Where one segment lies in the log file, and its hash."""

    offset: int
    length: int
    sha256: str

    def to_list(self) -> list:
        return [self.offset, self.length, self.sha256]

    @classmethod
    def from_list(cls, value: object, name: str) -> Entry:
        if not (
            isinstance(value, list)
            and len(value) == 3
            and all(type(v) is int and v >= 0 for v in value[:2])
            and isinstance(value[2], str)
            and len(value[2]) == 64
        ):
            raise DecodeError(f"segment {name!r}: expected [offset, length, sha256]")
        return cls(*value)


def segment_bytes(record: RecordDict) -> bytes:
    return recorddict_to_proto(record).SerializeToString()


class SegmentLog:
    """The writer's view of a run's segment file: what it holds, and where."""

    def __init__(self, directory: Path) -> None:
        """A new generation after any file already in ``directory`` (a run resumed into the
        folder it resumes from: the old file stays until a checkpoint names the new one)."""
        self.directory = Path(directory)
        old = [p for p in self.directory.glob(PREFIX + "*") if generation_of(p.name) is not None]
        self.generation = max((generation_of(p.name) for p in old), default=-1) + 1
        self.entries: dict[str, Entry] = {}
        self.size = 0
        self._retired: list[Path] = old

    @property
    def path(self) -> Path:
        return self.directory / f"{PREFIX}{self.generation}"

    def store(self, names: list[str], make: Callable[[str], RecordDict]) -> dict[str, Entry]:
        """Make sure every segment of ``names`` is in the file (``make(name)`` for the new ones,
        appended and flushed to disk); returns their entries, for the checkpoint."""
        live = sum(self.entries[n].length for n in names if n in self.entries)
        if self.size - live > max(live, 1 << 20):  # mostly dead bytes: start a new generation
            self._compact(names)
        missing = [n for n in names if n not in self.entries]
        if missing:
            with open(self.path, "ab") as handle:
                for name in missing:
                    data = segment_bytes(make(name))
                    handle.write(data)
                    self.entries[name] = Entry(
                        self.size, len(data), hashlib.sha256(data).hexdigest()
                    )
                    self.size += len(data)
                handle.flush()
                os.fsync(handle.fileno())
        return {n: self.entries[n] for n in names}

    def _compact(self, names: list[str]) -> None:
        """Copy the live segments to the next generation's file (atomically)."""
        old = self.path
        data = old.read_bytes() if old.exists() else b""
        kept, chunks, size = {}, [], 0
        for name in names:
            if name in self.entries:
                e = self.entries[name]
                chunks.append(data[e.offset : e.offset + e.length])
                kept[name] = Entry(size, e.length, e.sha256)
                size += e.length
        self.generation += 1
        write_atomic(self.path, b"".join(chunks))
        self.entries, self.size = kept, size
        self._retired.append(old)

    def retire(self) -> None:
        """Remove earlier generations' files, once a checkpoint names the current one."""
        for path in self._retired:
            path.unlink(missing_ok=True)
        self._retired = []


def generation_of(name: str) -> int | None:
    """The generation of a segments file name (None: not one), so a name read from a
    checkpoint can only ever point at a segments file in the checkpoint's own folder."""
    rest = name[len(PREFIX) :] if name.startswith(PREFIX) else ""
    return int(rest) if rest.isdigit() and len(rest) < 10 else None


def read_segments(path: Path, entries: Mapping[str, Entry]) -> dict[str, RecordDict]:
    """Every segment of ``entries`` from the file at ``path``; DecodeError naming the segment
    when one lies outside the file, does not match its hash, or does not parse."""
    if not entries:
        return {}
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise DecodeError(f"segments file {path.name}: {err.strerror or err}") from None
    out = {}
    for name, e in entries.items():
        chunk = data[e.offset : e.offset + e.length]
        if len(chunk) != e.length or hashlib.sha256(chunk).hexdigest() != e.sha256:
            raise DecodeError(f"segment {name!r} of {path.name}: missing or changed bytes")
        try:
            out[name] = recorddict_from_proto(ProtoRecordDict.FromString(chunk))
        except Exception as err:  # any fault of bytes read back from disk
            raise DecodeError(f"segment {name!r}: not a record ({type(err).__name__})") from None
    return out
