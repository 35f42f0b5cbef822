"""A ServerApp that stops loses nothing: a run resumed from its checkpoint equals one that never
stopped, exactly, for every registered algorithm."""

from __future__ import annotations

import json

import pytest
from flwr.app import RecordDict

from client_app.app import app as client_app
from functions.errors import DecodeError
from run_config.common import COMMON_KEYS, MAY_CHANGE
from run_config.families import algorithm_names
from server_app.app import InvalidRunConfig, run
from server_app.app import main as server_main
from server_app.checkpoint import FILE_NAME, Checkpoint, read_checkpoint
from server_app.recording import BelowQuorum
from server_app.results import CLOCKS
from testing.inprocess_grid import LocalGrid, counting, run_config, server_context
from tests.helpers import RUN_NAME

# partial participation everywhere, so the restored RNG state matters
SMALL = {
    "task": "synthetic",
    "num-server-rounds": 4,
    "fraction-train": 0.5,
    "fedfw.participation": 0.5,
    "feddr.participation": 0.5,
    "local-epochs": 0,
    "local-steps": 3,
    "learning-rate": 0.05,
    "ffgb.local-steps": 2,
    "ffgb.oracle-steps": 10,
    "fedfun.initial-steps": 5,
    "fedfun.local-steps": 3,
    "fedfun.penalty-samples": 20,
    "fedfun.distill-steps": 2,
    "fedfun.distill-samples": 20,
    "fedfun.hidden": "8",
}


class ServerCrash(Exception):
    """Stands for the ServerApp process dying."""


class CrashingGrid(LocalGrid):
    """Raises before delivering any train message of round ``crash_at``."""

    crash_at: int | None = None

    def push_messages(self, messages):
        messages = list(messages)
        for message in messages:
            if (
                message.metadata.message_type == "train"
                and message.content["config"]["server-round"] == self.crash_at
            ):
                raise ServerCrash(f"before round {self.crash_at}")
        return super().push_messages(messages)


def crashed_before(config: dict, server_round: int, num_nodes: int) -> CrashingGrid:
    """Its nodes, after a ServerApp that ran ``config`` died before round ``server_round`` (no
    more crash): ready for the resumed run, which Flower runs as a new run, so every node's
    Context.state is empty again."""
    grid = CrashingGrid(client_app, config, num_nodes)
    grid.crash_at = server_round
    with pytest.raises(ServerCrash):
        run(grid, server_context(config))
    grid.crash_at = None
    for context in grid.contexts.values():
        context.state = RecordDict()
    return grid


def rows_of(out_dir) -> list[dict]:
    rows = json.loads((out_dir / RUN_NAME / "metrics.json").read_text())["rounds"]
    return [{k: v for k, v in r.items() if k not in CLOCKS} for r in rows]


def is_traffic(key: str) -> bool:
    """A row's count of what was sent (a resumed run re-sends every node what it held, and a
    resumed run of sites' own data asks them again)."""
    return "bytes" in key or key in ("models_exchanged", "exchanges")


def assert_resumed_equals(resumed: list[dict], uninterrupted: list[dict], after: int) -> None:
    """Every row equal, but the traffic of rounds after ``after`` (the checkpoint), which can
    only be larger: every node is brought up to date once more."""
    assert [r["round"] for r in resumed] == [r["round"] for r in uninterrupted]
    for got, want in zip(resumed, uninterrupted):
        late = got["round"] > after
        assert {k: v for k, v in got.items() if not (late and is_traffic(k))} == {
            k: v for k, v in want.items() if not (late and is_traffic(k))
        }, got["round"]
        assert all(got[k] >= want[k] for k in got if is_traffic(k)), got["round"]


def config_for(tmp_path, algorithm: str) -> dict:
    return run_config(
        **{
            "output-dir": str(tmp_path),
            "run-name": RUN_NAME,
            **counting({"algorithm": algorithm, **SMALL}),
        }
    )


