"""Resuming a run from its checkpoint: the same run config, checked key by key, and a strategy
state that loads or is refused as an invalid config.

A checkpoint stores the run config it was written under (every key, defaults resolved). A resumed
run may change only what does not enter the maths or the state (``MAY_CHANGE``): how many rounds,
where the results go, how long a round waits, the quorum and the central evaluation's device.
Anything else (a model width, K, a step size, the task, the seed, the pins) would continue one
run's state under another's rules, for example two models in one FFGB ensemble: refused, with the
key, the saved value and the new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from functions.errors import DecodeError
from run_config.common import MAY_CHANGE
from server_app.checkpoint import Checkpoint, read_checkpoint
from strategies.base import FederatedStrategy
from tasks.errors import ConfigError


def config_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each key outside ``MAY_CHANGE`` whose value differs (or is set in one config only), as
    ``key: saved -> current``, in key order."""
    missing = object()
    changes = []
    for key in sorted(set(saved) | set(current)):
        old, new = saved.get(key, missing), current.get(key, missing)
        if key in MAY_CHANGE or (old == new and isinstance(old, bool) == isinstance(new, bool)):
            continue  # 3 and 3.0 are one value; True and 1 are not
        show = [("(not set)" if v is missing else repr(v)) for v in (old, new)]
        changes.append(f"{key}: {show[0]} -> {show[1]}")
    return changes


def checked_checkpoint(path: Path, algorithm: str, run_config: Mapping[str, Any]) -> Checkpoint:
    """The checkpoint at ``path``, if it belongs to a run of ``algorithm`` under the same run
    config but for ``MAY_CHANGE``; ConfigError naming the first key that differs."""
    checkpoint = read_checkpoint(path)
    if checkpoint.algorithm != algorithm:
        raise ConfigError(f"the checkpoint is of a {checkpoint.algorithm!r} run, not {algorithm!r}")
    changes = config_changes(checkpoint.run_config, run_config)
    if changes:
        raise ConfigError(
            f"resume-from: the run config differs from the checkpoint's in {changes[0]}"
            + (f" (and {len(changes) - 1} more key(s))" if len(changes) > 1 else "")
            + f"; a resumed run may change only {', '.join(MAY_CHANGE)}"
        )
    return checkpoint


def restore(strategy: FederatedStrategy, checkpoint: Checkpoint) -> None:
    """Load the checkpoint's strategy state, every node then counting as one that lost its state
    (a resumed run is a new Flower run), and the last round's nodes' evaluation asked again if
    it was to come with the next round's replies; DecodeError for a state that does not load,
    whatever the fault (a file from disk: a wrong key or shape is a bad file, not a bug to
    trace)."""
    try:
        strategy.load_state_record(checkpoint.strategy, checkpoint.segment_records)
    except DecodeError:
        raise
    except Exception as err:  # any fault of a state read back from disk
        raise DecodeError(
            f"the checkpoint's strategy state does not load ({type(err).__name__}: {err})"
        ) from None
    done = checkpoint.server_round
    strategy.forget_node_states(done + 1)
    if strategy.fuses_evaluation(done) and "train_loss" not in checkpoint.rows[-1]:
        strategy.evaluation_due = done  # it was to ride on the round that did not come
