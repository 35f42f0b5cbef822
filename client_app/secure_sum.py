"""The node's half of a secure sum (``functions.secure_sum`` describes the stages).

Whatever family runs, the node answers ``setup``, ``keys`` and ``unmask`` here, and a family's
own message that carries a ``secagg`` record has its reply masked here (``masked_reply``) after
the family computed it. What the node keeps between the stages (its sealing key for the run and
the keys it agreed with its neighbours' sealing keys, the sum's masking key, self-mask seed and
the shares it holds) lives in its ``Context.state``.

An honest node checks every request before it answers, so a curious server cannot make it give
away more than the protocol does: it never returns shares of one neighbour's self-mask seed and
of its masking key in the same sum, answers ``unmask`` once per sum, asks a majority of shares
to rebuild any secret (``threshold``), and masks only with neighbours whose shares it holds.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from client_app.node_state import LostStateError
from functions.errors import DecodeError
from functions.secagg_crypto import (
    KEY_BYTES,
    MASK_PURPOSE,
    SEED_BYTES,
    SHARE_PURPOSE,
    agreements,
    digest,
    mask,
    new_key_pair,
    seal,
    share_bytes,
    split_secret,
    unseal,
)
from functions.secure_sum import (
    ALIVE,
    DESTINATIONS,
    DROPPED,
    KEY_SHARE_COMMITMENTS,
    KEYS,
    MASKED,
    MASKING_KEY,
    MAX_NODES_IN_SUM,
    ME,
    NEIGHBOUR_KEYS,
    NEIGHBOURS,
    NEXT,
    OWN_KEY,
    OWNERS,
    SEALED,
    SEALING_KEY,
    SECAGG,
    SEED_COMMITMENT,
    SEED_SHARE_COMMITMENTS,
    SETUP,
    SHARES,
    SUM,
    THRESHOLD,
    UNMASK,
    VECTOR,
    SumLayout,
    byte_strings,
    positions,
)

STATE = "secagg"  # the node's ConfigRecord in Context.state
RUN_KEYS = ("sealing-private", "sealing-public", "paired", "pair-keys")  # kept between sums
_HEADER = struct.Struct("<qii")  # a sealed share's header: sum, source, destination
_SEED_SHARE = share_bytes(SEED_BYTES)


def _state(state: RecordDict) -> ConfigRecord:
    if STATE not in state:
        state[STATE] = ConfigRecord()
    return state[STATE]


def _request(content: RecordDict) -> ConfigRecord:
    request = content.get(SECAGG)
    if not isinstance(request, ConfigRecord):
        raise DecodeError(f"secagg: the message carries no {SECAGG!r} ConfigRecord")
    return request


def _sum_id(request: ConfigRecord) -> int:
    value = request.get(SUM)
    if type(value) is not int or value < 1:
        raise DecodeError("secagg: a sum's number must be a positive integer")
    return value


def setup(content: RecordDict, state: RecordDict) -> RecordDict:
    """The node's public sealing key for the run (made once, kept in its state)."""
    own = _state(state)
    if "sealing-private" not in own:
        own["sealing-private"], own["sealing-public"] = new_key_pair()
    return RecordDict({SECAGG: ConfigRecord({SEALING_KEY: own["sealing-public"]})})


def sealing_pair(state: RecordDict) -> tuple[bytes, bytes]:
    """The node's sealing key pair for the run (private, public), made by ``setup``; a node
    that lost its state holds none (``LostStateError``)."""
    own = _state(state)
    if "sealing-private" not in own:
        raise LostStateError("this node holds no sealing key; the server will set it up again")
    return own["sealing-private"], own["sealing-public"]


def keys(content: RecordDict, state: RecordDict) -> RecordDict:
    """A fresh masking key pair and self-mask seed for the sum (``sum_keys``)."""
    return RecordDict({SECAGG: sum_keys(_request(content), state)})


