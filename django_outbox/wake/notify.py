"""The sending side: a commit that enqueued jobs signals their queues, once it commits.

Enqueues register ``transaction.on_commit``: a rollback signals nobody. Per process, a
queue is signalled at most once per ``COALESCE_SECONDS``; a signal asked for inside that
window is sent when it ends (a trailing signal), so the last job is never left unsignalled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from functools import partial

from django.db import transaction

from django_outbox.wake.base import Sender

logger = logging.getLogger("django_outbox.wake")

COALESCE_SECONDS = 0.05


class Coalescer:
    """At most one send per queue per window, with a trailing send for what came between.

    Sends inside the window are held for one long-lived thread per process, which keeps
    its own database connection between sends (no new thread or connection per signal).
    """

    def __init__(self, sender: Sender, window: float = COALESCE_SECONDS) -> None:
        self.sender = sender
        self.window = window
        self._cond = threading.Condition()
        self._last_sent: dict[str, float] = {}
        self._pending: dict[str, float] = {}  # queue -> earliest due, for the trailing send
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failing = False

    def request(self, queues: dict[str, float]) -> None:
        now = time.monotonic()
        send_now: dict[str, float] = {}
        with self._cond:
            for queue, due in queues.items():
                if now - self._last_sent.get(queue, -1e9) >= self.window:
                    self._last_sent[queue] = now
                    send_now[queue] = due
                else:
                    self._pending[queue] = min(due, self._pending.get(queue, due))
            if self._pending:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="outbox-wake-sender", daemon=True
                    )
                    self._thread.start()
                self._cond.notify()
        if send_now:
            self._send(send_now)

    def settle(self) -> None:
        """Send what is held and stop the sender thread (before forking: no threads may run).
        The next request starts it again."""
        with self._cond:
            thread = self._thread
            if thread is None or thread is threading.current_thread():
                return
            self._stopping = True
            self._cond.notify()
        thread.join()
        with self._cond:
            self._thread = None
            self._stopping = False

    def _run(self) -> None:
        from django.db import connections

        try:
            while True:
                with self._cond:
                    while not self._pending and not self._stopping:
                        self._cond.wait()
                    if not self._pending:
                        return  # stopping, nothing held
                    now = time.monotonic()
                    ready_at = min(self._last_sent.get(q, 0.0) + self.window for q in self._pending)
                    if ready_at > now and not self._stopping:
                        self._cond.wait(ready_at - now)
                        continue
                    pending, self._pending = self._pending, {}
                    for queue in pending:
                        self._last_sent[queue] = now
                if not self._send(pending):
                    connections.close_all()  # start the next send on a fresh connection
        finally:
            connections.close_all()

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
    from django_outbox.wake import build_sender

    with _coalescers_lock:
        if using not in _coalescers:
            sender = build_sender(using)
            if sender is None:
                return None
            _coalescers[using] = Coalescer(sender)
        return _coalescers[using]


def settle() -> None:
    """Let every pending trailing signal go out; afterwards no sender thread runs."""
    with _coalescers_lock:
        coalescers = list(_coalescers.values())
    for coalescer in coalescers:
        coalescer.settle()


def reset() -> None:
    """Forget the senders (settings changed)."""
    with _coalescers_lock:
        coalescers = list(_coalescers.values())
        _coalescers.clear()
    for coalescer in coalescers:
        coalescer.settle()  # no orphaned sender threads


def notify_on_commit(due: Iterable[tuple[str, datetime]], using: str) -> None:
    """After the current transaction on ``using`` commits, signal each queue once."""
    if coalescer_for(using) is None:
        return  # nobody listens: cost nothing
    earliest: dict[str, float] = {}
    for queue, run_at in due:
        at = run_at.timestamp()
        earliest[queue] = min(at, earliest.get(queue, at))
    if earliest:
        transaction.on_commit(partial(_send, earliest, using), using=using, robust=True)


def _send(queues: dict[str, float], using: str) -> None:
    coalescer = coalescer_for(using)
    if coalescer is not None:
        coalescer.request(queues)
