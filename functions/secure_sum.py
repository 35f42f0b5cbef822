"""What secure aggregation sends (``strategies.secure_sum``, ``client_app.secure_sum``): the
message types and record keys of its stages, and the fixed-point layout of a summed reply.

A secure sum is SecAgg+ (Bonawitz et al., CCS 2017; Bell et al., CCS 2020) on the Message API:
each node of the sum has a neighbourhood (a ring of ``shares - 1`` neighbours, or everyone) and,
once per run, an X25519 key pair for sealing shares (``setup``). Per sum: ``keys`` (a fresh
masking key pair and a fresh self-mask seed, both Shamir-shared among the neighbours, sealed to
each), then the family's own message with a ``secagg`` record (the node computes its reply,
encodes the summed fields in fixed point and adds its self-mask and its pairwise masks), then
``unmask`` (each node that is still there returns its shares of the self-mask seeds of the nodes
whose vectors arrived and of the masking keys of those that dropped). The server learns the sum
and nothing of one node's vector. An ``unmask`` request may carry the next sum's ``keys``
request (``secagg-next``), so that a run of sums over the same nodes costs two exchanges a sum
besides the first.

Nodes are named by their position in the sum (``me``, ``neighbours``), not by Flower's node ids,
which do not fit a ConfigRecord's signed 64-bit integers.

Fixed point: each field's values travel as integers modulo 2^64, scaled by 2^bits, where the
server chooses ``bits`` from the bound it declares on one node's values and the number of nodes,
so that the sum of every node's values fits in 63 bits (``SumLayout``). A node whose value lies
beyond the declared bound refuses to send it: nothing is clipped, so a sum is exact to the
scale's resolution.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from functions.errors import DecodeError, NonFiniteError

# -- message types (the stages a family's own message is not) -----------------------------------
SETUP = "train.secagg_setup"  # once per run and node: its public key for sealed shares
KEYS = "train.secagg_keys"  # per sum: a masking key, and sealed shares of it and the self-mask
UNMASK = "train.secagg_unmask"  # per sum: shares that remove the masks
STAGES = (SETUP, KEYS, UNMASK)
GROUP = "train.secagg_group"  # a relay's group key (FFGB): made by one node, wrapped to others'
# sealing keys by a node that holds it (``strategies.group_key``)

# -- records -------------------------------------------------------------------------------------
SECAGG = "secagg"  # ConfigRecord of every stage (requests and replies)
NEXT = "secagg-next"  # ConfigRecord: an unmask request's keys request for the next sum, and
# its reply (the next sum's keys: one exchange fewer a sum while the nodes stay the same)
MASKED = "secagg-masked"  # ArrayRecord of a node's masked vector ("vector", uint64)
VECTOR = "vector"

# -- keys of the secagg record ------------------------------------------------------------------
SUM = "sum"  # the sum's number within the run
ME = "me"  # the node's position in the sum
NEIGHBOURS = "neighbours"  # positions of its neighbours
NEIGHBOUR_KEYS = "neighbour-keys"  # their public keys (sealing in keys, masking in the vector)
OWN_KEY = "own-key"  # keys: the node's sealing key as the server holds it
THRESHOLD = "threshold"  # shares that rebuild a secret
SEALING_KEY = "sealing-key"  # setup reply
MASKING_KEY = "masking-key"  # keys reply: the sum's public masking key
DESTINATIONS = "destinations"  # keys reply: the neighbour each sealed share is for
SEALED = "sealed"  # keys reply: sealed shares; vector request: those for this node (by neighbour)
SEED_COMMITMENT = "seed-commitment"  # keys reply: SHA-256 of the self-mask seed
SEED_SHARE_COMMITMENTS = "seed-share-commitments"  # keys reply: per holder, neighbours then self
KEY_SHARE_COMMITMENTS = "key-share-commitments"
ALIVE = "alive"  # unmask request: neighbours whose vectors arrived (their seeds' shares)
DROPPED = "dropped"  # unmask request: neighbours that dropped (their masking keys' shares)
OWNERS = "owners"  # unmask reply: whose secret each share is
SHARES = "shares"
LAYOUT = "layout"  # vector request: the summed fields (``SumLayout.to_config``), as JSON
LAYOUT_COLUMNS = ("records", "names", "sizes", "bounds", "bits", "integer")  # a list each
WEIGHT = "weight"  # "record/name" of the field every other field is multiplied by ("": none)
RECIPIENT_KEYS = "recipient-keys"  # group request: the sealing keys to wrap the group key to
CREATE = "create"  # group request: make a fresh group key (nothing is sealed under one yet)
WRAP_FROM, WRAP = "wrap-from", "wrap"  # the group key wrapped to a node: the wrapper's sealing
# key and the Fernet token (group request: the asked node's own; ``GROUP_KEY`` of a message)
WRAPS = "wraps"  # group reply: one wrap per recipient key, in order
GROUP_KEY = "group-key"  # ConfigRecord of a family's message: the recipient's wrap
MAX_LAYOUT_CHARS = 1 << 20  # a layout's JSON: far beyond any family's

RING_BITS = 62  # the sum of every node's bound, scaled, stays below 2^62 (63 bits signed)
MIN_BITS = 20  # a float field is resolved to 2^-20 or finer (else its bound is refused)
NONFINITE = "holds NaN or inf"  # in a node's refusal of a field it cannot send
MAX_NODES_IN_SUM = 100_000
MAX_LENGTH = 1 << 28  # elements of one summed vector


@dataclass(frozen=True)
class SumField:
    """One summed quantity of a reply: array ``name`` of the ArrayRecord ``record`` (or value
    ``name`` of a MetricRecord), ``size`` elements, each at most ``bound`` in absolute value on
    one node (after weighting); ``integer`` fields (counts) travel unscaled."""

    record: str
    name: str
    size: int
    bound: float
    integer: bool = False

    @property
    def key(self) -> str:
        return f"{self.record}/{self.name}"


def scale_bits(field: SumField, nodes: int) -> int:
    """The power of two a float field is scaled by: the largest that keeps ``nodes`` values of
    ``bound`` below 2^62; 0 for an integer field. ``ValueError`` when the bound is too large for
    that resolution (``MIN_BITS``) or an integer field's sum could overflow."""
    total = nodes * field.bound
    if field.integer:
        if total >= 2.0**RING_BITS:
            raise ValueError(f"{field.key}: {nodes} nodes x bound {field.bound} overflow 2^62")
        return 0
    bits = math.floor(RING_BITS - math.log2(total)) if total > 0 else RING_BITS
    if bits < MIN_BITS:
        raise ValueError(
            f"{field.key}: bound {field.bound} on {nodes} nodes leaves a resolution of "
            f"2^-{bits}, coarser than 2^-{MIN_BITS}"
        )
    return min(bits, RING_BITS)


