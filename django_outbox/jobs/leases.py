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

from django.db.models import Case, F, Value, When
from django.utils import timezone

from django_outbox.exceptions import WorkerLost
from django_outbox.jobs.expressions import JSONAppend, JSONRemoveLast
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


def heartbeat(worker_id: str, lease_seconds: float) -> int:
    """Renew the leases of every job this worker holds; returns how many it holds."""
    now = timezone.now()
    renewed: int = Job.objects.filter(status=JobStatus.RUNNING, worker_id=worker_id).update(
        lease_until=now + timedelta(seconds=lease_seconds)
    )
    Worker.objects.filter(id=worker_id).update(heartbeat_at=now)
    return renewed


def alive(worker_id: str) -> int:
    """Say this worker is alive, holding no jobs (one statement)."""
    count: int = Worker.objects.filter(id=worker_id).update(heartbeat_at=timezone.now())
    return count


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
    """Take back every job whose lease has run out."""
    now = timezone.now()
    lost = {
        "exception_class_path": f"{WorkerLost.__module__}.{WorkerLost.__qualname__}",
        "traceback": f"{WorkerLost.__qualname__}: {WorkerLost.__doc__}",
    }
    expired = Job.objects.expired_leases(now)
    failed = expired.filter(attempts__gte=F("max_attempts")).update(
        status=JobStatus.FAILED,
        finished_at=now,
        lease_until=None,
        worker_id=None,
        errors=JSONAppend("errors", lost),
    )
    requeued = expired.filter(attempts__lt=F("max_attempts")).update(
        status=JobStatus.QUEUED,
        run_at=now,
        lease_until=None,
        worker_id=None,
        errors=JSONAppend("errors", lost),
    )
    return Rescued(requeued=requeued, failed=failed)


def release(worker_id: str, job_ids: list[int]) -> int:
    """Put claimed jobs that never started back in the queue, as if never claimed."""
    if not job_ids:
        return 0
    count: int = Job.objects.filter(
        pk__in=job_ids, status=JobStatus.RUNNING, worker_id=worker_id
    ).update(
        status=JobStatus.QUEUED,
        lease_until=None,
        worker_id=None,
        attempts=F("attempts") - 1,
        worker_ids=JSONRemoveLast("worker_ids"),
        started_at=Case(When(attempts=1, then=Value(None)), default=F("started_at")),
    )
    return count
