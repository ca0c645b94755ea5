"""A worker's helper thread (pruning, schedules): started with the worker, stopped with it,
each round on its own database connections, closed after the round."""

from __future__ import annotations

import logging
import threading

from django.db import connections

from django_outbox.lib import text

logger = logging.getLogger("django_outbox.worker")

#: Seconds before a round that failed is tried again.
RETRY = 60.0


class BackgroundThread:
    """Calls ``round()`` until stopped; ``round()`` returns the seconds until the next."""

    name = "outbox-background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the round in progress (or its current statement, for a round that
        checks ``stopping``)."""
        self._stop.set()
        self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def first_wait(self) -> float:
        return 0.0

    def round(self) -> float:
        raise NotImplementedError

    def _run(self) -> None:
        wait = self.first_wait()
        while not self._stop.wait(wait):
            try:
                wait = self.round()
            except Exception:
                # A bad schedule or a bug must not end the thread unseen: say so, go on.
                logger.exception(
                    "%s failed (the traceback follows); trying again in %s",
                    self.name,
                    text.duration(RETRY),
                )
                wait = RETRY
            finally:
                connections.close_all()  # this thread's connections only
