"""The batched claim: one statement takes up to ``limit`` due jobs and leases them.

    UPDATE job SET status = 'running', lease_until = …, attempts = attempts + 1, …
    WHERE id IN (SELECT id … ORDER BY priority DESC, run_at, id LIMIT n FOR UPDATE SKIP LOCKED)
    RETURNING …

On PostgreSQL the inner SELECT skips rows other workers hold, so claims never wait on
each other (READ COMMITTED, autocommit). SQLite has no row locks: the statement takes the
database's single write lock when it starts, which serialises claims. The ORM builds the
statement; only ``FOR UPDATE SKIP LOCKED`` (see ``_locked_due_ids``) and ``RETURNING`` are
added by hand, since Django's ``update()`` has no RETURNING form.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router
from django.db.models import F, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_outbox.jobs.expressions import JSONAppend
from django_outbox.jobs.returning import update_returning
from django_outbox.models import Job, JobStatus

RETURNED_FIELDS = (
    "id",
    "backend",
    "queue",
    "task_path",
    "args",
    "kwargs",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "timeout",
    "backoff_base",
    "backoff_cap",
    "worker_ids",
    "errors",
    "enqueued_at",
    "started_at",
)


@dataclass(slots=True)
class ClaimedJob:
    """What a worker needs to run a job and record its outcome, without another query."""

    id: int
    backend: str
    queue: str
    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    timeout: float | None
    backoff_base: float
    backoff_cap: float
    worker_ids: list[str]
    errors: list[dict[str, str]]
    enqueued_at: datetime
    started_at: datetime
    last_attempted_at: datetime


def claim(
    worker_id: str,
    queues: list[str],
    limit: int,
    lease_seconds: float,
    backend: str = "default",
) -> list[ClaimedJob]:
    """Lease up to ``limit`` due jobs of ``queues`` to ``worker_id``; [] when none are due.

    Only jobs enqueued through the TASKS alias ``backend`` are claimed.
    """
    if limit < 1 or not queues:
        return []
    now = timezone.now()
    alias = router.db_for_write(Job)
    rows = update_returning(
        Job.objects.using(alias).filter(
            pk__in=_locked_due_ids(connections[alias], queues, now, limit, backend)
        ),
        {
            "status": JobStatus.RUNNING,
            "worker_id": worker_id,
            "lease_until": now + timedelta(seconds=lease_seconds),
            "attempts": F("attempts") + 1,
            "started_at": Coalesce(F("started_at"), Value(now)),
            "last_attempted_at": now,
            "worker_ids": JSONAppend("worker_ids", worker_id),
        },
        RETURNED_FIELDS,
    )
    claimed = [ClaimedJob(**row, last_attempted_at=now) for row in rows]
    # RETURNING comes in no particular order: restore the claim order.
    claimed.sort(key=lambda job: (-job.priority, job.run_at, job.id))
    return claimed


def next_due(queues: list[str], backend: str = "default") -> datetime | None:
    """When the earliest queued job of ``queues`` falls due (None: no queued job)."""
    found: datetime | None = (
        Job.objects.using(router.db_for_write(Job))
        .filter(status=JobStatus.QUEUED, queue__in=queues, backend=backend)
        .order_by("run_at")
        .values_list("run_at", flat=True)
        .first()
    )
    return found


def _locked_due_ids(
    connection: Any, queues: list[str], now: datetime, limit: int, backend: str
) -> RawSQL:
    """The inner SELECT: due ids in claim order, locked, skipping rows others hold.

    This is ``select_for_update(skip_locked=True)`` spelled by the backend's own
    ``for_update_sql()``: Django refuses to compile ``select_for_update()`` outside a
    transaction even as the subquery of one autocommit UPDATE, and a transaction would
    add a BEGIN and a COMMIT round trip to every claim.
    """
    due = Job.objects.using(connection.alias).due(queues, now, backend).values("id")[:limit]
    sql, params = due.query.get_compiler(connection=connection).as_sql()
    if connection.features.has_select_for_update_skip_locked:
        sql = f"{sql} {connection.ops.for_update_sql(skip_locked=True)}"
    return RawSQL(sql, params)