@dataclass(frozen=True)
class SumLayout:
    """The fields of a summed reply, their scales (for ``nodes`` nodes) and the weight field,
    in the order they are laid out in the masked vector."""

    fields: tuple[SumField, ...]
    bits: tuple[int, ...]
    weight: str = ""

    @classmethod
    def of(cls, fields: Sequence[SumField], nodes: int, weight: str = "") -> SumLayout:
        keys = [f.key for f in fields]
        if len(set(keys)) != len(keys):
            raise ValueError(f"a field is listed twice: {keys}")
        if weight and weight not in keys:
            raise ValueError(f"the weight {weight!r} is not one of the fields {keys}")
        return cls(tuple(fields), tuple(scale_bits(f, nodes) for f in fields), weight)

    @property
    def length(self) -> int:
        return sum(f.size for f in self.fields)

    def to_config(self) -> dict:
        """The layout as the secagg record's ``layout``: one JSON text of a list per column and
        the weight, since each item of a record is encoded, hashed and metered on its own."""
        columns = (
            [f.record for f in self.fields],
            [f.name for f in self.fields],
            [f.size for f in self.fields],
            [float(f.bound) for f in self.fields],
            list(self.bits),
            [f.integer for f in self.fields],
        )
        declared = {**dict(zip(LAYOUT_COLUMNS, columns)), WEIGHT: self.weight}
        return {LAYOUT: json.dumps(declared, separators=(",", ":"))}

    @classmethod
    def from_config(cls, config: Mapping) -> SumLayout:
        """The layout a request declares, checked (``DecodeError`` otherwise)."""
        text = config.get(LAYOUT)
        try:
            if not isinstance(text, str) or len(text) > MAX_LAYOUT_CHARS:
                raise TypeError
            declared = json.loads(text)
            columns = [list(declared[k]) for k in LAYOUT_COLUMNS]
            weight = declared[WEIGHT]
        except (KeyError, TypeError, ValueError, RecursionError):
            raise DecodeError("secagg: the request declares no complete field layout") from None
        if len({len(c) for c in columns}) != 1 or not columns[0]:
            raise DecodeError("secagg: the field layout's lists differ in length or are empty")
        fields, bits = [], []
        for record, name, size, bound, bit, integer in zip(*columns):
            ok = (
                isinstance(record, str)
                and isinstance(name, str)
                and type(size) is int
                and 0 < size <= MAX_LENGTH
                and isinstance(bound, float)
                and math.isfinite(bound)
                and bound > 0
                and type(bit) is int
                and 0 <= bit <= RING_BITS
                and isinstance(integer, bool)
                and (bit == 0 or not integer)
            )
            if not ok:
                raise DecodeError(f"secagg: field {record}/{name} is declared wrongly")
            fields.append(SumField(record, name, size, bound, integer))
            bits.append(bit)
        layout = cls(tuple(fields), tuple(bits), weight if isinstance(weight, str) else "")
        keys = [f.key for f in fields]
        if len(set(keys)) != len(keys) or (layout.weight and layout.weight not in keys):
            raise DecodeError("secagg: a field listed twice, or a weight that is no field")
        if layout.length > MAX_LENGTH:
            raise DecodeError(f"secagg: a vector longer than {MAX_LENGTH} elements")
        return layout

    # -- a node's side -----------------------------------------------------------------------
    def take(self, content: RecordDict) -> np.ndarray:
        """The fields of a reply's ``content`` (removed from it: records left empty go too),
        weighted, checked against their bounds and encoded: one uint64 vector. An integer
        field that is not weighted and holds integers is encoded as it is, without a float
        round trip."""
        values = {f.key: _take(content, f) for f in self.fields}
        weight = values[self.weight][0] if self.weight else None
        out, start = np.empty(self.length, np.int64), 0
        for field, bits in zip(self.fields, self.bits):
            value = values[field.key]
            weighted = weight is not None and field.key != self.weight
            if field.integer and not weighted and value.dtype.kind in "iu":
                largest = max(-int(value.min()), int(value.max())) if value.size else 0
                self._bounded(field, largest)
                out[start : start + field.size] = value
            else:
                value = value.astype(np.float64, copy=False)
                if weighted:
                    value = value * weight
                if not np.all(np.isfinite(value)):
                    raise NonFiniteError(f"secure sum: {field.key} {NONFINITE}")
                self._bounded(field, float(np.max(np.abs(value))) if value.size else 0.0)
                if field.integer and not np.array_equal(value, np.round(value)):
                    raise DecodeError(f"secure sum: {field.key} must hold integers")
                out[start : start + field.size] = np.rint(np.ldexp(value, bits))
            start += field.size
        return out.view(np.uint64)

    @staticmethod
    def _bounded(field: SumField, largest: float) -> None:
        if largest > field.bound:
            raise DecodeError(
                f"secure sum: {field.key} holds {largest:.6g}, beyond the bound "
                f"{field.bound:.6g} the server declared (nothing is clipped)"
            )

    # -- the server's side ---------------------------------------------------------------------
    def split(self, total: np.ndarray) -> dict[str, np.ndarray]:
        """The summed fields of the unmasked ``total`` (uint64), by ``SumField.key``: float64
        values, int64 for integer fields."""
        signed = total.view(np.int64)
        out, start = {}, 0
        for field, bits in zip(self.fields, self.bits):
            part = signed[start : start + field.size]
            out[field.key] = (
                part.copy() if field.integer else np.ldexp(part.astype(np.float64), -bits)
            )
            start += field.size
        return out


