"""Steering jobs by hand (the admin's actions): run again now, cancel.

Each takes a queryset of jobs, changes only the rows the operation applies to, and says
how many it changed; the rest are left exactly as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, router, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Greatest
from django.utils import timezone

from django_outbox.models import Job, JobStatus
from django_outbox.wake.notify import notify_on_commit

#: Jobs that "retry now" can take: waiting ones run at once, finished unsuccessful ones
#: are queued again.
RETRYABLE = [JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLED]


@dataclass(frozen=True, slots=True)
class Changed:
    #: Rows changed.
    done: int
    #: Rows selected that the operation does not apply to (running, finished, or clashing
    #: with an active job of the same dedup key).
    skipped: int


def retry_now(jobs: QuerySet[Job]) -> Changed:
    """Queue the selected queued, failed and cancelled jobs to run now.

    A failed job gets one more attempt than it has used; its earlier errors are kept. A
    job whose dedup key another active job holds is skipped (it would run twice).
    """
    now = timezone.now()
    using = router.db_for_write(Job)
    selected = list(jobs.values_list("pk", "status", "queue"))
    done = 0
    for pk, status, queue in selected:
        if status not in RETRYABLE:
            continue
        try:
            with transaction.atomic(using=using):
                done += (
                    Job.objects.using(using)
                    .filter(pk=pk, status__in=RETRYABLE)
                    .update(
                        status=JobStatus.QUEUED,
                        run_at=now,
                        finished_at=None,
                        max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
                    )
                )
                notify_on_commit([(queue, now)], using)
        except IntegrityError:
            continue  # its dedup key is taken by an active job
    return Changed(done, len(selected) - done)


def cancel(jobs: QuerySet[Job]) -> Changed:
    """Cancel the selected queued jobs: they never run. Others are left as they are (a
    running job is not stopped)."""
    total = jobs.count()
    done = (
        Job.objects.using(router.db_for_write(Job))
        .filter(pk__in=jobs.values("pk"), status=JobStatus.QUEUED)
        .update(status=JobStatus.CANCELLED, finished_at=timezone.now())
    )
    return Changed(done, total - done)
