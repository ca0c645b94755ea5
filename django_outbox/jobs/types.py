"""The values the engine's rooms hand each other: a claimed job, what a claim took, how
a run ended, and a side write's writer. A module of its own, below claim, completion and
side writes, so that none of them imports another for a type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from django_outbox.models import JobStatus

#: Writes a batch of items inside the transaction that stores their jobs' outcomes, and
#: returns what to do once that transaction is over (signals, advice to other tables), if
#: anything. (Not ``transaction.on_commit``: in a test's transaction that never runs.)
Writer = Callable[[list[Any]], "Callable[[], None] | None"]


@dataclass(slots=True)
class ClaimedJob:
    """What a worker needs to run a job and record its outcome, without another query."""

    id: int
    #: With ``id``, the job's result id (lib/resultids.py).
    token: int
    backend: str
    queue: str
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    run_at: datetime
    #: The ``run_after`` it was enqueued with (None: as soon as possible).
    run_after: datetime | None
    attempts: int
    max_attempts: int
    timeout: float | None
    backoff_base: float
    backoff_cap: float
    worker_ids: list[str]
    errors: list[dict[str, str]]
    enqueued_at: datetime
    started_at: datetime
    #: The enqueue's trace context (OpenTelemetry), when it was traced.
    trace_context: dict[str, str] | None
    #: The workflow the job is a step of (django_outbox.workflows), if any.
    workflow_id: int | None
    #: A step waiting for others: what it takes of their results (models.Receives); None
    #: for any other job.
    receives: int | None
    #: The job's concurrency or sequence key (jobs/keys.py), if any.
    limit_key: str | None
    last_attempted_at: datetime


@dataclass(slots=True)
class Claimed:
    """What one claim took, and what rate limits held back."""

    jobs: list[ClaimedJob]
    #: Seconds until a rate-limited queue that got no token now has one: look again then.
    retry_in: float | None = None


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
    #: The run stopped after someone asked it to: the job ends as cancelled.
    cancelled: bool = False
    #: A rate limit held the run back (RateLimited): the job is queued again for this
    #: time, the run not counted as an attempt.
    held_until: datetime | None = None
    #: With ``held_until``: the job's keyword arguments from now on (None: unchanged).
    new_kwargs: dict[str, Any] | None = None
    #: The TaskResult the run was started with (sent with task_started), if it got one.
    result: Any = None
    #: What the run handed to ``sidewrites.defer``: written in the outcome's transaction.
    writes: list[tuple[Writer, Any]] = field(default_factory=list)

    @property
    def held(self) -> bool:
        """A rate limit held the run back: it goes back to the queue, not an attempt."""
        return self.held_until is not None and not self.succeeded and not self.cancelled

    @property
    def will_retry(self) -> bool:
        return (
            not self.succeeded
            and not self.final
            and not self.cancelled
            and not self.held
            and self.job.attempts < self.job.max_attempts
        )

    @property
    def status(self) -> JobStatus:
        """The job's status once this outcome is written: the one place a run's end is
        classified (queued again for a hold-back or a retry)."""
        if self.held:
            return JobStatus.QUEUED
        if self.succeeded:
            return JobStatus.SUCCEEDED
        if self.cancelled:
            return JobStatus.CANCELLED
        return JobStatus.QUEUED if self.will_retry else JobStatus.FAILED

    @property
    def ends_job(self) -> bool:
        """The job ends with this run: it succeeded, failed for good or was cancelled."""
        return self.status in ENDED

    @property
    def errors(self) -> list[dict[str, str]]:
        """The job's error list after this run."""
        return self.job.errors + ([self.error] if self.error else [])


ENDED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
