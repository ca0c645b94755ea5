"""Steering jobs by hand (the admin's actions): run again now, cancel.

Each takes a queryset of jobs, changes only the rows the operation applies to, and says
how many it changed; the rest are left exactly as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from django.db import IntegrityError, router, transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Greatest
from django.utils import timezone

from django_outbox.compat import TaskResult, TaskResultDoesNotExist
from django_outbox.db.retries import again_after_deadlocks
from django_outbox.jobs import keys, steps
from django_outbox.jobs.results import resolve_task
from django_outbox.jobs.returning import update_returning
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job, JobStatus, LimitKey
from django_outbox.task import OutboxTask
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
    job whose dedup key another active job holds is skipped (it would run twice), and so
    is a workflow's step: it is retried with its workflow (``workflows.retry()``), which
    runs the steps below it again too.
    """
    now = timezone.now()
    using = router.db_for_write(Job)
    selected = list(
        jobs.values_list("pk", "status", "queue", "workflow_id", "limit_key", "task_path")
    )
    done = 0
    for pk, status, queue, workflow_id, limit_key, task_path in selected:
        if status not in RETRYABLE or workflow_id is not None:
            continue
        # A finished job with a key takes its turn again: held until its key has one (a
        # sequence it held goes on with it, its oldest job).
        again = JobStatus.HELD if limit_key and status != JobStatus.QUEUED else JobStatus.QUEUED
        try:
            with transaction.atomic(using=using):
                if limit_key and not keys.lock(using, [limit_key]):
                    # The key's row went with its last job (jobs/idlekeys.py): write it
                    # anew, as an enqueue would, so that the job gets its turn.
                    keys.enter(using, {limit_key: _rule_of(task_path)}, now)
                done += (
                    Job.objects.using(using)
                    .filter(pk=pk, status__in=RETRYABLE)
                    .update(
                        status=again,
                        run_at=now,
                        finished_at=None,
                        cancel_requested_at=None,  # a new run, without the old request
                        max_attempts=Greatest(F("max_attempts"), F("attempts") + 1),
                    )
                )
                if limit_key and again == JobStatus.HELD:
                    # Its key is locked above: a sequence it held goes on with it, once.
                    LimitKey.objects.using(using).filter(key=limit_key, held_by=pk).update(
                        held_by=None
                    )
                    keys.admit(using, [limit_key], now)
                else:
                    notify_on_commit([(queue, now)], using)
        except IntegrityError:
            continue  # its dedup key is taken by an active job
    return Changed(done, len(selected) - done)


def _rule_of(task_path: str) -> keys.Rule:
    """The key rule of the task at ``task_path``; one at a time if it no longer imports."""
    try:
        task = resolve_task(task_path)
    except Exception:
        return keys.Rule(1)
    return keys.rule_of(task) if isinstance(task, OutboxTask) else keys.Rule(1)


def skip(jobs: QuerySet[Job]) -> Changed:
    """Let the sequences that the selected failed jobs hold go on without them."""
    now = timezone.now()
    using = router.db_for_write(Job)
    chosen = list(jobs.filter(status=JobStatus.FAILED).values_list("pk", flat=True))
    held = {
        pk
        for pk in LimitKey.objects.using(using)
        .filter(held_by__in=chosen)
        .values_list("held_by", flat=True)
        if pk is not None
    }
    keys.let_go(using, held, now)
    return Changed(len(held), jobs.count() - len(held))


@dataclass(frozen=True, slots=True)
class Cancelled:
    #: Queued jobs now cancelled: they never run.
    cancelled: int
    #: Running jobs asked to stop (their tasks see it through ``context.cancelled()``).
    requested: int
    #: Finished jobs, left as they were.
    skipped: int


def cancel(jobs: QuerySet[Job]) -> Cancelled:
    """Cancel the selected queued jobs (and waiting workflow steps, and held jobs), and
    ask the running ones to stop. A cancelled step takes down the steps below it, as a
    failed one does; a cancelled job with a key gives its turn to the next."""
    now = timezone.now()
    using = router.db_for_write(Job)
    chosen = list(jobs.values_list("pk", flat=True))
    cancelled = requested = 0
    # By primary key, in chunks: the ids are listed in the statements.
    for ids in steps.chunks(chosen):
        selected = Job.objects.using(using).filter(pk__in=ids)
        unstarted = selected.filter(
            status__in=[JobStatus.QUEUED, JobStatus.WAITING, JobStatus.HELD]
        )
        with transaction.atomic(using=using):
            # Keys first, as every change to a key's jobs takes them (jobs/keys.py).
            limit_keys = {
                key
                for key in unstarted.filter(limit_key__isnull=False).values_list(
                    "limit_key", flat=True
                )
                if key is not None
            }
            keys.lock(using, limit_keys)
            ended = update_returning(
                "cancel",
                unstarted,
                {"status": JobStatus.CANCELLED, "finished_at": now},
                ["id", "workflow_id"],
            )
            steps.settle(steps.steps_ended(ended, succeeded=False), now)
            keys.admit(using, limit_keys, now)
        cancelled += len(ended)
        running = selected.filter(status=JobStatus.RUNNING, cancel_requested_at=None)
        requested += _again_if_moved(using, partial(running.update, cancel_requested_at=now))
    return Cancelled(cancelled, requested, len(chosen) - cancelled - requested)


#: Runs of a statement that met a row moved to another partition, in a row.
MOVED_TRIES = 3


def _again_if_moved(using: str, update: Callable[[], int]) -> int:
    """``update()``, under a savepoint, run again where it met a row that a completion moved
    to another partition at the same moment (a partitioned job table: the database then
    fails the statement, SQLSTATE 40001, instead of following the row). Run again, it finds
    the row as it is now: finished, so no longer running."""

    def under_a_savepoint() -> int:
        with transaction.atomic(using=using):
            return update()

    return again_after_deadlocks(using, under_a_savepoint, MOVED_TRIES)


def cancel_job(job: TaskResult | int | str) -> str:
    """Cancel one job, given its result, its result id (a string) or its primary key (an
    int): a queued job is cancelled and never runs ("cancelled"); a running one is asked to
    stop ("requested"); a finished one is left as it is (its status is returned). An
    unknown id raises TaskResultDoesNotExist."""
    job_id = job.id if isinstance(job, TaskResult) else job
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        found = Job.objects.filter(pk=job_id)
    else:
        try:
            pk, token = parse_result_id(job_id)
        except ValueError as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        found = Job.objects.filter(pk=pk, token=token)
    outcome = cancel(found)
    if outcome.cancelled:
        return "cancelled"
    if outcome.requested:
        return "requested"
    status = found.values_list("status", flat=True).first()
    if status is None:
        raise TaskResultDoesNotExist(f"No job {job_id!r}.")
    return str(status)
