"""A run's checkpoint: after every round, everything needed to continue it exactly.

``checkpoint.pb`` in the results folder holds the completed round, the run config it ran under
(every key, defaults resolved: ``server_app.resume`` compares it with a resumed run's), the global
arrays Flower passes on, the recorder's rows and the strategy's ``state_record()``, as one Flower
RecordDict in Flower's protobuf serialisation (written atomically; read back without pickle, and
every part is validated by the decoders that read it). What only grows (FFGB's learners) lies
beside it in an append-only segments file (``server_app.segment_log``), written once per segment;
the checkpoint names that file and each live segment's offset, length and SHA-256.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from functions.errors import DecodeError
from server_app.results import write_atomic
from server_app.segment_log import PREFIX, Entry, generation_of, read_segments

FILE_NAME = "checkpoint.pb"
FORMAT = 4  # 2: with the run config; 3: strategy state through strategies.state_codec, segments;
# 4: the sites' schema
_META, _ARRAYS, _STRATEGY = "checkpoint", "checkpoint.arrays", "strategy."


@dataclass
class Checkpoint:
    """The state after ``server_round`` of a run of ``algorithm``."""

    algorithm: str
    server_round: int
    arrays: ArrayRecord
    rows: list[dict[str, Any]]
    strategy: RecordDict
    run_config: dict[str, Any]
    segments_file: str = PREFIX + "0"  # beside the checkpoint
    segments: dict[str, Entry] = field(default_factory=dict)  # the live ones, where they lie
    segment_records: dict[str, RecordDict] = field(default_factory=dict)  # once read back
    site_schema: str = ""  # task='site': the fitted schema the run trains under (its JSON)

    def to_bytes(self) -> bytes:
        segments = {name: entry.to_list() for name, entry in self.segments.items()}
        content = RecordDict(
            {
                _META: ConfigRecord(
                    {
                        "format": FORMAT,
                        "algorithm": self.algorithm,
                        "round": self.server_round,
                        "rows": json.dumps(self.rows),
                        "run-config": json.dumps(self.run_config, sort_keys=True),
                        "segments-file": self.segments_file,
                        "segments": json.dumps(segments),
                        "site-schema": self.site_schema,
                    }
                ),
                _ARRAYS: self.arrays,
            }
        )
        for key, record in self.strategy.items():
            content[_STRATEGY + key] = record
        return recorddict_to_proto(content).SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """Parse a checkpoint; ``DecodeError`` if it is not one this version wrote."""
        try:
            content = recorddict_from_proto(ProtoRecordDict.FromString(data))
            meta = content[_META]
            if meta["format"] != FORMAT:
                raise DecodeError(f"checkpoint format {meta['format']!r}, expected {FORMAT}")
            rows = json.loads(str(meta["rows"]))
            run_config = json.loads(str(meta["run-config"]))
            server_round = int(meta["round"])
            arrays = content[_ARRAYS]
            segments_file = str(meta["segments-file"])
            listed = json.loads(str(meta["segments"]))
            if generation_of(segments_file) is None or not isinstance(listed, dict):
                raise DecodeError(f"segments: {segments_file!r} is not a segments file name")
            segments = {
                str(name): Entry.from_list(value, str(name)) for name, value in listed.items()
            }
            site_schema = str(meta["site-schema"])
        except DecodeError:
            raise
        except Exception as err:  # any fault in a file read back from disk
            raise DecodeError(f"not a checkpoint ({type(err).__name__}: {err})") from None
        if (
            not isinstance(arrays, ArrayRecord)
            or not isinstance(rows, list)
            or not isinstance(run_config, dict)
        ):
            raise DecodeError("checkpoint: arrays, rows or run config of the wrong kind")
        strategy = RecordDict(
            {k[len(_STRATEGY) :]: v for k, v in content.items() if k.startswith(_STRATEGY)}
        )
        return cls(
            str(meta["algorithm"]),
            server_round,
            arrays,
            rows,
            strategy,
            run_config,
            segments_file,
            segments,
            site_schema=site_schema,
        )


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pb`` atomically (``write_atomic``: a crash mid-write leaves the
    previous one, and two writers never share a temporary file)."""
    return write_atomic(directory / FILE_NAME, checkpoint.to_bytes())


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint at ``path`` (a file, or a results folder holding one), with its segments
    read back from the file beside it and checked (``DecodeError`` naming a bad one)."""
    path = Path(path)
    file = path / FILE_NAME if path.is_dir() else path
    checkpoint = Checkpoint.from_bytes(file.read_bytes())
    checkpoint.segment_records = read_segments(
        file.parent / checkpoint.segments_file, checkpoint.segments
    )
    return checkpoint
