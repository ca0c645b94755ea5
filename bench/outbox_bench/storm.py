"""The retry storm: jobs that all want one row, retrying on conflict, with full-jitter
backoff against a fixed ladder of delays.

Every job tries to take the row; one holds it for ``hold_ms`` and the rest fail and retry.
With a fixed ladder, the jobs that failed together retry together, and fail together again;
full jitter spreads them out, so the slowest job finishes not long after the typical one.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from django.db import connection

import django_outbox
from django_outbox.models import Job, JobStatus
from django_outbox.worker import Worker
from django_outbox.worker.process import start_in_thread
from outbox_bench.tasks import STORM_TABLE, contend_on_a_ladder, contend_with_jitter


@dataclass(frozen=True, slots=True)
class StormFigures:
    backoff: str
    jobs: int
    succeeded: int
    runs: int
    median_s: float
    max_s: float

    @property
    def tail_ratio(self) -> float:
        return self.max_s / self.median_s if self.median_s else float("inf")


def storm(
    jobs: int, hold_ms: float, concurrency: int, queue: str = "default"
) -> list[StormFigures]:
    """Both backoffs, one after the other, each with ``jobs`` jobs on one worker."""
    return [
        _one(name, task, jobs, hold_ms, concurrency, queue)
        for name, task in (
            ("full jitter", contend_with_jitter),
            ("fixed ladder", contend_on_a_ladder),
        )
    ]


def _one(
    name: str, task: object, jobs: int, hold_ms: float, concurrency: int, queue: str
) -> StormFigures:
    theirs = Job.objects.filter(task_path=task.module_path)  # type: ignore[attr-defined]
    theirs.delete()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {STORM_TABLE}")
        cursor.execute(f"CREATE TABLE {STORM_TABLE} (id integer PRIMARY KEY, holder bigint)")
        cursor.execute(f"INSERT INTO {STORM_TABLE} (id, holder) VALUES (1, NULL)")
    try:
        django_outbox.enqueue_many(task.using(queue_name=queue), [((hold_ms,), {})] * jobs)  # type: ignore[attr-defined]
        worker = Worker(queues=[queue], concurrency=concurrency)
        thread = start_in_thread(worker)
        deadline = time.monotonic() + 600
        while theirs.exclude(status__in=[JobStatus.SUCCEEDED, JobStatus.FAILED]).exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        worker.request_stop("the storm is over")
        thread.join(30)
        done = list(theirs.values_list("enqueued_at", "finished_at", "attempts", "status"))
    finally:
        theirs.delete()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {STORM_TABLE}")
    seconds = [
        (f - e).total_seconds()
        for e, f, _a, s in done
        if f is not None and s == JobStatus.SUCCEEDED
    ]
    return StormFigures(
        backoff=name,
        jobs=jobs,
        succeeded=len(seconds),
        runs=sum(a for _e, _f, a, _s in done),
        median_s=statistics.median(seconds) if seconds else 0.0,
        max_s=max(seconds) if seconds else 0.0,
    )
