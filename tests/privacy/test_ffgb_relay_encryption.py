"""``relay-encryption=true`` for FFGB: the nodes seal their learners under a group key the server
never holds, and the server keeps, relays and checkpoints ciphertext only
(``strategies.group_key``, ``functions.learner_sealing``, ``functions.sealed_learners``).

In-process runs of the real ServerApp and ClientApp: the encrypted run's rows are the plain
run's (trees and MLPs), no message the server sends or receives and no checkpoint segment holds a
learner in the clear, a node that comes back with new keys is given the key by another node and
trains, a resumed run whose nodes kept their state goes on and one whose nodes lost it stops in
one sentence. The sealing itself: a learner opens under the group key only, is checked as the
server checks a plain one, and the server decodes a sealed group within its limits only.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from client_app import group_key
from client_app.app import app as client_app
from client_app.secure_sum import setup
from functions.ensembles import Delta, pack_delta, unpack_delta
from functions.errors import DecodeError
from functions.learner_sealing import open_learners, seal_learners
from functions.limits import Limits
from functions.protocol import DELTA, EVALUATE, TRAIN
from functions.sealed_learners import SEALED_KIND
from functions.secagg_crypto import box
from functions.secure_sum import (
    CREATE,
    GROUP,
    GROUP_KEY,
    OWN_KEY,
    RECIPIENT_KEYS,
    SEALING_KEY,
    SECAGG,
    SETUP,
    WRAP,
    WRAP_FROM,
    WRAPS,
)
from functions.trees import from_sklearn
from run_config.common import RunSettings
from run_config.families import inert_keys
from server_app.app import InvalidRunConfig, run
from server_app.checkpoint import read_checkpoint
from testing.inprocess_grid import LocalGrid, round_of, run_config, server_context
from testing.recording_grid import RecordingGrid
from tests.helpers import RUN_NAME
from tests.lifecycle.test_checkpoints import CrashingGrid, ServerCrash, crashed_before
from tests.privacy.test_relay_encryption import ENCRYPTED, plain_and_sealed, rows_of

NODES, ROUNDS = 3, 4
SMALL = {
    "algorithm": "ffgb",
    "task": "wine",
    "ffgb.learner": "tree",
    "num-server-rounds": ROUNDS,
    "central-evaluation": False,
}
LEARNERS = {
    "tree": {},
    "mlp": {
        "task": "digits",
        "ffgb.learner": "mlp",
        "ffgb.hidden": 8,
        "ffgb.local-steps": 2,
        "ffgb.oracle-steps": 20,
        "num-server-rounds": 2,
    },
}


def config_for(out: Path, **extra) -> dict:
    return run_config(**{"output-dir": str(out), "run-name": RUN_NAME, **SMALL, **extra})


def learner_kinds(config: ConfigRecord | dict) -> set[str]:
    """The kinds of a delta's groups of learners."""
    return {config[f"g{i}.kind"] for i in range(config["groups"])}


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
    assert len(replies) == NODES * sealed[-1]["round"]
    for reply in replies:
        assert learner_kinds(reply.content[DELTA]) == {SEALED_KIND}
    sent = [e.sent for e in grid.exchanges if e.sent.metadata.message_type in (TRAIN, EVALUATE)]
    carried = [m.content[DELTA] for m in sent if m.content[DELTA]["groups"]]
    assert carried and all(learner_kinds(c) == {SEALED_KIND} for c in carried)
    assert all(GROUP_KEY in m.content for m in sent)
    makers = [e for e in grid.exchanges if e.sent.metadata.message_type == GROUP]
    assert len(makers) == 1 and makers[0].sent.content[SECAGG][CREATE] is True
    checkpoint = read_checkpoint(tmp_path / "sealed" / RUN_NAME)
    segments = checkpoint.segment_records.values()
    assert segments and all(learner_kinds(s["learners"]) == {SEALED_KIND} for s in segments)


def test_a_node_back_with_new_keys_is_given_the_group_key_and_trains(tmp_path):
    """Partition 1's node is gone from round 3 and a restarted SuperNode (new id, new keys)
    serves it from round 4: a node that holds the key wraps it to the newcomer's, which then
    opens the whole sealed ensemble and trains."""
    config = config_for(tmp_path, **ENCRYPTED, **{"num-server-rounds": 5})
    local = LocalGrid(client_app, config, NODES)
    old = local.partition_node(1)
    local.leave(old, from_round=3)
    new = local.join(1, from_round=4)
    grid = RecordingGrid(local)
    run(grid, server_context(config))
    asked = [e for e in grid.exchanges if e.sent.metadata.message_type == GROUP]
    assert len(asked) == 2 and asked[1].sent.content[SECAGG][CREATE] is False
    assert asked[1].sent.metadata.dst_node_id != new and asked[1].reply.has_content()
    trained = [
        e for e in grid.exchanges if e.sent.metadata.message_type == TRAIN and e.reply.has_content()
    ]
    assert any(e.reply.metadata.src_node_id == new for e in trained)
    rows = rows_of(tmp_path)
    assert rows[-1]["participants"] == NODES and rows[-1]["failures"] == 0


