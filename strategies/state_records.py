"""Strategy state as Flower records: RNG states and parameter lists by roster position.

Checkpoints hold only records (numpy arrays and scalars), written and read with Flower's own
protobuf serialisation: nothing is pickled, and everything read back is validated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from functions.errors import DecodeError
from functions.params import ParamLayout, Params, params_to_record, record_to_params


def rng_record(rng: np.random.Generator) -> ConfigRecord:
    """The generator's exact state (PCG64's 128-bit integers as JSON text)."""
    return ConfigRecord({"state": json.dumps(rng.bit_generator.state)})


def restore_rng(record: ConfigRecord) -> np.random.Generator:
    """A generator continuing exactly where ``rng_record``'s left off."""
    state = json.loads(str(record["state"]))
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise DecodeError("RNG state: expected a PCG64 state")
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


def params_by_node_record(values: Mapping[int, Params], layout: ParamLayout) -> ArrayRecord:
    """One float64 parameter list per key (a roster position: a mirror's x_i, FedDR's
    x_hat_i), record keys ``<key>/<tensor name>``."""
    record = ArrayRecord()
    for node, params in values.items():
        for name, array in params_to_record(layout, params, dtype=np.float64).items():
            record[f"{node}/{name}"] = array
    return record


def params_by_node(record: ArrayRecord, layout: ParamLayout, nodes: list[int]
                   ) -> dict[int, Params]:
    """Inverse of ``params_by_node_record`` for ``nodes`` (names, shapes, finite floats checked)."""
    out = {}
    for node in nodes:
        prefix = f"{node}/"
        part = ArrayRecord({k[len(prefix):]: v for k, v in record.items() if k.startswith(prefix)})
        out[node] = record_to_params(part, layout)
    return out
