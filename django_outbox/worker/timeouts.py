"""Runs over their timeout: failed now, and no longer waited for.

Python cannot stop a thread: the function runs on (its ``context.cancelled()`` turns true,
so a task that checks it can stop) and whatever it returns is dropped. Its thread is
reported and counts as stuck until it returns; what the worker does then (drain and be
replaced, or put its waiting jobs back) is the worker's to decide (loop.py)."""

from __future__ import annotations

import logging
import time

from django_outbox.exceptions import JobTimeout
from django_outbox.jobs.types import Outcome
from django_outbox.lib import text
from django_outbox.worker import cancellation
from django_outbox.worker.executor import error_record
from django_outbox.worker.pool import Pool

logger = logging.getLogger("django_outbox.worker")


def time_out_overdue(pool: Pool, worker_id: str) -> list[Outcome]:
    """The outcomes of the runs in ``pool`` over their timeout: each failed with a
    JobTimeout, told to stop, its thread's stack in the log."""
    timed_out = []
    for job, ran in pool.overdue(time.monotonic()):
        cancellation.request(job.id)
        where = pool.abandon(job)
        limit = text.duration(job.timeout or 0)
        logger.error(
            "worker %s: job %s (%s) ran %s, over its %s timeout: recorded as timed out; "
            "its thread cannot be stopped and is still running here:\n%s",
            worker_id,
            job.id,
            job.task_path,
            text.duration(ran),
            limit,
            where.rstrip() or "  (its stack could not be read)",
        )
        try:
            raise JobTimeout(f"{job.task_path} ran over its {limit} timeout.")
        except JobTimeout as exc:
            timed_out.append(Outcome(job, succeeded=False, error=error_record(exc)))
    return timed_out
