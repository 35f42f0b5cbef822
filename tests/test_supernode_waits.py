"""``deploy.supernode``: Flower's SuperNode with its fixed waits made prompt. It still finds the
waits it replaces in the installed flwr (this fails the day Flower's code moves), and its waits
back off as documented."""

from __future__ import annotations

import pytest
from flwr.supernode import start_client_internal

from deploy import supernode


def test_the_installed_flower_has_the_waits_it_replaces():
    supernode.check_flower()


def test_a_moved_wait_or_another_flower_version_is_refused(monkeypatch):
    monkeypatch.setattr(start_client_internal, "_push_messages", lambda **kw: None)
    with pytest.raises(RuntimeError, match=r"_push_messages has 0 time.sleep\(0.5\) calls"):
        supernode.check_flower()
    monkeypatch.undo()
    monkeypatch.setattr(supernode.flwr, "__version__", "1.43.0")
    with pytest.raises(RuntimeError, match="not 1.43.0: use flower-supernode"):
        supernode.check_flower()


def test_the_idle_wait_doubles_to_flowers_and_restarts_after_a_message():
    waits = supernode.PromptWaits(poll=0.05, reply_poll=0.01)
    assert [waits.next_idle_wait() for _ in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3, 3]
    assert waits.pulled(None) is None and waits.next_idle_wait() == 3
    assert waits.pulled(7) == 7 and waits.next_idle_wait() == 0.05


def test_sleep_maps_flowers_waits_and_leaves_others(monkeypatch):
    slept = []
    monkeypatch.setattr(supernode.time, "sleep", slept.append)
    waits = supernode.PromptWaits(poll=0.05, reply_poll=0.01)
    waits.sleep(3)
    waits.sleep(3)
    waits.sleep(0.5)
    waits.sleep(2)
    assert slept == [0.05, 0.1, 0.01, 2]
    assert waits.monotonic is supernode.time.monotonic  # the rest of ``time`` as it is