def sum_keys(request: ConfigRecord, state: RecordDict) -> ConfigRecord:
    """A fresh masking key pair and self-mask seed for the sum; each Shamir-shared among the
    node and its neighbours (``threshold`` of them rebuild it), every neighbour's shares sealed
    to it, with commitments to the seed and to every share. A sum the node was keyed for and
    never unmasked is forgotten."""
    own = _state(state)
    sum_id = _sum_id(request)
    if own.get("sealing-public") is None or request.get(OWN_KEY) != own["sealing-public"]:
        raise LostStateError("this node holds no secure-aggregation key of this run")
    if sum_id <= own.get("answered", 0):
        raise DecodeError(f"secagg: sum {sum_id} is not a new sum")
    me = request.get(ME)
    if type(me) is not int or not 0 <= me < MAX_NODES_IN_SUM:
        raise DecodeError("secagg: the node's position must be an integer")
    neighbours = positions(request, NEIGHBOURS, MAX_NODES_IN_SUM)
    if me in neighbours:
        raise DecodeError("secagg: the node is listed among its own neighbours")
    sealing = byte_strings(request, NEIGHBOUR_KEYS, len(neighbours), KEY_BYTES)
    threshold = _threshold(request, len(neighbours) + 1)
    pair_keys = _pair_keys(own, sealing)
    private, public = new_key_pair()
    seed = os.urandom(SEED_BYTES)
    seed_shares = split_secret(seed, threshold, len(neighbours) + 1)
    key_shares = split_secret(private, threshold, len(neighbours) + 1)
    sealed = [
        seal(key, _HEADER.pack(sum_id, me, other) + seed_share + key_share)
        for other, key, seed_share, key_share in zip(neighbours, pair_keys, seed_shares, key_shares)
    ]
    own.update(
        {
            SUM: sum_id,
            ME: me,
            THRESHOLD: threshold,
            "neighbours": neighbours,
            "neighbour-pair-keys": pair_keys,
            "masking-private": private,
            "seed": seed,
            "held-owners": [me],
            "held-seed": [seed_shares[-1]],
            "held-key": [key_shares[-1]],
            "stage": KEYS,
        }
    )
    return ConfigRecord(
        {
            SUM: sum_id,
            MASKING_KEY: public,
            DESTINATIONS: neighbours,
            SEALED: sealed,
            SEED_COMMITMENT: digest(seed),
            SEED_SHARE_COMMITMENTS: [digest(s) for s in seed_shares],
            KEY_SHARE_COMMITMENTS: [digest(s) for s in key_shares],
        }
    )


def _pair_keys(own: ConfigRecord, sealing: list[bytes]) -> list[bytes]:
    """The keys that seal shares between this node and the owners of ``sealing`` (their
    sealing keys for the run): a pair's key is the same all run, so it is agreed once and kept
    (for the latest sum's neighbours) instead of on every sum, twice (sealing, then opening)."""
    known = dict(zip(own.get("paired", []), own.get("pair-keys", [])))
    new = list(dict.fromkeys(key for key in sealing if key not in known))
    if new:
        known.update(zip(new, agreements(own["sealing-private"], new, SHARE_PURPOSE)))
    pair_keys = [known[key] for key in sealing]
    own["paired"], own["pair-keys"] = sealing, pair_keys
    return pair_keys


def _threshold(request: ConfigRecord, holders: int) -> int:
    """The request's threshold: a majority of a secret's ``holders`` (so that no two disjoint
    sets of holders both rebuild secrets of one node), and no more than there are."""
    threshold = request.get(THRESHOLD)
    if type(threshold) is not int or not holders // 2 < threshold <= holders or threshold < 2:
        raise DecodeError(
            f"secagg: threshold {threshold!r} is not a majority of the {holders} share holders"
        )
    return threshold


def masked_reply(
    content: RecordDict,
    state: RecordDict,
    answer: Callable[[RecordDict], RecordDict],
) -> RecordDict:
    """The family's reply to ``content`` (``answer``) with the request's fields taken out,
    encoded and masked: its self-mask and, with every neighbour that shared keys, their pairwise
    mask (added by the node of the higher position, subtracted by the lower). The shares sealed
    to this node are opened, checked and kept for ``unmask``."""
    request = content.pop(SECAGG)
    if not isinstance(request, ConfigRecord):
        raise DecodeError(f"secagg: {SECAGG!r} must be a ConfigRecord")
    own = _state(state)
    sum_id = _sum_id(request)
    if own.get(SUM) != sum_id or own.get("stage") != KEYS:
        raise LostStateError(f"this node holds no keys of secure sum {sum_id}")
    me = own[ME]
    layout = SumLayout.from_config(request)
    neighbours = positions(request, NEIGHBOURS, MAX_NODES_IN_SUM)
    if not set(neighbours) <= set(own["neighbours"]):
        raise DecodeError("secagg: a neighbour this node did not share keys with")
    if len(neighbours) + 1 < own[THRESHOLD]:
        raise DecodeError("secagg: fewer neighbours left than the threshold")
    masking = byte_strings(request, NEIGHBOUR_KEYS, len(neighbours), KEY_BYTES)
    _hold_shares(own, byte_strings(request, SEALED, len(neighbours)), neighbours, sum_id)
    reply = answer(content)
    vector = layout.take(reply)
    vector += mask(own["seed"], len(vector))
    pair_seeds = agreements(own["masking-private"], masking, _mask_purpose(sum_id))
    for other, pair_seed in zip(neighbours, pair_seeds):
        if me > other:
            vector += mask(pair_seed, len(vector))
        else:
            vector -= mask(pair_seed, len(vector))
    own["stage"] = MASKED
    own["vector-neighbours"] = neighbours
    reply[MASKED] = ArrayRecord({VECTOR: Array(vector)})
    return reply