def test_a_node_that_never_takes_the_group_key_sits_out_and_the_run_says_so(tmp_path):
    """Partition 2's node fails every setup exchange: the server never learns its sealing key,
    so it never holds the group key and sits every round out; the others train, and each round
    is a warning of the run's outcome."""

    def refuses_the_key(message, context):
        if message.metadata.message_type == SETUP and context.node_config["partition-id"] == 2:
            raise RuntimeError("this node gives no sealing key")
        return client_app(message, context)

    config = config_for(tmp_path, **ENCRYPTED, **{"num-server-rounds": 2})
    run(LocalGrid(refuses_the_key, config, NODES), server_context(config))
    assert [r["participants"] for r in rows_of(tmp_path)[1:]] == [NODES - 1] * 2
    outcome = json.loads((tmp_path / RUN_NAME / "config.json").read_text())["outcome"]
    assert outcome["warnings"] == [
        f"round {t}: 1 of {NODES} nodes hold no group key yet and sit this round out"
        for t in (1, 2)
    ]


def test_with_partial_participation_a_node_sampled_later_gets_the_key_from_a_holder(tmp_path):
    """Half the nodes a round: the key is made for round 1's sample; a node first sampled later
    is wrapped the key by a node of round 1's, which that round did not sample."""
    config = config_for(tmp_path, **ENCRYPTED, **{"fraction-train": 0.5, "num-server-rounds": 5})
    grid = RecordingGrid(LocalGrid(client_app, config, 4))
    run(grid, server_context(config))
    rows = rows_of(tmp_path)
    assert [r["participants"] for r in rows[1:]] == [2] * 5
    assert all(r["failures"] == 0 for r in rows)
    trained = {
        e.reply.metadata.src_node_id
        for e in grid.exchanges
        if e.sent.metadata.message_type == TRAIN and e.reply.has_content()
    }
    assert len(trained) == 4


def test_a_resumed_run_whose_nodes_kept_their_state_goes_on(tmp_path):
    """The ServerApp dies before round 3; the SuperNodes live on (a deployment) and still hold
    the group key, which one of them wraps again for the resumed server's nodes."""
    config = config_for(tmp_path, **ENCRYPTED)
    grid = CrashingGrid(client_app, config, NODES)
    grid.crash_at = 3
    with pytest.raises(ServerCrash):
        run(grid, server_context(config))
    grid.crash_at = None
    run(grid, server_context(config), resume_from=tmp_path / RUN_NAME)
    asked = [m for m in grid.down if m.metadata.message_type == GROUP and round_of(m) == 3]
    assert len(asked) == 1 and asked[0].content[SECAGG][CREATE] is False
    rows = rows_of(tmp_path)
    assert len(rows) == ROUNDS + 1 and rows[-1]["participants"] == NODES
    assert rows[-1]["failures"] == 0


def test_a_resumed_simulation_whose_nodes_lost_the_key_stops_in_one_sentence(tmp_path):
    config = config_for(tmp_path, **ENCRYPTED)
    grid = crashed_before(config, 3, NODES)  # every node's Context.state is empty again
    with pytest.raises(InvalidRunConfig, match="no node holds the group key"):
        run(grid, server_context(config), resume_from=tmp_path / RUN_NAME)


@pytest.mark.parametrize(
    "extra, key",
    [
        ({"central-evaluation": True}, "central-evaluation"),
        ({"ffgb.federated-eval": False}, "ffgb.federated-eval"),
        ({"algorithm": "ffgb-l", "ffgb.learner": "mlp", "ffgb.one-shot": True}, "ffgb.one-shot"),
        (
            {"ffgb.learner": "mlp", "ffgb.distill-every": 2, "task": "digits"},
            "ffgb.distill-every",
        ),
    ],
)
def test_what_needs_the_server_to_read_the_learners_is_refused(tmp_path, extra, key):
    config = config_for(tmp_path, **ENCRYPTED, **extra)
    with pytest.raises(InvalidRunConfig, match=rf"{key}.*relay-encryption"):
        run(LocalGrid(client_app, config, NODES), server_context(config))


def test_relay_encryption_is_read_by_the_ffgb_family():
    for algorithm in ("ffgb", "ffgb-c", "ffgb-l"):
        settings = RunSettings.from_run_config(run_config(algorithm=algorithm, **ENCRYPTED))
        assert "relay-encryption" not in inert_keys(settings), algorithm


# -- the group key ------------------------------------------------------------------------------
def node_state() -> tuple[RecordDict, bytes]:
    state = RecordDict()
    return state, setup(RecordDict(), state)[SECAGG][SEALING_KEY]


def group_request(own: bytes, recipients: list[bytes], **extra) -> RecordDict:
    request = ConfigRecord({OWN_KEY: own, RECIPIENT_KEYS: recipients, **extra})
    return RecordDict({SECAGG: request})


