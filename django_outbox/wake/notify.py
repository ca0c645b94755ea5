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
    """At most one send per queue per window, with a trailing send for what came between."""

    def __init__(self, sender: Sender, window: float = COALESCE_SECONDS) -> None:
        self.sender = sender
        self.window = window
        self._lock = threading.Lock()
        self._last_sent: dict[str, float] = {}
        self._pending: dict[str, float] = {}  # queue -> earliest due, for the trailing send
        self._timer: threading.Timer | None = None
        self._failing = False

    def request(self, queues: dict[str, float]) -> None:
        now = time.monotonic()
        send_now: dict[str, float] = {}
        with self._lock:
            for queue, due in queues.items():
                if now - self._last_sent.get(queue, -1e9) >= self.window:
                    self._last_sent[queue] = now
                    send_now[queue] = due
                else:
                    self._pending[queue] = min(due, self._pending.get(queue, due))
            if self._pending and self._timer is None:
                self._timer = threading.Timer(self.window, self._send_trailing)
                self._timer.daemon = True
                self._timer.start()
        if send_now:
            self._send(send_now)

    def settle(self) -> None:
        """Wait for pending trailing sends (before forking: no threads may be running)."""
        while True:
            with self._lock:
                timer = self._timer
            if timer is None or timer is threading.current_thread():
                return
            timer.join()

    def _send_trailing(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            now = time.monotonic()
            for queue in pending:
                self._last_sent[queue] = now
        if pending:
            self._send(pending)
        with self._lock:
            # Only now is this timer done (settle() waits for it). Requests that came while
            # it sent are held for one more window.
            self._timer = None
            if self._pending:
                self._timer = threading.Timer(self.window, self._send_trailing)
                self._timer.daemon = True
                self._timer.start()
        # This timer thread is done: close any database connection it opened.
        from django.db import connections

        connections.close_all()

    def _send(self, queues: dict[str, float]) -> None:
        try:
            self.sender.send(queues)
        except Exception as exc:  # a signal is a hint: never fail the caller for it
            # Said once per outage, not once per commit.
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            logger.log(
                level, "wake-up through %s failed (%s); workers will poll", self.sender.name, exc
            )
        else:
            if self._failing:
                logger.info("wake-up through %s works again", self.sender.name)
            self._failing = False


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
        _coalescers.clear()


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
