"""A worker's own pruning, when ``OUTBOX["RETENTION"]`` is set: a thread that runs
``retention.prune`` every EVERY_SECONDS, the first time at a random point of the first
period (so workers started together do not prune together), until the worker stops."""

from __future__ import annotations

import logging
import random
import threading

from django.db import DatabaseError, connections

from django_outbox import retention
from django_outbox.conf import RetentionSettings

logger = logging.getLogger("django_outbox.worker")


class Pruner:
    def __init__(self, settings: RetentionSettings, worker_id: str) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outbox-pruner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the statement in progress (a chunk takes at most 10,000 rows)."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        every = self.settings.EVERY_SECONDS
        wait = random.uniform(0, every)
        while not self._stop.wait(wait):
            self.prune_once()
            wait = every * random.uniform(0.9, 1.1)

    def prune_once(self) -> retention.Pruned | None:
        try:
            pruned = retention.prune(
                self.settings.age, self.settings.STATUSES, progress=self._check_stop
            )
        except _Stopped:
            return None
        except DatabaseError as exc:
            logger.warning("worker %s: pruning failed, tried again later (%s)", self.worker_id, exc)
            return None
        finally:
            connections.close_all()  # this thread's connections only
            self.rounds += 1
        if pruned.total:
            logger.info(
                "worker %s: pruned %s (older than %s)",
                self.worker_id,
                pruned,
                self.settings.OLDER_THAN,
            )
        return pruned

    def _check_stop(self, pruned: retention.Pruned) -> None:
        if self._stop.is_set():
            raise _Stopped


class _Stopped(Exception):
    """The worker is stopping: leave the rest for the next prune."""
