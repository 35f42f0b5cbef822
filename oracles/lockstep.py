"""Many nodes' round in one process, their oracle fits run together: the in-process engine's
way to fill a GPU with the paper's small learners (issue 37).

A weak learner's fit is a chain of a few dozen tiny kernels a step; one node's fit leaves a GPU
almost idle, and a node's K fits depend on each other (step k fits the residual of step k - 1).
Different nodes' fits of a round do not: ``Lockstep.run`` runs the nodes' work (one task a
node) in threads, one thread at a time and always in the same order, each until it finishes or
asks for a fit (``ask``); when every task waits for a fit or is done, the fits asked for run
together, one call of their ``run_together`` per group of compatible fits (the batched MLP fit
of ``oracles.mlp_least_squares``), and the tasks go on in order.

Only one thread runs at a time, so nothing the nodes share (torch's global RNG, warning filters,
Flower's task identity) is touched by two at once, and the interleaving is the same in every
run: the rows of a run are determined by its seeds, as without lockstep. Outside ``run`` (a
ClientApp process, a Ray actor), ``ask`` runs the fit at once, alone.

Written here because neither Flower nor torch schedules work across simulated nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
RunTogether = Callable[[list[Any]], None]
"""Carries out a group of compatible fits (their requests, in the tasks' order), in place."""

_local = threading.local()  # the Lockstep worker this thread is, if any
STOPPED = "the lockstep run was interrupted before this task ended"


def ask(group: Hashable, request: T, run_together: Callable[[list[T]], None]) -> None:
    """Have ``request`` carried out by ``run_together``: at once and alone outside a lockstep
    run; inside one, together with the requests of the same ``group`` the other tasks make at
    this point (``run_together`` gets them all; it is taken from the first task to ask)."""
    worker: _Worker | None = getattr(_local, "worker", None)
    if worker is None:
        run_together([request])
        return
    worker.wait_for(_Asked(group, request, run_together))


@dataclass
class _Asked:
    group: Hashable
    request: Any
    run_together: RunTogether
    error: BaseException | None = None


@dataclass
class _Worker(Generic[R]):
    """One task's thread; it runs only between a ``go`` from the scheduler and its next
    ``yielded`` (an ask, or the end of its task)."""

    task: Callable[[], R]
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    yielded: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    asked: _Asked | None = None
    cancelled: bool = False
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def main(self) -> None:
        _local.worker = self
        self.go.acquire()
        try:
            if self.cancelled:
                raise RuntimeError(STOPPED)
            self.result = self.task()
        except BaseException as err:  # handed to the caller of run, in its thread
            self.error = err
        finally:
            self.done = True
            self.yielded.release()

    def wait_for(self, asked: _Asked) -> None:
        """Hand the turn back with ``asked`` and sleep until the scheduler carried it out."""
        self.asked = asked
        self.yielded.release()
        self.go.acquire()
        self.asked = None
        if self.cancelled:
            raise RuntimeError(STOPPED)
        if asked.error is not None:
            raise asked.error

    def turn(self) -> None:
        """Let this task run until it asks for a fit or finishes."""
        self.go.release()
        self.yielded.acquire()

    def cancel(self) -> None:
        """End this task where it waits (the scheduler stopped: its own exception)."""
        self.cancelled = True
        self.go.release()


class Lockstep:
    """Runs tasks in lockstep (module docstring): ``run(tasks)`` returns their results in order,
    or raises the first task's exception after every task has ended."""

    def run(self, tasks: Sequence[Callable[[], R]]) -> list[R]:
        workers = [_Worker(task) for task in tasks]
        threads = [threading.Thread(target=w.main, daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        running = list(workers)
        try:
            while running:
                for worker in running:
                    worker.turn()
                running = [w for w in running if not w.done]
                _carry_out([w.asked for w in running if w.asked is not None])
        finally:
            for worker in running:  # only if the scheduler itself was interrupted
                worker.cancel()
            for thread in threads:
                thread.join()
        for worker in workers:
            if worker.error is not None:
                raise worker.error
        return [w.result for w in workers]


def _carry_out(asked: list[_Asked]) -> None:
    """Each group's requests by the group's ``run_together``, groups in order of first ask; an
    exception is given to every task of its group (raised where it asked)."""
    groups: dict[Hashable, list[_Asked]] = {}
    for one in asked:
        groups.setdefault(one.group, []).append(one)
    for members in groups.values():
        try:
            members[0].run_together([m.request for m in members])
        except Exception as err:  # each asking task raises it: its node's reply is an error
            for member in members:
                member.error = err