NODE_HELD = ("feddr", "fedfw-plus", "fedfw-sto")  # node state the server cannot send back


@pytest.mark.parametrize("algorithm", algorithm_names())
@pytest.mark.e2e
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, algorithm):
    whole = config_for(tmp_path / "whole", algorithm)
    run(LocalGrid(client_app, whole, 4), server_context(whole))

    config = config_for(tmp_path / "resumed", algorithm)
    grid = crashed_before(config, 3, 4)
    checkpoint = read_checkpoint(tmp_path / "resumed" / RUN_NAME)
    assert checkpoint.server_round == 2 and len(checkpoint.rows) == 3
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)

    resumed, uninterrupted = rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole")
    assert [r["round"] for r in resumed] == [0, 1, 2, 3, 4]
    if algorithm not in NODE_HELD:
        assert_resumed_equals(resumed, uninterrupted, after=2)
        return
    # FedDR's nodes keep y_i, FedFW+'s their dual y_i and FedFW-sto's their gradient estimator
    # d_i, which the server does not hold: each restarts them as after any lost state (FedDR
    # from its x_hat_i, FedFW's variants from zero). The rows up to the checkpoint are equal,
    # and no round is lost.
    assert resumed[:3] == uninterrupted[:3]
    assert [r["failures"] for r in resumed[3:]] == [0, 0]
    assert [r["participants"] for r in resumed[3:]] == [
        r["participants"] for r in uninterrupted[3:]
    ]


def test_a_checkpoint_survives_its_bytes_and_refuses_garbage(tmp_path):
    config = config_for(tmp_path, "fedfw")
    run(LocalGrid(client_app, config, 3), server_context(config))
    path = tmp_path / RUN_NAME / FILE_NAME
    checkpoint = read_checkpoint(path)
    again = Checkpoint.from_bytes(checkpoint.to_bytes())
    assert (again.server_round, again.rows, again.algorithm) == (4, checkpoint.rows, "fedfw")
    assert set(again.strategy.keys()) == {
        "rng",
        "roster",
        "book",
        "mirror",
        "mirror-sum",
        "xbar",
        "downlink",
        "history",
        "history-arrays",
    }
    for garbage in (b"", b"\x00not a checkpoint", path.read_bytes()[:50]):
        with pytest.raises(DecodeError):
            Checkpoint.from_bytes(garbage)


def test_resuming_with_another_algorithm_stops_before_training(tmp_path):
    config = config_for(tmp_path, "feddr")
    run(LocalGrid(client_app, config, 3), server_context(config))
    other = config_for(tmp_path / "other", "fedfw")
    with pytest.raises(InvalidRunConfig, match="checkpoint is of a 'feddr' run"):
        run(LocalGrid(client_app, other, 3), server_context(other), resume_from=tmp_path / RUN_NAME)


