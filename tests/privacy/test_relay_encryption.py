"""``relay-encryption=true``: FedFun's nodes seal their models to each other and the server stores
and forwards ciphertext only (``functions.sealed_relay``).

In-process runs of the real ServerApp and ClientApp: the encrypted run's rows are the plain run's
(MLPs and KDDTs), no message the server sends or receives and no checkpoint holds a model in the
clear, and a node back with new keys fits afresh and is sent only what it can open. The sealing
itself: a model opens for its recipients only, and a changed byte, another sender or a wrong
recipient list is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from flwr.app import RecordDict

from client_app.app import app as client_app
from functions.errors import DecodeError
from functions.protocol import MODEL_ARRAYS, MODELS, NEIGHBOURS, TRAIN
from functions.sealed_relay import (
    BOX,
    FROM,
    SEALED_KEYS,
    WRAPS,
    check_sealed,
    check_sealed_form,
    open_model,
    seal_model,
)
from functions.secagg_crypto import new_key_pair
from run_config.common import RunSettings
from run_config.families import inert_keys
from server_app.app import run
from server_app.checkpoint import read_checkpoint
from server_app.results import CLOCKS
from testing.inprocess_grid import LocalGrid, round_of, run_config, server_context
from testing.recording_grid import RecordingGrid
from tests.helpers import RUN_NAME
from tests.lifecycle.test_checkpoints import crashed_before

NODES, ROUNDS = 4, 5
SMALL = {
    "algorithm": "fedfun",
    "task": "synthetic",
    "num-server-rounds": ROUNDS,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.hidden": "8",
}
LEARNERS = {
    "mlp": {},
    "tree": {"task": "wine", "fedfun.learner": "tree", "fedfun.delta": 0.1, "num-server-rounds": 2},
}
ENCRYPTED = {"relay-encryption": True}
TRAFFIC = (*CLOCKS, "models_exchanged", "exchanges")  # what a relay counts, not what it computes


def config_for(out: Path, **extra) -> dict:
    return run_config(**{"output-dir": str(out), "run-name": RUN_NAME, **SMALL, **extra})


def rows_of(out: Path) -> list[dict]:
    return json.loads((out / RUN_NAME / "metrics.json").read_text())["rounds"]


def without_traffic(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "bytes" not in k and k not in TRAFFIC} for r in rows]


def plain_and_sealed(
    tmp_path: Path, config_of: Callable[..., dict], nodes: int
) -> tuple[RecordingGrid, list[dict], list[dict]]:
    """The run of ``config_of(out, **extra)`` plain and with ``relay-encryption``, in-process:
    the sealed run's grid, every exchange recorded, and both runs' rows without their traffic."""
    grids = {}
    for name, extra in (("plain", {}), ("sealed", ENCRYPTED)):
        config = config_of(tmp_path / name, **extra)
        grids[name] = RecordingGrid(LocalGrid(client_app, config, nodes))
        run(grids[name], server_context(config))
    plain, sealed = (without_traffic(rows_of(tmp_path / n)) for n in ("plain", "sealed"))
    return grids["sealed"], plain, sealed


def assert_no_model_in_the_clear(content: RecordDict) -> None:
    """Every model of a relayed record is sealed: its keys are a prefix's sealed fields only,
    and no arrays travel beside them."""
    if MODELS not in content:
        return
    for key in content[MODELS]:
        assert key.endswith(SEALED_KEYS), key
    assert not len(content[MODEL_ARRAYS])


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_the_encrypted_relay_gives_the_plain_run_and_the_server_holds_only_ciphertext(
    tmp_path, learner
):
    grid, plain, sealed = plain_and_sealed(
        tmp_path, lambda out, **extra: config_for(out, **LEARNERS[learner], **extra), NODES
    )
    assert sealed == plain
    assert sealed[-1]["participants"] == NODES and sealed[-1]["failures"] == 0
    replies = [r for r in grid.replies(TRAIN) if r.has_content()]
    assert len(replies) == NODES * (sealed[-1]["round"] + 1)
    for reply in replies:
        assert_no_model_in_the_clear(reply.content)
    sent = [e.sent for e in grid.exchanges if e.sent.metadata.message_type == TRAIN]
    assert any(len(m.content[MODELS]) for m in sent)
    for message in sent:
        assert_no_model_in_the_clear(message.content)
    relay = read_checkpoint(tmp_path / "sealed" / RUN_NAME).strategy
    stored = [k for k in relay["relay-models"] if k.endswith(BOX)]
    assert len(stored) == NODES and not len(relay["relay-models-arrays"])


def test_a_node_back_with_new_keys_fits_afresh_and_gets_only_what_it_can_open(tmp_path):
    """Partition 2's node is gone from round 3 and a restarted SuperNode (new id, new keys)
    serves it from round 4: its first message names no own model, lists no neighbour model
    sealed before round 4, and the run goes on with every node."""
    config = config_for(tmp_path, **ENCRYPTED)
    grid = LocalGrid(client_app, config, NODES)
    old = grid.partition_node(2)
    grid.leave(old, from_round=3)
    new = grid.join(2, from_round=4)
    run(grid, server_context(config))
    first = next(
        m for m in grid.down if m.metadata.dst_node_id == new and m.metadata.message_type == TRAIN
    )
    assert round_of(first) == 4 and first.content["config"]["own-version"] == -1
    assert all(v >= 4 for v in first.content[NEIGHBOURS]["versions"])
    later = [
        m
        for m in grid.down
        if m.metadata.dst_node_id == new and m.metadata.message_type == TRAIN and round_of(m) == 5
    ]
    assert later and later[0].content[NEIGHBOURS]["versions"] == [4, 4]  # sealed to its keys
    rows = rows_of(tmp_path)
    assert rows[-1]["participants"] == NODES and rows[-1]["failures"] == 0
    assert np.isfinite(rows[-1]["consensus_distance"])


def test_a_resumed_encrypted_run_starts_its_nodes_afresh_and_completes(tmp_path):
    config = config_for(tmp_path, **ENCRYPTED)
    grid = crashed_before(config, 3, NODES)
    run(grid, server_context(config), resume_from=tmp_path / RUN_NAME)
    resumed = [m for m in grid.down if m.metadata.message_type == TRAIN and round_of(m) == 3]
    assert {m.content["config"]["own-version"] for m in resumed} == {-1}
    rows = rows_of(tmp_path)
    assert len(rows) == ROUNDS + 1 and rows[-1]["participants"] == NODES


# -- the sealing ---------------------------------------------------------------------------------
def sealed_to(recipients: dict[int, bytes]):
    private, public = new_key_pair()
    arrays = {"self/w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return seal_model({"self/kind": "mlp"}, arrays, private, public, recipients), public


def test_a_sealed_model_opens_for_its_recipients_only():
    keys = {v: new_key_pair() for v in range(3)}
    sealed, sender = sealed_to({v: keys[v][1] for v in (0, 1)})
    for v in (0, 1):
        config, arrays = open_model(sealed, v, keys[v][0], 1 << 20)
        assert config == {"self/kind": "mlp"}
        np.testing.assert_array_equal(arrays["self/w"], np.arange(6).reshape(2, 3))
    with pytest.raises(DecodeError, match="not to this node"):
        open_model(sealed, 2, keys[2][0], 1 << 20)
    with pytest.raises(DecodeError, match="does not open"):
        open_model(sealed, 1, keys[2][0], 1 << 20)  # vertex 1's wrap, another key
    tampered = dict(sealed, **{BOX: sealed[BOX][:-2] + b"AA"})
    with pytest.raises(DecodeError, match="does not open"):
        open_model(tampered, 0, keys[0][0], 1 << 20)
    with pytest.raises(DecodeError, match="more than"):
        open_model(sealed, 0, keys[0][0], 8)
    check_sealed(sealed, [0, 1], sender, 1 << 20)
    check_sealed_form(sealed, 1 << 20)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: {**s, "extra": 1}, "has the fields"),
        (lambda s: {**s, WRAPS: s[WRAPS][:1]}, "one key of at most|a key of at most"),
        (lambda s: {**s, FROM: bytes(32)}, "not the sender's"),
        (lambda s: {**s, BOX: b"x" * (3 << 20)}, "must be bytes of at most"),
    ],
)
def test_the_server_refuses_a_sealed_model_of_another_form(change, words):
    sealed, sender = sealed_to({0: new_key_pair()[1], 1: new_key_pair()[1]})
    with pytest.raises(DecodeError, match=words):
        check_sealed(change(sealed), [0, 1], sender, 1 << 20)
    with pytest.raises(DecodeError, match="must be the recipients"):
        check_sealed(sealed, [1, 0], sender, 1 << 20)


def test_relay_encryption_is_read_by_the_fedfun_family_only():
    for algorithm, inert in (("fedavg", True), ("fedfun", False), ("dfedavgm", False)):
        settings = RunSettings.from_run_config(run_config(**{"algorithm": algorithm, **ENCRYPTED}))
        assert ("relay-encryption" in inert_keys(settings)) is inert, algorithm
