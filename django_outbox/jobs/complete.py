"""Batched completion: one UPDATE per outcome per batch, not one per job.

Each statement only touches jobs still running under this worker's id: a job whose lease
expired and was taken back is not overwritten by a late result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import router
from django.db.models.expressions import RawSQL
from django.utils import timezone

from django_outbox.jobs import backoff
from django_outbox.jobs.claim import ClaimedJob
from django_outbox.jobs.rowvalues import per_row
from django_outbox.models import Job, JobStatus


@dataclass(slots=True)
class Outcome:
    """How one run ended, as the executor classified it."""

    job: ClaimedJob
    succeeded: bool
    return_value: Any = None
    error: dict[str, str] | None = None
    finished_at: datetime = field(default_factory=timezone.now)
    #: When the task asked to run again (RetryAt); None: the backoff schedule decides.
    retry_at: datetime | None = None
    #: The task said another attempt cannot help (PermanentFailure).
    final: bool = False

    @property
    def will_retry(self) -> bool:
        return not self.succeeded and not self.final and self.job.attempts < self.job.max_attempts

    @property
    def errors(self) -> list[dict[str, str]]:
        """The job's error list after this run."""
        return self.job.errors + ([self.error] if self.error else [])


def next_run_at(outcome: Outcome) -> datetime:
    if outcome.retry_at is not None:
        return outcome.retry_at
    job = outcome.job
    seconds = backoff.delay(job.attempts, job.backoff_base, job.backoff_cap)
    return outcome.finished_at + timedelta(seconds=seconds)


def complete(worker_id: str, outcomes: Iterable[Outcome]) -> int:
    """Store a batch of outcomes; returns how many were stored.

    Fewer than given means some jobs had lost their lease (the worker was cut off from
    the database for longer than a lease): another worker took them back, and their
    late results are dropped rather than overwrite what happened since.
    """
    succeeded: list[Outcome] = []
    retried: list[Outcome] = []
    failed: list[Outcome] = []
    for outcome in outcomes:
        (succeeded if outcome.succeeded else retried if outcome.will_retry else failed).append(
            outcome
        )
    stored = 0
    mine = Job.objects.filter(status=JobStatus.RUNNING, worker_id=worker_id)
    if succeeded:
        with_values = [o for o in succeeded if o.return_value is not None]
        updates: dict[str, Any] = {
            "status": JobStatus.SUCCEEDED,
            "finished_at": _per_job(succeeded, lambda o: o.finished_at, "datetime"),
            "lease_until": None,
            "worker_id": None,
        }
        if with_values:
            updates["return_value"] = _per_job(with_values, lambda o: o.return_value, "json")
        stored += _update(mine, succeeded, updates)
    for outcome in retried:
        outcome.retry_at = next_run_at(outcome)  # fixed now: the worker reads it after
    if retried:
        stored += _update(
            mine,
            retried,
            {
                "status": JobStatus.QUEUED,
                "run_at": _per_job(retried, next_run_at, "datetime"),
                "errors": _per_job(retried, lambda o: o.errors, "json"),
                "lease_until": None,
                "worker_id": None,
            },
        )
    if failed:
        stored += _update(
            mine,
            failed,
            {
                "status": JobStatus.FAILED,
                "finished_at": _per_job(failed, lambda o: o.finished_at, "datetime"),
                "errors": _per_job(failed, lambda o: o.errors, "json"),
                "lease_until": None,
                "worker_id": None,
            },
        )
    return stored


def _update(mine: Any, outcomes: list[Outcome], values: dict[str, Any]) -> int:
    # The attempt must match too: a late result of an earlier run of a job that this same
    # worker claimed again must not land on the new run.
    count: int = (
        mine.filter(pk__in=[o.job.id for o in outcomes])
        .filter(attempts=_per_job(outcomes, lambda o: o.job.attempts, "int"))
        .update(**values)
    )
    return count


def _per_job(outcomes: list[Outcome], value: Any, kind: str) -> RawSQL:
    """Each outcome's ``value`` for its job's row, in one CASE."""
    return per_row(router.db_for_write(Job), [(o.job.id, value(o)) for o in outcomes], kind)
