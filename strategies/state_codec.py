"""One codec for strategy state: a dataclass of arrays and scalars <-> Flower records, validated.

A family declares its checkpointed state as a dataclass; ``encode_state`` writes any such object
as records and ``decode_state`` reads it back, checking everything, so no family writes its own
record code and nothing is pickled. Field types: bool, int, float, str; tuples (``tuple[T, ...]``)
and lists of them; ``np.ndarray`` (float64 or int64, see ``checks``); ``Params`` (the run's
``ParamLayout``, float64); ``dict[int, Params]`` keyed by roster position; nested dataclasses;
``Wire`` objects (a domain object with its own validated wire form, e.g. FedFW's update
history); and ``X | None`` of any of these.

Records do not nest, so structure is in the keys. A field's key is its name with hyphens
(``mirror_sum`` -> ``mirror-sum``). An object at key ``P`` writes ``P``, a ConfigRecord of its
scalar and sequence fields and, for each optional field, ``<key>:none`` (a None writes nothing
else); ``P-arrays``, an ArrayRecord of its array fields; and ``P-<key>`` for each other field: a
Params or ``dict[int, Params]`` field as one ArrayRecord (tensor names ``<tensor>`` or
``<position>/<tensor>``), a nested dataclass as an object at that key, a Wire object's records
with their suffixes (``""``: ``P-<key>``, ``s``: ``P-<key>-s``). The state itself is at the empty
key: its own records are ``state`` and ``arrays``, its fields' ``<key>``.

Decoding needs what the records do not say: a ``context`` mapping with the ParamLayout
(``LAYOUT``), the number of roster positions (``POSITIONS``), the names used in declared array
shapes and whatever a Wire object reads. Anything malformed (a missing or unknown record or key,
a wrong type, dtype or shape, NaN or inf where finite values are required) is a ``DecodeError``
naming the field. The book's slots, one row per node, use the same scalar checks
(``encode_rows`` / ``decode_rows``); ``rng_record`` / ``restore_rng`` keep the sampler's generator.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Any, ClassVar, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from functions.errors import DecodeError
from functions.params import (
    Params,
    array_to_numpy,
    arrays_to_record,
    params_to_record,
    record_to_params,
)

Record = ArrayRecord | ConfigRecord
T = TypeVar("T")
LAYOUT, POSITIONS = "layout", "positions"  # context entries for Params fields
LIMITS = "limits"  # context entry: the decoders' bounds a family's Wire objects read
SEGMENTS = "segments"  # context entry: the checkpoint's append-only segments, by name
_SCALARS = (bool, int, float, str)
_DTYPES = ("float64", "int64")
_SPEC = "state-codec"  # the metadata key of ``checks``


@dataclass(frozen=True)
class FieldSpec:
    """A field's checks: an array's dtype and shape (ints, context names, or None for any
    length; None for any shape), and whether its floats must be finite (arrays and floats)."""

    dtype: str = "float64"
    shape: tuple[int | str | None, ...] | None = None
    finite: bool = True


def checks(
    dtype: str = "float64", shape: tuple[int | str | None, ...] | None = None, finite: bool = True
) -> dict[str, FieldSpec]:
    """A field's metadata with the checks of ``FieldSpec``:
    ``x: np.ndarray = field(metadata=checks("int64", shape=(None, 3)))``."""
    if dtype not in _DTYPES:
        raise ValueError(f"state arrays are {' or '.join(_DTYPES)}, not {dtype}")
    return {_SPEC: FieldSpec(dtype, shape, finite)}


class Wire(Protocol):
    """A domain object that has its own validated wire form: the records it writes (suffix ->
    record type, ``RECORDS``), and a decoder that raises ``DecodeError`` on anything malformed."""

    RECORDS: ClassVar[Mapping[str, type]]

    def to_records(self) -> Mapping[str, Record]: ...

    @classmethod
    def from_records(cls, records: Mapping[str, Record], context: Mapping[str, Any]) -> Wire: ...


# -- the plan of a dataclass: each field's kind -----------------------------------------------
SCALAR, SEQUENCE, ARRAY, PARAMS, BY_POSITION, NESTED, WIRE = (
    "scalar",
    "sequence",
    "array",
    "params",
    "params by position",
    "nested",
    "wire",
)


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    kind: str
    item: Any  # the scalar type (scalars, sequences), the class (nested, wire)
    optional: bool
    spec: FieldSpec
    as_tuple: bool = False


@cache
def _plan(cls: type) -> tuple[_Field, ...]:
    """The fields of dataclass ``cls``; TypeError for a type the codec does not know."""
    hints = get_type_hints(cls)
    return tuple(
        _field(f.name, hints[f.name], f.metadata.get(_SPEC, FieldSpec())) for f in fields(cls)
    )


def _field(name: str, annotation: Any, spec: FieldSpec) -> _Field:
    args = get_args(annotation)
    optional = get_origin(annotation) in (Union, types.UnionType) and type(None) in args
    kind = next(a for a in args if a is not type(None)) if optional else annotation
    if optional and len(args) != 2:
        raise TypeError(f"state field {name}: {annotation} is not one type or None")
    origin, args = get_origin(kind), get_args(kind)
    key = name.replace("_", "-")
    if kind in _SCALARS:
        return _Field(name, key, SCALAR, kind, optional, spec)
    if kind is np.ndarray:
        return _Field(name, key, ARRAY, kind, optional, spec)
    if kind == Params:
        return _Field(name, key, PARAMS, kind, optional, spec)
    if origin is dict and args == (int, Params):
        return _Field(name, key, BY_POSITION, kind, optional, spec)
    if (
        origin in (tuple, list)
        and args
        and args[0] in _SCALARS
        and (origin is list or args[1:] == (Ellipsis,))
    ):
        return _Field(name, key, SEQUENCE, args[0], optional, spec, as_tuple=origin is tuple)
    if all(hasattr(kind, a) for a in ("RECORDS", "to_records", "from_records")):
        return _Field(name, key, WIRE, kind, optional, spec)  # a dataclass too, maybe
    if is_dataclass(kind):
        return _Field(name, key, NESTED, kind, optional, spec)
    raise TypeError(f"state field {name}: the codec does not know {annotation}")


def _join(prefix: str, name: str) -> str:
    """A record key under ``prefix`` (the top level's own record: ``state``)."""
    return "-".join(p for p in (prefix, name) if p) or "state"


def _has_config(plan: tuple[_Field, ...]) -> bool:
    return any(f.kind in (SCALAR, SEQUENCE) or f.optional for f in plan)


# -- encoding -----------------------------------------------------------------------------------
def encode_state(obj: Any, context: Mapping[str, Any] | None = None) -> dict[str, Record]:
    """``obj`` (a dataclass of the supported fields) as records; Params need ``LAYOUT``."""
    out: dict[str, Record] = {}
    _encode(obj, "", dict(context or {}), out)
    return out


def _encode(obj: Any, prefix: str, context: Mapping[str, Any], out: dict[str, Record]) -> None:
    plan = _plan(type(obj))
    config: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for f in plan:
        value = getattr(obj, f.name)
        if f.optional:
            config[f"{f.key}:none"] = value is None
            if value is None:
                continue
        key = _join(prefix, f.key)
        if f.kind == SCALAR:
            config[f.key] = _written(value, f)
        elif f.kind == SEQUENCE:
            config[f.key] = [_written(v, f) for v in value]
        elif f.kind == ARRAY:
            arrays[f.key] = np.asarray(value)
            if arrays[f.key].dtype != np.dtype(f.spec.dtype):
                raise TypeError(
                    f"state field {f.name}: dtype {arrays[f.key].dtype}, declared {f.spec.dtype}"
                )
        elif f.kind == PARAMS:
            _put(out, key, params_to_record(context[LAYOUT], value, dtype=np.float64))
        elif f.kind == BY_POSITION:
            record = ArrayRecord()
            for position, params in value.items():
                for name, array in params_to_record(
                    context[LAYOUT], params, dtype=np.float64
                ).items():
                    record[f"{position}/{name}"] = array
            _put(out, key, record)
        elif f.kind == NESTED:
            _encode(value, key, context, out)
        else:
            records = value.to_records()
            if set(records) != set(f.item.RECORDS):
                raise TypeError(
                    f"state field {f.name}: records {sorted(records)}, declared "
                    f"{sorted(f.item.RECORDS)}"
                )
            for suffix, record in records.items():
                _put(out, _join(key, suffix), record)
    if _has_config(plan):
        _put(out, _join(prefix, ""), ConfigRecord(config))
    if any(f.kind == ARRAY for f in plan):
        _put(out, _join(prefix, "arrays"), arrays_to_record(arrays))


def _written(value: object, f: _Field) -> object:
    """A scalar as its field's Python type (numpy scalars converted), so that it reads back; a
    value of another kind (a bool for an int) is a TypeError when saving, not a refusal when
    resuming."""
    kinds = {
        bool: (bool, np.bool_),
        int: (int, np.integer),
        str: (str,),
        float: (float, int, np.floating, np.integer),
    }
    if isinstance(value, kinds[f.item]) and (
        f.item is bool or not isinstance(value, (bool, np.bool_))
    ):
        return f.item(value)
    raise TypeError(f"state field {f.name}: {value!r} is not a {f.item.__name__}")


def _put(out: dict[str, Record], key: str, record: Record) -> None:
    if key in out:
        raise TypeError(f"two state fields write the record {key!r}")
    out[key] = record


# -- decoding -----------------------------------------------------------------------------------
def decode_state(
    cls: type[T], records: Mapping[str, object], context: Mapping[str, Any] | None = None
) -> T:
    """The ``cls`` that ``encode_state`` wrote as ``records`` (all of them: another record is
    refused); ``DecodeError`` naming the field on anything malformed."""
    used: set[str] = set()
    obj = _decode(cls, "", records, dict(context or {}), used, "")
    unknown = sorted(set(records) - used)
    if unknown:
        raise DecodeError(f"state: unknown records {unknown}")
    return obj


def _at(path: str) -> str:
    """How a message names the field at ``path`` (dotted attribute names; "": the whole state)."""
    return f"state field {path}" if path else "state"


def _decode(
    cls: type[T],
    prefix: str,
    records: Mapping[str, object],
    context: Mapping[str, Any],
    used: set[str],
    path: str,
) -> T:
    plan = _plan(cls)
    has_arrays = any(f.kind == ARRAY for f in plan)
    config = (
        _take(records, _join(prefix, ""), ConfigRecord, used, path) if _has_config(plan) else {}
    )
    arrays = _take(records, _join(prefix, "arrays"), ArrayRecord, used, path) if has_arrays else {}
    wanted_config, wanted_arrays, values = set(), set(), {}
    for f in plan:
        where, key = f"{path}.{f.name}" if path else f.name, _join(prefix, f.key)
        if f.optional:
            wanted_config.add(f"{f.key}:none")
            if _is_none(config, f.key, where):
                values[f.name] = None
                continue
        if f.kind in (SCALAR, SEQUENCE):
            wanted_config.add(f.key)
            values[f.name] = _config_value(config, f, where)
        elif f.kind == ARRAY:
            wanted_arrays.add(f.key)
            if f.key not in arrays:
                raise DecodeError(f"{_at(where)}: array {f.key!r} is missing")
            values[f.name] = _array(
                array_to_numpy(arrays[f.key], _at(where)), f.spec, context, where
            )
        elif f.kind == PARAMS:
            values[f.name] = _params(_take(records, key, ArrayRecord, used, where), context, where)
        elif f.kind == BY_POSITION:
            values[f.name] = _by_position(
                _take(records, key, ArrayRecord, used, where), context, where
            )
        elif f.kind == NESTED:
            values[f.name] = _decode(f.item, key, records, context, used, where)
        else:
            values[f.name] = _wire(f.item, key, records, context, used, where)
    for found, wanted, kind in ((config, wanted_config, "keys"), (arrays, wanted_arrays, "arrays")):
        unknown = sorted(set(found) - wanted)
        if unknown:
            raise DecodeError(f"{_at(path)}: unknown {kind} {unknown}")
    return cls(**values)


def _take(records: Mapping[str, object], key: str, kind: type, used: set[str], where: str) -> Any:
    """The record at ``key``, which must be a ``kind``."""
    if key not in records:
        raise DecodeError(f"{_at(where)}: record {key!r} is missing")
    record = records[key]
    if not isinstance(record, kind):
        raise DecodeError(
            f"{_at(where)}: record {key!r} is a {type(record).__name__}, expected a {kind.__name__}"
        )
    used.add(key)
    return record


def _is_none(config: Mapping[str, object], key: str, where: str) -> bool:
    marker = config.get(f"{key}:none")
    if type(marker) is not bool:
        raise DecodeError(f"{_at(where)}: {key}:none is {marker!r}, expected a bool")
    return marker


def _config_value(config: Mapping[str, object], f: _Field, where: str) -> object:
    if f.key not in config:
        raise DecodeError(f"{_at(where)}: key {f.key!r} is missing")
    value = config[f.key]
    if f.kind == SCALAR:
        return _scalar(value, f.item, f.spec.finite, _at(where))
    if not isinstance(value, list):
        raise DecodeError(f"{_at(where)}: expected a list, got {type(value).__name__}")
    items = [_scalar(v, f.item, f.spec.finite, f"{_at(where)}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if f.as_tuple else items


def _scalar(value: object, kind: type, finite: bool, named: str) -> object:
    """``value`` if it is a ``kind`` (an int is a float too; a bool is no int), finite if asked;
    ``named``: how an error names it."""
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        raise DecodeError(f"{named}: expected {kind.__name__}, got {type(value).__name__}")
    if kind is float and finite and not math.isfinite(value):
        raise DecodeError(f"{named}: {value} is not finite")
    return value


def _array(
    value: np.ndarray, spec: FieldSpec, context: Mapping[str, Any], where: str
) -> np.ndarray:
    if value.dtype != np.dtype(spec.dtype):
        raise DecodeError(f"{_at(where)}: dtype {value.dtype}, expected {spec.dtype}")
    if spec.shape is not None:
        expected = [context[d] if isinstance(d, str) else d for d in spec.shape]
        if len(value.shape) != len(expected) or any(
            e is not None and n != e for n, e in zip(value.shape, expected)
        ):
            shown = ", ".join("any" if e is None else str(e) for e in expected)
            raise DecodeError(f"{_at(where)}: shape {value.shape}, expected ({shown})")
    if spec.finite and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        raise DecodeError(f"{_at(where)}: contains NaN or inf")
    return value


def _params(record: ArrayRecord, context: Mapping[str, Any], where: str) -> Params:
    try:
        return record_to_params(record, context[LAYOUT], np.float64)
    except DecodeError as err:
        raise DecodeError(f"{_at(where)}: {err}") from None


def _by_position(record: ArrayRecord, context: Mapping[str, Any], where: str) -> dict[int, Params]:
    """One Params per roster position 0 .. ``POSITIONS`` - 1 that has any, keys
    ``<position>/<tensor>`` (a released position has none: ``strategies.roster``)."""
    positions = [str(p) for p in range(context[POSITIONS])]
    groups: dict[str, ArrayRecord] = {p: ArrayRecord() for p in positions}
    for key, array in record.items():
        position, _, name = key.partition("/")
        if position not in groups or not name:
            raise DecodeError(
                f"{_at(where)}: key {key!r} is not <position>/<tensor> for one "
                f"of {len(positions)} positions"
            )
        groups[position][name] = array
    return {
        int(p): _params(group, context, f"{where}[{p}]") for p, group in groups.items() if group
    }


def _wire(
    cls: type[Wire],
    key: str,
    records: Mapping[str, object],
    context: Mapping[str, Any],
    used: set[str],
    where: str,
) -> Wire:
    parts = {
        suffix: _take(records, _join(key, suffix), kind, used, where)
        for suffix, kind in cls.RECORDS.items()
    }
    try:
        return cls.from_records(parts, context)
    except DecodeError as err:
        raise DecodeError(f"{_at(where)}: {err}") from None


# -- rows: one list per field (the node book's slots) ------------------------------------------
def encode_rows(cls: type, rows: Sequence[Any]) -> dict[str, list]:
    """Dataclass ``rows`` of scalar fields as one list per field key; an optional field's Nones
    are written as its type's zero value and marked in ``<key>:none`` (only when there is one)."""
    out: dict[str, list] = {}
    for f in _row_plan(cls):
        values = [getattr(row, f.name) for row in rows]
        if any(v is None for v in values):
            out[f"{f.key}:none"] = [v is None for v in values]
            values = [f.item() if v is None else v for v in values]
        out[f.key] = values
    return out


def decode_rows(
    cls: type, record: Mapping[str, object], count: int, where: str
) -> list[dict[str, object]]:
    """The field values of ``count`` rows that ``encode_rows`` wrote; ``DecodeError`` naming the
    key on a missing, short, mistyped or unknown list."""
    plan = _row_plan(cls)
    known = {f.key for f in plan} | {f"{f.key}:none" for f in plan if f.optional}
    unknown = sorted(set(record) - known)
    if unknown:
        raise DecodeError(f"{where}: unknown keys {unknown}")
    rows: list[dict[str, object]] = [{} for _ in range(count)]
    for f in plan:
        values = record.get(f.key)
        none = record.get(f"{f.key}:none", [False] * count)
        for key, column in ((f.key, values), (f"{f.key}:none", none)):
            if not isinstance(column, list) or len(column) != count:
                raise DecodeError(f"{where}: {key!r} is not a list of {count} values")
        for i, (value, missing) in enumerate(zip(values, none)):
            if type(missing) is not bool:
                raise DecodeError(f"{where}: {f.key}:none={missing!r} (row {i}) is not a bool")
            rows[i][f.name] = (
                None
                if missing
                else _scalar(value, f.item, f.spec.finite, f"{where}: {f.key}={value!r} (row {i})")
            )
    return rows


def _row_plan(cls: type) -> tuple[_Field, ...]:
    plan = _plan(cls)
    if any(f.kind != SCALAR for f in plan):
        raise TypeError(f"{cls.__name__}: rows hold scalar fields only")
    return plan


# -- the sampler's generator --------------------------------------------------------------------
def rng_record(rng: np.random.Generator) -> ConfigRecord:
    """The generator's exact state (PCG64's 128-bit integers as JSON text)."""
    return ConfigRecord({"state": json.dumps(rng.bit_generator.state)})


def restore_rng(record: object) -> np.random.Generator:
    """A generator continuing exactly where ``rng_record``'s left off; ``DecodeError`` unless
    ``record`` holds a PCG64 state."""
    if not isinstance(record, ConfigRecord) or set(record) != {"state"}:
        raise DecodeError("rng: expected a ConfigRecord holding only the generator's state")
    try:
        state = json.loads(str(record["state"]))
    except ValueError as err:
        raise DecodeError(f"rng: unreadable state ({err})") from None
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise DecodeError("rng: expected a PCG64 state")
    rng = np.random.default_rng()
    try:
        rng.bit_generator.state = state
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise DecodeError(f"rng: unusable PCG64 state ({type(err).__name__}: {err})") from None
    return rng
