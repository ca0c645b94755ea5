"""Finding the active job that holds a dedup key, through the index that holds them.

Active (waiting, held, queued, running) jobs' dedup keys are unique: a partial unique
index on PostgreSQL and SQLite, a unique index on a generated column that holds only an
active job's key on MariaDB and MySQL (migration 0010), which have no partial index. A
lookup must state the condition in the index's own terms, or it reads the whole table:
MariaDB cannot use the index for ``dedup_key = …``, and SQLite uses a partial index only
for a query that repeats its condition (the statuses as literals: bound parameters are
not the same terms).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import QuerySet

from django_outbox.db import dialect
from django_outbox.models import Job
from django_outbox.models.jobs import ACTIVE_STATUSES

_STATUSES = ", ".join(f"'{status.value}'" for status in ACTIVE_STATUSES)


def active_with_keys(using: str, keys: Sequence[str]) -> QuerySet[Job]:
    """The active jobs of database ``using`` whose dedup key is one of ``keys``."""
    jobs = Job.objects.using(using)
    if not keys:
        return jobs.none()
    column = dialect(using).active_dedup_column
    placeholders = ", ".join(["%s"] * len(keys))
    if column != "dedup_key":
        return jobs.extra(where=[f"{column} IN ({placeholders})"], params=list(keys))
    condition = (
        f"dedup_key IN ({placeholders}) AND dedup_key IS NOT NULL AND status IN ({_STATUSES})"
    )
    return jobs.extra(where=[condition], params=list(keys))