def _mask_purpose(sum_id: int) -> bytes:
    return MASK_PURPOSE + sum_id.to_bytes(8, "little")


def _hold_shares(own: ConfigRecord, sealed: list[bytes], sources: list[int], sum_id: int) -> None:
    """Open the shares sealed to this node by its neighbours ``sources`` (among those it shared
    keys with) and keep them."""
    me = own[ME]
    keys_of = dict(zip(own["neighbours"], own["neighbour-pair-keys"]))
    owners, seeds, masking = [me], [own["held-seed"][0]], [own["held-key"][0]]
    for source, token in zip(sources, sealed):
        plain = unseal(keys_of[source], token)
        if len(plain) != _HEADER.size + _SEED_SHARE + share_bytes(KEY_BYTES):
            raise DecodeError(f"secagg: the shares from position {source} are malformed")
        if _HEADER.unpack_from(plain) != (sum_id, source, me):
            raise DecodeError(f"secagg: shares from position {source} are for another sum or node")
        body = plain[_HEADER.size :]
        owners.append(source)
        seeds.append(body[:_SEED_SHARE])
        masking.append(body[_SEED_SHARE:])
    own["held-owners"], own["held-seed"], own["held-key"] = owners, seeds, masking


def unmask(content: RecordDict, state: RecordDict) -> RecordDict:
    """This node's shares of the self-mask seeds of ``alive`` neighbours (and its own) and of
    the masking keys of ``dropped`` ones; once per sum, never both kinds for one neighbour.
    With a ``secagg-next`` request, also the next sum's keys (``sum_keys``; left out when the
    node cannot make them: the server then asks for them apart)."""
    request, own = _request(content), _state(state)
    sum_id = _sum_id(request)
    if own.get(SUM) != sum_id or own.get("stage") != MASKED:
        raise LostStateError(f"this node sent no masked vector of secure sum {sum_id}")
    alive = positions(request, ALIVE, MAX_NODES_IN_SUM)
    dropped = positions(request, DROPPED, MAX_NODES_IN_SUM)
    me = own[ME]
    if set(alive) & set(dropped) or me in dropped:
        raise DecodeError("secagg: a neighbour listed both alive and dropped")
    if not set(alive) | set(dropped) <= set(own["vector-neighbours"]) | {me}:
        raise DecodeError("secagg: alive or dropped lists a node that is not a neighbour")
    if len(set(alive) | {me}) < own[THRESHOLD]:
        raise DecodeError("secagg: fewer nodes alive than the threshold")
    held = {o: i for i, o in enumerate(own["held-owners"])}
    missing = [p for p in (*alive, *dropped) if p not in held]
    if missing:
        raise DecodeError(f"secagg: this node holds no shares of positions {missing}")
    owners = sorted(set(alive) | {me})
    shares = [own["held-seed"][held[p]] for p in owners]
    shares += [own["held-key"][held[p]] for p in dropped]
    state[STATE] = ConfigRecord({k: own[k] for k in RUN_KEYS if k in own} | {"answered": sum_id})
    reply = RecordDict(
        {SECAGG: ConfigRecord({SUM: sum_id, OWNERS: [*owners, *dropped], SHARES: shares})}
    )
    following = content.get(NEXT)
    if isinstance(following, ConfigRecord):
        try:
            reply[NEXT] = sum_keys(following, state)
        except (DecodeError, LostStateError):
            pass  # the next sum asks for its keys in an exchange of their own
    return reply


HANDLERS: dict[str, Callable[[RecordDict, RecordDict], RecordDict]] = {
    SETUP: setup,
    KEYS: keys,
    UNMASK: unmask,
}