@pytest.mark.parametrize("algorithm", ["fedfun", "ffgb"])
def test_the_resume_from_key_continues_a_run_through_main(tmp_path, algorithm):
    """As an operator restarts a ServerApp: the same run config plus ``resume-from``."""
    whole = config_for(tmp_path / "whole", algorithm)
    run(LocalGrid(client_app, whole, 3), server_context(whole))
    config = config_for(tmp_path / "resumed", algorithm)
    grid = crashed_before(config, 3, 3)
    resumed = {**config, "resume-from": str(tmp_path / "resumed" / RUN_NAME)}
    server_main(grid, server_context(resumed))
    assert_resumed_equals(rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole"), after=2)


@pytest.mark.parametrize("algorithm", ["ffgb", "fedavg", "fedfw", "fedxgb-bagging"])
def test_a_round_whose_evaluation_was_to_come_with_the_next_is_evaluated_on_resume(
    tmp_path, algorithm
):
    """``eval-with-train``: the checkpoint of round 2 holds its row without the nodes'
    figures (they were to come with round 3's replies); the resumed run's first train messages
    ask for them, and every row ends as an uninterrupted run's: exactly, but for round 2's
    nodes' figures with FFGB, equal to rounding (its nodes, new to the resumed run, sum f^2
    from all its learners at once instead of round by round)."""
    every = {"fedfw.participation": 1.0} if algorithm == "fedfw" else {"fraction-train": 1.0}
    whole = {**config_for(tmp_path / "whole", algorithm), **every}
    run(LocalGrid(client_app, whole, 3), server_context(whole))
    config = {**config_for(tmp_path / "resumed", algorithm), **every}
    grid = crashed_before(config, 3, 3)
    checkpoint = read_checkpoint(tmp_path / "resumed" / RUN_NAME)
    assert "train_loss" in checkpoint.rows[1] and "train_loss" not in checkpoint.rows[2]
    run(grid, server_context(config), resume_from=tmp_path / "resumed" / RUN_NAME)
    resumed, whole_rows = rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole")
    late = ("train_loss", "federated_test_loss", "federated_test_accuracy")
    assert [resumed[2][k] for k in late] == pytest.approx([whole_rows[2][k] for k in late], 1e-12)
    if algorithm == "fedavg":  # a node holds nothing between rounds: the same bits
        assert [resumed[2][k] for k in late] == [whole_rows[2][k] for k in late]
    for row in (resumed[2], whole_rows[2]):
        for key in late:
            row[key] = round(row[key], 9)
    assert_resumed_equals(resumed, whole_rows, after=2)


def test_a_round_below_quorum_stops_the_run_which_resumes_later(tmp_path):
    """min-replies: two of four nodes fail round 3; the run stops after round 2 with its results,
    and continues from them once the nodes are back, ending as an uninterrupted run."""
    whole = {**config_for(tmp_path / "whole", "fedfw"), "fedfw.participation": 1.0}
    run(LocalGrid(client_app, whole, 4), server_context(whole))

    def failing(message, context):
        if (
            context.node_config["partition-id"] < 2
            and message.metadata.message_type == "train"
            and message.content["config"]["server-round"] == 3
        ):
            raise RuntimeError("node down")
        return client_app(message, context)

    config = {
        **config_for(tmp_path / "resumed", "fedfw"),
        "min-replies": 3,
        "fedfw.participation": 1.0,
    }
    grid = LocalGrid(failing, config, 4)
    with pytest.raises(BelowQuorum, match="round 3: 2 of 4 nodes asked answered"):
        run(grid, server_context(config))
    assert [r["round"] for r in rows_of(tmp_path / "resumed")] == [0, 1, 2]
    assert read_checkpoint(tmp_path / "resumed" / RUN_NAME).server_round == 2
    grid.client_app = client_app  # the nodes are back, in a new Flower run
    for context in grid.contexts.values():
        context.state = RecordDict()
    run(grid, server_context({**config, "resume-from": str(tmp_path / "resumed" / RUN_NAME)}))
    assert_resumed_equals(rows_of(tmp_path / "resumed"), rows_of(tmp_path / "whole"), after=2)


# --- a checkpoint continues only the run config it was written under (issue 20 item 2) ---------


def _stopped_after_two_rounds(tmp_path, **overrides) -> dict:
    """A run of ``overrides`` whose ServerApp died before round 3; its config."""
    config = {**config_for(tmp_path, "ffgb"), "num-server-rounds": 3, **overrides}
    crashed_before(config, 3, 3)
    return config


@pytest.mark.parametrize(
    "change", [{"ffgb.one-shot": True}, {"ffgb.hidden": 16}, {"ffgb.local-steps": 3}, {"seed": 1}]
)
def test_resuming_under_another_config_is_refused_naming_the_key(tmp_path, change):
    """ffgb-l resumed as one-shot died with a raw KeyError: 'pool'; a changed width or K was
    accepted and mixed two models in one ensemble. Both are now refused before any message."""
    config = _stopped_after_two_rounds(tmp_path, algorithm="ffgb-l")
    ((key, value),) = change.items()
    changed = {**config, key: value, "resume-from": str(tmp_path / RUN_NAME)}
    grid = LocalGrid(client_app, changed, 3)
    with pytest.raises(InvalidRunConfig, match=f"differs from the checkpoint's in {key}: "):
        run(grid, server_context(changed))
    assert grid.round == 0  # no message was sent


def test_resuming_may_change_the_rounds_and_the_quorum(tmp_path):
    config = _stopped_after_two_rounds(tmp_path)
    longer = {
        **config,
        "num-server-rounds": 4,
        "min-replies": 1,
        "reply-timeout": 30.0,
        "resume-from": str(tmp_path / RUN_NAME),
    }
    run(LocalGrid(client_app, longer, 3), server_context(longer))
    assert [r["round"] for r in rows_of(tmp_path)] == [0, 1, 2, 3, 4]


def test_a_strategy_state_that_does_not_load_is_an_invalid_config(tmp_path):
    """A checkpoint whose strategy records are wrong (here: one removed) stops the run with
    InvalidRunConfig naming the fault, never a traceback from inside the strategy."""
    config = _stopped_after_two_rounds(tmp_path)
    path = tmp_path / RUN_NAME / FILE_NAME
    checkpoint = read_checkpoint(path)
    removed = sorted(checkpoint.strategy.keys())[-1]
    del checkpoint.strategy[removed]
    path.write_bytes(checkpoint.to_bytes())
    resumed = {**config, "resume-from": str(tmp_path / RUN_NAME)}
    with pytest.raises(InvalidRunConfig, match=f"record '{removed}' is missing"):
        run(LocalGrid(client_app, resumed, 3), server_context(resumed))


def test_ffgb_learners_are_checkpointed_once_and_a_changed_segment_is_refused(tmp_path):
    """The checkpoint lists one segment per round's learners; each is appended to the segments
    file once (the file grows by one round's learners a round, not by the ensemble); a segment
    whose bytes changed on disk stops a resume with InvalidRunConfig naming it."""
    config = {**config_for(tmp_path, "ffgb"), "num-server-rounds": 3, "fraction-train": 1.0}
    sizes = []

    class Watching(LocalGrid):
        def send_and_receive(self, messages, *, timeout=None):
            segments = sorted((tmp_path / RUN_NAME).glob("checkpoint.segments.*"))
            sizes.append(sum(p.stat().st_size for p in segments))
            return super().send_and_receive(messages, timeout=timeout)

    run(Watching(client_app, config, 3), server_context(config))
    checkpoint = read_checkpoint(tmp_path / RUN_NAME)
    names = list(checkpoint.segments)
    assert names == ["learners-1-6", "learners-7-12", "learners-13-18"]  # 3 nodes, K = 2
    growth = [b - a for a, b in zip(sizes, sizes[1:]) if b != a]
    assert len(set(growth)) == 1  # each round appends one round's learners, the same size
    entry = checkpoint.segments[names[1]]
    segments = tmp_path / RUN_NAME / checkpoint.segments_file
    data = bytearray(segments.read_bytes())
    data[entry.offset + entry.length // 2] ^= 1
    segments.write_bytes(bytes(data))
    resumed = {**config, "num-server-rounds": 4, "resume-from": str(tmp_path / RUN_NAME)}
    with pytest.raises(InvalidRunConfig, match="segment 'learners-7-12'.*changed bytes"):
        run(LocalGrid(client_app, resumed, 3), server_context(resumed))


def test_the_keys_a_resume_may_change_are_the_ones_resume_froms_help_names():
    help_text = next(k.help for k in COMMON_KEYS if k.name == "resume-from")
    named = {k for k in MAY_CHANGE if k != "resume-from" and f"`{k}`" in help_text}
    assert named == set(MAY_CHANGE) - {"resume-from"}
