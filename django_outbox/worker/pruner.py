"""A worker's own pruning, when ``OUTBOX["RETENTION"]`` is set: a thread that runs
``retention.prune`` every EVERY_SECONDS, the first time at a random point of the first
period (so workers started together do not prune together), until the worker stops. With
PARTITIONS it makes the job table's partitions of the next days first, at start."""

from __future__ import annotations

import logging
import random

from django.db import DatabaseError, connections

from django_outbox import retention
from django_outbox.conf import RetentionSettings
from django_outbox.worker.background import BackgroundThread

logger = logging.getLogger("django_outbox.worker")


class Pruner(BackgroundThread):
    name = "outbox-pruner"

    def __init__(self, settings: RetentionSettings, worker_id: str) -> None:
        super().__init__()
        self.settings = settings
        self.worker_id = worker_id
        self.rounds = 0

    def first_wait(self) -> float:
        if self.settings.PARTITIONS:
            self.make_partitions()
        return random.uniform(0, self.settings.EVERY_SECONDS)

    def make_partitions(self) -> None:
        """Today's and the next days' partitions of a partitioned job table, at start (a
        prune makes them too): finished jobs then land in their day's, not the default."""
        try:
            made = retention.make_partitions()
        except DatabaseError as exc:
            logger.warning(
                "worker %s: making the job table's partitions failed (%s); the next prune "
                "makes them",
                self.worker_id,
                exc,
            )
            return
        finally:
            connections.close_all()  # this thread's connections only
        if made:
            logger.info("worker %s: made partitions %s", self.worker_id, ", ".join(made))

    def round(self) -> float:
        self.prune_once()
        return self.settings.EVERY_SECONDS * random.uniform(0.9, 1.1)

    def prune_once(self) -> retention.Pruned | None:
        try:
            pruned = retention.prune(
                self.settings.age, self.settings.STATUSES, progress=self._check_stop
            )
        except _Stopped:
            return None
        except DatabaseError as exc:
            logger.warning(
                "worker %s: pruning failed (%s); it is tried again at the next round",
                self.worker_id,
                exc,
            )
            return None
        finally:
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
        if self.stopping:
            raise _Stopped


class _Stopped(Exception):
    """The worker is stopping: leave the rest for the next prune."""