def _take(content: RecordDict, field: SumField) -> np.ndarray:
    record = content.get(field.record)
    if isinstance(record, ArrayRecord) and field.name in record:
        value = record[field.name].numpy().ravel()
        del record[field.name]
    elif isinstance(record, MetricRecord) and field.name in record:
        value = np.asarray(record[field.name]).ravel()
        del record[field.name]
    else:
        raise DecodeError(f"secure sum: the reply holds no {field.key} to sum")
    if value.size != field.size:
        raise DecodeError(f"secure sum: {field.key} has {value.size} values, not {field.size}")
    if not len(record):
        del content[field.record]
    return value


def positions(config: ConfigRecord, key: str, limit: int) -> list[int]:
    """A list of distinct positions in [0, limit) from a secagg record (``DecodeError``
    otherwise)."""
    values = config.get(key)
    if not isinstance(values, list) or any(type(v) is not int for v in values):
        raise DecodeError(f"secagg: {key} must be a list of positions")
    if len(set(values)) != len(values) or any(not 0 <= v < limit for v in values):
        raise DecodeError(f"secagg: {key} holds a repeated position or one outside the sum")
    return values


def byte_strings(config: ConfigRecord, key: str, count: int, size: int | None = None) -> list:
    """``count`` byte strings (each ``size`` long when given) from a secagg record."""
    values = config.get(key)
    if not isinstance(values, list) or len(values) != count:
        raise DecodeError(f"secagg: {key} must list {count} byte strings")
    if any(not isinstance(v, bytes) or (size is not None and len(v) != size) for v in values):
        raise DecodeError(f"secagg: {key} must hold byte strings of {size} bytes")
    return values
