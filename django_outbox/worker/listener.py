"""The listener: a thread that waits on the wake-up channel and posts what it hears.

The worker's main thread never waits on the channel itself: it waits on its inbox, where the
listener puts signals and the pool puts finished runs. A signal therefore reaches the worker
whatever it is doing (running jobs, writing outcomes, claiming), and none is dropped: it
stays in the inbox until the main thread takes it, and then leads to a claim.

Polling needs no listener: the producer's own timer is the poll.
"""

from __future__ import annotations

import logging
import threading

from django_outbox.wake import Wake, Waker
from django_outbox.worker.inbox import Inbox

logger = logging.getLogger("django_outbox.worker")

#: Longest single wait on the channel, so a stop request is seen promptly.
WAIT_SECONDS = 1.0


class Listener:
    def __init__(self, waker: Waker, inbox: Inbox, stop: threading.Event) -> None:
        self.waker = waker
        self.inbox = inbox
        self.stop_event = stop
        #: Set while the worker has room for more jobs. A channel on which taking a signal
        #: takes it from other workers (Redis markers) waits for room first, so a busy
        #: worker does not swallow the signal an idle one needs.
        self.has_room = threading.Event()
        self.has_room.set()
        self._thread: threading.Thread | None = None

    def room(self, has_room: bool) -> None:
        if has_room != self.has_room.is_set():
            (self.has_room.set if has_room else self.has_room.clear)()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="outbox-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.has_room.set()  # let a thread waiting for room see the stop
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.waker.close()

    def _run(self) -> None:
        exclusive = self.waker.exclusive
        while not self.stop_event.is_set():
            if exclusive and not self.has_room.wait(WAIT_SECONDS):
                continue
            try:
                wake = self.waker.wait(WAIT_SECONDS)
            except Exception:  # the waker handles its channel's errors; this is a bug
                logger.exception("wake-ups: the listener failed; looking for work now")
                wake = Wake(look_now=True)
                self.stop_event.wait(WAIT_SECONDS)
            if wake.look_now or wake.next_due is not None:
                self.inbox.put_wake(wake)