def test_the_group_key_reaches_every_node_and_never_the_server():
    (maker, maker_key), (other, other_key), (late, late_key) = (node_state() for _ in range(3))
    wraps = group_key.answer(
        group_request(maker_key, [maker_key, other_key], **{CREATE: True}), maker
    )[SECAGG][WRAPS]
    key = group_key.group_key(ConfigRecord({WRAP_FROM: maker_key, WRAP: wraps[0]}), maker)
    assert group_key.group_key(ConfigRecord({WRAP_FROM: maker_key, WRAP: wraps[1]}), other) == key
    again = group_key.answer(
        group_request(other_key, [late_key], **{WRAP_FROM: maker_key, WRAP: wraps[1]}), other
    )[SECAGG][WRAPS]
    assert group_key.group_key(ConfigRecord({WRAP_FROM: other_key, WRAP: again[0]}), late) == key
    assert all(key not in w for w in (*wraps, *again))
    with pytest.raises(DecodeError, match="does not open"):
        group_key.group_key(ConfigRecord({WRAP_FROM: maker_key, WRAP: wraps[1]}), late)
    with pytest.raises(Exception, match="another sealing key"):
        group_key.answer(group_request(maker_key, [late_key]), other)
    fresh, fresh_key = node_state()
    with pytest.raises(Exception, match="holds no group key"):
        group_key.answer(group_request(fresh_key, [maker_key]), fresh)


# -- the sealed learners ------------------------------------------------------------------------
def tree_learners(depth: int, count: int = 3) -> tuple:
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 4)), rng.normal(size=(40, 2))
    return tuple(
        from_sklearn(
            DecisionTreeRegressor(max_depth=depth, random_state=k).fit(x, y),
            value_dtype=np.float32,
        )
        for k in range(count)
    )


def a_delta(learners: tuple) -> Delta:
    return Delta(5, 0.9, learners, (0.1,) * len(learners), 4, 2)


def never_refuse(learner) -> None:
    """A check that accepts every learner."""


def test_a_sealed_delta_travels_and_opens_to_the_same_learners():
    key, limits = bytes(range(32)), Limits(max_nodes=15, max_features=4, max_outputs=2)
    learners = tree_learners(3)
    sealed = seal_learners(a_delta(learners), key)
    config, arrays = pack_delta(sealed)
    assert learner_kinds(config) == {SEALED_KIND} and set(arrays) == {
        "weights",
        "g0.boxes",
        "g0.lengths",
    }
    received = unpack_delta(config, arrays, limits)
    opened = open_learners(received, key, limits, never_refuse)
    x = np.random.default_rng(1).normal(size=(9, 4))
    for mine, theirs in zip(learners, opened.learners, strict=True):
        np.testing.assert_array_equal(mine.predict(x), theirs.predict(x))
    assert (opened.since, opened.scale, opened.weights) == (5, 0.9, (0.1,) * 3)
    with pytest.raises(DecodeError, match="does not open"):
        open_learners(received, bytes(32), limits, never_refuse)
    assert arrays["g0.lengths"].tolist()[1:] == [0, 0]  # one box for the reply's learners
    with pytest.raises(DecodeError, match="not sealed"):
        open_learners(a_delta(learners), key, limits, never_refuse)
    with pytest.raises(DecodeError, match="tree"):  # deeper than the run allows
        open_learners(seal_learners(a_delta(tree_learners(5)), key), key, limits, never_refuse)

    bomb = box(key, zlib.compress(bytes(1 << 24)), b"ffgb learners 4 -> 2")
    bombed = replace(received.learners[0], box=bomb)
    with pytest.raises(DecodeError, match="inflates beyond"):
        open_learners(
            replace(received, learners=(bombed,), weights=(0.1,)), key, limits, never_refuse
        )
    other = replace(received, n_features=5)  # a box bound to 4 inputs
    with pytest.raises(DecodeError, match="does not open"):
        open_learners(other, key, limits, never_refuse)

    def refuse(learner) -> None:
        raise DecodeError("expected a tree of depth <= 1")

    with pytest.raises(DecodeError, match="depth <= 1"):
        open_learners(received, key, limits, refuse)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda a: {**a, "g0.lengths": a["g0.lengths"] + 1}, "sealed boxes"),
        (lambda a: {**a, "g0.lengths": -a["g0.lengths"]}, "each at least 0"),
        (lambda a: {**a, "g0.lengths": np.roll(a["g0.lengths"], 1)}, "the first above 0"),
        (lambda a: {**a, "g0.lengths": a["g0.lengths"].astype(np.int32)}, "int64"),
        (lambda a: {**a, "g0.extra": a["g0.lengths"]}, "expected arrays"),
    ],
)
def test_the_server_decodes_a_sealed_group_within_its_limits_only(change, words):
    config, arrays = pack_delta(seal_learners(a_delta(tree_learners(2)), bytes(32)))
    limits = Limits(max_nodes=7, max_features=4, max_outputs=2)
    with pytest.raises(DecodeError, match=words):
        unpack_delta(config, change(arrays), limits)
