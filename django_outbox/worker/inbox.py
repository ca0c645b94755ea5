"""Where the worker's main thread waits: finished runs and wake-up signals, in one place.

The pool's threads put outcomes here, the listener's thread puts signals here, and the main
thread waits on both at once. A worker with free threads therefore hears of a committed job
while its other threads run, instead of when its next job ends.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django_outbox.wake import Wake

if TYPE_CHECKING:
    from django_outbox.jobs.types import Outcome


class Inbox:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._outcomes: list[Outcome] = []
        self._wake = Wake()
        self._poked = False

    def put_outcome(self, outcome: Outcome) -> None:
        with self._cond:
            self._outcomes.append(outcome)
            self._cond.notify()

    def put_wake(self, wake: Wake) -> None:
        """Merge a signal in: looking now wins, the earliest due time is kept."""
        with self._cond:
            held = self._wake
            held.look_now = held.look_now or wake.look_now
            if wake.next_due is not None:
                held.next_due = (
                    wake.next_due if held.next_due is None else min(held.next_due, wake.next_due)
                )
            held.queues |= wake.queues
            self._cond.notify()

    def poke(self) -> None:
        """End the current (or next) wait at once: the worker was asked to stop."""
        with self._cond:
            self._poked = True
            self._cond.notify_all()

    def wait(self, timeout: float) -> None:
        """Return once an outcome, a signal or a poke is here, or after ``timeout`` seconds."""
        with self._cond:
            if not self._has_news():
                self._cond.wait_for(self._has_news, timeout=max(0.0, timeout))
            self._poked = False

    def take_outcomes(self) -> list[Outcome]:
        with self._cond:
            taken, self._outcomes = self._outcomes, []
        return taken

    def take_wake(self) -> Wake:
        with self._cond:
            taken, self._wake = self._wake, Wake()
        return taken

    def _has_news(self) -> bool:
        wake = self._wake
        return bool(self._poked or self._outcomes or wake.look_now or wake.next_due is not None)
