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


def test_the_idle_wait_grows_to_flowers_and_restarts_after_a_message():
    waits = supernode.PromptWaits(poll=0.05, reply_poll=0.01)
    found = [waits.next_idle_wait() for _ in range(13)]
    assert found == pytest.approx([0.05 * 1.5**k for k in range(11)] + [3, 3])
    assert sum(found[:8]) < 3 < sum(found[:9])  # 9 asks in the first 3 s of an idle wait
    assert waits.pulled(None) is None and waits.next_idle_wait() == 3
    assert waits.pulled(7) == 7 and waits.next_idle_wait() == 0.05
    idle = supernode.PromptWaits(poll=0.05, reply_poll=0.01)
    idle_for_a_day = [idle.next_idle_wait() for _ in range(30_000)]  # 3 s each: 25 h
    assert set(idle_for_a_day[11:]) == {3}  # once overflowed 1.5 ** n after 1,751 empty asks
    doubling = supernode.PromptWaits(poll=0.05, reply_poll=0.01, growth=2)
    assert [doubling.next_idle_wait() for _ in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3, 3]


@pytest.mark.parametrize(
    "poll, reply_poll, growth",
    [(0, 0.01, 1.5), (0.05, -1, 1.5), (0.05, 0.01, 1), (0.05, 0.01, float("nan"))],
)
def test_waits_that_would_spin_or_never_grow_are_refused(poll, reply_poll, growth):
    with pytest.raises(ValueError, match="SuperNode waits"):
        supernode.PromptWaits(poll, reply_poll, growth)


def test_sleep_maps_flowers_waits_and_leaves_others(monkeypatch):
    slept = []
    monkeypatch.setattr(supernode.time, "sleep", slept.append)
    waits = supernode.PromptWaits(poll=0.05, reply_poll=0.01)
    waits.sleep(3)
    waits.sleep(3)
    waits.sleep(0.5)
    waits.sleep(2)
    assert slept == pytest.approx([0.05, 0.075, 0.01, 2])
    assert waits.monotonic is supernode.time.monotonic  # the rest of ``time`` as it is


def test_a_wait_that_is_not_a_number_is_refused_naming_its_variable(monkeypatch):
    monkeypatch.setenv("FL_SUPERNODE_POLL_GROWTH", "fast")
    with pytest.raises(ValueError, match="FL_SUPERNODE_POLL_GROWTH='fast' is not a number"):
        supernode.number_from_env("FL_SUPERNODE_POLL_GROWTH", 1.5)
    monkeypatch.setenv("FL_SUPERNODE_POLL_GROWTH", "")
    assert supernode.number_from_env("FL_SUPERNODE_POLL_GROWTH", 1.5) == 1.5
