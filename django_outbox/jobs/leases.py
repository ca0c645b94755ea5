"""Leases: heartbeats renew them, rescue takes back the jobs of workers that stopped.

A claimed job is leased to one worker until ``lease_until``. Its worker renews the lease
of every job it holds in one statement per heartbeat; any worker requeues jobs whose
lease ran out (the run counts as an attempt; past ``max_attempts`` the job fails with a
``WorkerLost`` error). Each rescue statement re-checks status and lease itself, so a job
that finished or was renewed a moment ago is never overwritten.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from django_outbox.exceptions import WorkerLost
from django_outbox.jobs import keys, steps
from django_outbox.jobs.expressions import JSONAppend, JSONRemoveLast
from django_outbox.jobs.returning import update_returning, update_sql
from django_outbox.models import Job, JobStatus, Worker


def register_worker(worker_id: str, queues: list[str], concurrency: int, pid: int) -> None:
    now = timezone.now()
    Worker.objects.update_or_create(
        id=worker_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": pid,
            "queues": queues,
            "concurrency": concurrency,
            "started_at": now,
            "heartbeat_at": now,
            "stopped_at": None,
        },
    )


@dataclass(frozen=True, slots=True)
class Renewed:
    #: Jobs this worker holds.
    count: int
    #: Those of them someone asked to stop.
    cancel_requested: frozenset[int]


def heartbeat(worker_id: str, lease_seconds: float) -> Renewed:
    """Renew the leases of every job this worker holds, and learn which of them were asked
    to stop, in one statement."""
    now = timezone.now()
    rows = update_returning(
        "heartbeat",
        Job.objects.using(router.db_for_write(Job)).filter(
            status=JobStatus.RUNNING, worker_id=worker_id
        ),
        {"lease_until": now + timedelta(seconds=lease_seconds)},
        ["id", "cancel_requested_at"],
    )
    Worker.objects.filter(id=worker_id).update(heartbeat_at=now)
    return Renewed(
        len(rows), frozenset(row["id"] for row in rows if row["cancel_requested_at"] is not None)
    )


def alive(worker_id: str) -> int:
    """Say this worker is alive, holding no jobs (one statement)."""
    count: int = Worker.objects.filter(id=worker_id).update(heartbeat_at=timezone.now())
    return count


def alive_statement(worker_id: str) -> tuple[str, tuple[Any, ...]]:
    """``alive()`` as SQL and parameters, for a connection Django does not manage: the
    PostgreSQL wake-up listener's heartbeat doubles as the worker's."""
    queryset = Worker.objects.using(router.db_for_write(Worker)).filter(id=worker_id)
    return update_sql(queryset, {"heartbeat_at": timezone.now()})


def still_held(worker_id: str, job_ids: list[int]) -> set[int]:
    """Which of these jobs are still leased to this worker."""
    return set(
        Job.objects.filter(
            pk__in=job_ids, status=JobStatus.RUNNING, worker_id=worker_id
        ).values_list("pk", flat=True)
    )


def unregister_worker(worker_id: str) -> None:
    Worker.objects.filter(id=worker_id).update(stopped_at=timezone.now())


@dataclass(frozen=True, slots=True)
class Rescued:
    requeued: int
    failed: int


def rescue_expired() -> Rescued:
    """Take back every job whose lease has run out, in one statement: requeued for a
    retry, or failed when that was its last attempt."""
    now = timezone.now()
    lost = {
        "exception_class_path": f"{WorkerLost.__module__}.{WorkerLost.__qualname__}",
        "traceback": f"{WorkerLost.__qualname__}: {WorkerLost.__doc__}",
    }
    using = router.db_for_write(Job)
    rows = _take_back(using, now, lost)
    finished = [row for row in rows if row["status"] != JobStatus.QUEUED]
    ended_steps = steps.steps_ended(finished, succeeded=False)
    if ended_steps:
        # Workflow steps that end here take down what waits for them. In a transaction
        # of its own, after the take-back (which stays one statement for every rescue).
        with transaction.atomic(using=using):
            steps.settle(ended_steps, now)
    keyed = [(row["id"], row["limit_key"]) for row in finished if row["limit_key"] is not None]
    if keyed:
        # Their keys' turns come free (a sequence may be held by its failed job).
        failed = [row["id"] for row in finished if row["status"] == JobStatus.FAILED]
        keys.ended(using, keyed, failed, now)
    return Rescued(requeued=len(rows) - len(finished), failed=len(finished))


def _take_back(using: str, now: Any, lost: dict[str, str]) -> list[dict[str, Any]]:
    last_attempt = Q(attempts__gte=F("max_attempts"))
    # A job someone asked to stop is not run again: it ends cancelled.
    asked_to_stop = Q(cancel_requested_at__isnull=False)
    ends = last_attempt | asked_to_stop
    return update_returning(
        "rescue",
        Job.objects.using(using).expired_leases(now),
        {
            "status": Case(
                When(asked_to_stop, then=Value(JobStatus.CANCELLED.value)),
                When(last_attempt, then=Value(JobStatus.FAILED.value)),
                default=Value(JobStatus.QUEUED.value),
            ),
            "finished_at": Case(When(ends, then=Value(now)), default=F("finished_at")),
            "run_at": Case(When(ends, then=F("run_at")), default=Value(now)),
            "lease_until": None,
            "worker_id": None,
            "errors": JSONAppend("errors", lost),
        },
        ["id", "status", "workflow_id", "limit_key"],
    )


def release(worker_id: str, job_ids: list[int]) -> int:
    """Put claimed jobs that never started back in the queue, as if never claimed."""
    if not job_ids:
        return 0
    count: int = Job.objects.filter(
        pk__in=job_ids, status=JobStatus.RUNNING, worker_id=worker_id
    ).update(
        # Before attempts changes: MariaDB and MySQL assign left to right, and an
        # assignment there reads what the ones before it wrote.
        started_at=Case(When(attempts=1, then=Value(None)), default=F("started_at")),
        status=JobStatus.QUEUED,
        lease_until=None,
        worker_id=None,
        attempts=F("attempts") - 1,
        worker_ids=JSONRemoveLast("worker_ids"),
    )
    return count
