"""The sending side: a commit that enqueued jobs signals their queues, once it commits.

Enqueues register ``transaction.on_commit``: a rollback signals nobody. The signal goes at
once, from the committing thread: a worker that is idle when a job commits hears of it
within milliseconds. A transaction signals each of its queues once, however many enqueues
it made (a view's loop of a thousand sends commits one signal, not a thousand). Across
threads, signals are coalesced only while one is being sent: a commit whose queue is being
signalled by another thread of the process leaves its signal to that thread, which sends
once more, right after, for everything that came meanwhile. No signal is held for later,
so none is lost when the process exits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.core.signals import setting_changed
from django.db import connections, transaction
from django.dispatch import receiver

from django_outbox.wake.base import Sender
from django_outbox.wake.senders import build_sender

logger = logging.getLogger("django_outbox.wake")


class Coalescer:
    """Sends at once; while a send for a queue is under way, requests for that queue wait
    for it to end and are sent together, once, by the thread that was sending."""

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self._lock = threading.Lock()
        #: Queues a thread is signalling now.
        self._sending: set[str] = set()
        #: queue -> earliest due, asked for while that queue was being signalled.
        self._pending: dict[str, float] = {}
        self._failing = False

    def request(self, queues: dict[str, float]) -> None:
        mine: dict[str, float] = {}
        with self._lock:
            for queue, due in queues.items():
                if queue in self._sending:
                    self._pending[queue] = min(due, self._pending.get(queue, due))
                else:
                    self._sending.add(queue)
                    mine[queue] = due
        while mine:
            self._send(mine)
            with self._lock:
                # What others asked for while this send was under way goes next, from here.
                follow = {q: self._pending.pop(q) for q in mine if q in self._pending}
                self._sending.difference_update(q for q in mine if q not in follow)
            mine = follow

    def _send(self, queues: dict[str, float]) -> bool:
        try:
            self.sender.send(queues)
        except Exception as exc:  # a signal is a hint: never fail the caller for it
            # Said once per outage, not once per commit.
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            logger.log(
                level, "wake-up through %s failed (%s); workers will poll", self.sender.name, exc
            )
            return False
        if self._failing:
            logger.info("wake-up through %s works again", self.sender.name)
        self._failing = False
        return True


_coalescers: dict[str, Coalescer] = {}
_coalescers_lock = threading.Lock()


def coalescer_for(using: str) -> Coalescer | None:
    with _coalescers_lock:
        if using not in _coalescers:
            sender = build_sender(using)
            if sender is None:
                return None
            _coalescers[using] = Coalescer(sender)
        return _coalescers[using]


def reset() -> None:
    """Forget the senders (settings changed)."""
    with _coalescers_lock:
        _coalescers.clear()


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("OUTBOX", "CACHES", "DATABASES"):
        reset()


def notify_on_commit(due: Iterable[tuple[str, datetime]], using: str) -> None:
    """After the current transaction on ``using`` commits, signal each queue once."""
    if coalescer_for(using) is None:
        return  # nobody listens: cost nothing
    earliest: dict[str, float] = {}
    for queue, run_at in due:
        at = run_at.timestamp()
        earliest[queue] = min(at, earliest.get(queue, at))
    if not earliest:
        return
    connection = connections[using]
    # Django's list of (savepoint ids, callable, robust) that transaction.on_commit() fills.
    hooks = connection.run_on_commit
    if connection.in_atomic_block and hooks and isinstance(hooks[-1][1], SignalOnCommit):
        # Joined to the signal this transaction registered last. Django drops a hook when a
        # savepoint it was registered in rolls back; that hook, still registered, was made
        # in savepoints that are still open (each of which is open now too) or released
        # (which no rollback can reach), so whatever rolls back the enqueue made now rolls
        # back either both or neither, or only the enqueue: then the signal still goes,
        # once, for a job that is not there, which costs a worker one empty claim. A
        # signal is never dropped for a job that commits.
        hooks[-1][1].add(earliest)
    else:
        transaction.on_commit(SignalOnCommit(earliest, using), using=using, robust=True)


class SignalOnCommit:
    """The queues a transaction signals when it commits, each at its earliest due time."""

    __slots__ = ("queues", "using")

    def __init__(self, queues: dict[str, float], using: str) -> None:
        self.queues = queues
        self.using = using

    def add(self, queues: dict[str, float]) -> None:
        for queue, due in queues.items():
            self.queues[queue] = min(due, self.queues.get(queue, due))

    def __call__(self) -> None:
        _send(self.queues, self.using)

    def __repr__(self) -> str:  # what Django logs if the signal fails
        return f"wake-up of {sorted(self.queues)} on {self.using!r}"


def _send(queues: dict[str, float], using: str) -> None:
    coalescer = coalescer_for(using)
    if coalescer is not None:
        coalescer.request(queues)
