"""``flower-supernode`` with its two fixed waits made short while a run is busy: Flower's own
SuperNode, started through its own entry point, with the ``time.sleep`` calls of
``flwr.supernode.start_client_internal`` replaced.

flwr 1.41's SuperNode waits a fixed 3 s whenever it asks the SuperLink for a message and there
is none (``start_client_internal``: ``time.sleep(3)``), and 0.5 s between its checks for its
ClientApp's reply (``_push_messages``: ``time.sleep(0.5)``, twice); neither is settable, and
together they cost most of a deployment round (benchmarks/README.md, case `latency`). Here:

- the wait for a message starts at ``FL_SUPERNODE_POLL`` seconds (default 0.05) after a message
  and grows by ``FL_SUPERNODE_POLL_GROWTH`` (default 1.5) while none comes, up to Flower's 3 s:
  an idle SuperNode asks the SuperLink as rarely as Flower's does, and one in a busy run waits
  at most half as long again as it has already waited (plus the first step). Growth 1.5 made
  the default job's deployed round shorter than doubling (benchmarks/README.md, case `latency`)
  for a few more asks in a long wait; closer to 1 asks more often and gained nothing on 2
  cores;
- the waits for its ClientApp's reply, a check of its own in-memory state, take
  ``FL_SUPERNODE_REPLY_POLL`` seconds (default 0.01);
- a message's object that the SuperLink does not hold yet (the ServerApp pushes a message's
  objects after the message, and the SuperNode pulls it at once) is asked for again after
  ``FL_SUPERNODE_POLL`` seconds, doubling, instead of Flower's 1 s (``PULL_INITIAL_BACKOFF``,
  ``flwr/supercore/constant.py``), as the warm SuperExec's ClientApps do.

Pinned to the flwr versions whose code it was written against (``SUPPORTED``): it refuses to
start under another, and ``tests/deployment/test_supernode_waits.py`` fails the day Flower's waits
move.

    python -m deploy.supernode <flower-supernode arguments>
"""

from __future__ import annotations

import inspect
import os
import sys
import time

import flwr
from flwr.supernode import start_client_internal
from flwr.supernode.cli import flower_supernode

from deploy.warm_superexec import prompt_object_pulls

SUPPORTED = ("1.41.", "1.42.")  # flwr versions whose SuperNode loop this was checked against
IDLE_WAIT = 3.0  # Flower's wait after a pull that found no message
REPLY_WAIT = 0.5  # Flower's wait between checks for the ClientApp's reply
# (function of start_client_internal, Flower's wait in it, how many times it occurs)
WAITS = (("start_client_internal", IDLE_WAIT, 1), ("_push_messages", REPLY_WAIT, 2))
PULL = "_pull_and_store_message"  # what the loop calls, by keyword, to pull one message


class PromptWaits:
    """The ``time`` module as ``start_client_internal`` sees it, with its ``sleep`` replaced:
    Flower's idle wait backs off from ``poll`` to 3 s, ``growth`` times longer after each pull
    that found nothing, and restarts after each message (``pulled``); its reply waits take
    ``reply_poll``. The SuperNode's loop is one thread."""

    def __init__(self, poll: float, reply_poll: float, growth: float = 1.5) -> None:
        if not poll > 0 or not reply_poll > 0 or not growth > 1:
            raise ValueError(
                f"SuperNode waits: poll {poll} and reply poll {reply_poll} must be above 0 s, "
                f"growth {growth} above 1"
            )
        self.poll, self.reply_poll, self.growth = poll, reply_poll, growth
        self.idle_pulls = 0  # pulls that found no message since the last message
        clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
        self.__dict__.update({k: v for k, v in clock.items() if k != "sleep"})

    def pulled(self, run_id: int | None) -> int | None:
        """Note a pull's outcome (a message restarts the back-off); return it unchanged."""
        if run_id is not None:
            self.idle_pulls = 0
        return run_id

    def next_idle_wait(self) -> float:
        """The wait after one more pull that found nothing."""
        wait = min(IDLE_WAIT, self.poll * self.growth**self.idle_pulls)
        if wait < IDLE_WAIT:  # past Flower's 3 s the count stops (a float power would overflow)
            self.idle_pulls += 1
        return wait

    def sleep(self, seconds: float) -> None:
        if seconds == IDLE_WAIT:
            time.sleep(self.next_idle_wait())
        elif seconds == REPLY_WAIT:
            time.sleep(self.reply_poll)
        else:
            time.sleep(seconds)


def check_flower() -> None:
    """RuntimeError unless the installed flwr is a supported version whose SuperNode loop has
    the waits this module replaces, where it expects them."""
    if not flwr.__version__.startswith(SUPPORTED):
        raise RuntimeError(
            f"deploy.supernode supports flwr {', '.join(v + 'x' for v in SUPPORTED)}, "
            f"not {flwr.__version__}: use flower-supernode"
        )
    loop = inspect.getsource(start_client_internal.start_client_internal)
    if f"run_id = {PULL}(" not in loop or "if run_id is None:" not in loop:
        raise RuntimeError(f"flwr {flwr.__version__}: the SuperNode loop no longer calls {PULL}")
    for name, seconds, count in WAITS:
        source = inspect.getsource(getattr(start_client_internal, name))
        found = source.count(f"time.sleep({seconds:g})")
        if found != count:
            raise RuntimeError(
                f"flwr {flwr.__version__}: {name} has {found} time.sleep({seconds:g}) calls, "
                f"not {count}: deploy.supernode no longer knows its waits"
            )


def number_from_env(name: str, default: float) -> float:
    """The number the environment variable ``name`` holds (``default`` when unset); a
    ValueError naming the variable when it holds something else."""
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number") from None


def main() -> None:
    check_flower()
    poll = number_from_env("FL_SUPERNODE_POLL", 0.05)
    waits = PromptWaits(
        poll,
        number_from_env("FL_SUPERNODE_REPLY_POLL", 0.01),
        number_from_env("FL_SUPERNODE_POLL_GROWTH", 1.5),
    )
    prompt_object_pulls(poll)  # a message's objects the ServerApp is still pushing
    pull = start_client_internal._pull_and_store_message
    start_client_internal.time = waits  # type: ignore[assignment]
    start_client_internal._pull_and_store_message = lambda **kw: waits.pulled(pull(**kw))
    sys.argv = ["flower-supernode", *sys.argv[1:]]
    flower_supernode()


if __name__ == "__main__":
    main()
