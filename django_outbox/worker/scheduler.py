"""A worker's cron thread, when ``OUTBOX["SCHEDULES"]`` has schedules: it sleeps until the
next tick of any schedule (a minute at most, so schedules another worker moved on are
read again), then enqueues what is due and no other worker has enqueued."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.utils import timezone

from django_outbox import schedules
from django_outbox.worker.background import BackgroundThread

logger = logging.getLogger("django_outbox.worker")

#: The longest the thread sleeps between two looks.
MAX_SLEEP = 60.0


class Scheduler(BackgroundThread):
    name = "outbox-scheduler"

    def __init__(self, worker_id: str) -> None:
        super().__init__()
        self.worker_id = worker_id
        self.enqueued = 0

    def round(self) -> float:
        return self.look()

    def look(self) -> float:
        """Enqueue what is due; returns the seconds until the next look."""
        try:
            results = schedules.enqueue_due()
            upcoming = schedules.next_due()
        except DatabaseError as exc:
            logger.warning("worker %s: schedules not checked (%s)", self.worker_id, exc)
            return MAX_SLEEP / 4
        for result in results:
            self.enqueued += 1
            logger.info(
                "worker %s: enqueued %s for its tick of %s (job %s)",
                self.worker_id,
                result.task.module_path,
                f"{result.task.run_after:%Y-%m-%d %H:%M:%S %Z}" if result.task.run_after else "now",
                result.id,
            )
        if upcoming is None:
            return MAX_SLEEP
        seconds = (upcoming - timezone.now()).total_seconds()
        return min(MAX_SLEEP, max(0.05, seconds + 0.01))
