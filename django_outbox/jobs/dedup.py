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


def active_key_condition(using: str, match: str, table: str = "") -> str:
    """SQL: the job (columns of ``table`` when given, e.g. ``"j"`` in a subquery) is
    active and its dedup key ``match``es (``"= <expression>"``, ``"IN (%s, %s)"``), in the
    terms of the index of active keys of database ``using``."""
    prefix = f"{table}." if table else ""
    column = dialect(using).active_dedup_column
    if column != "dedup_key":
        return f"{prefix}{column} {match}"
    return (
        f"{prefix}dedup_key {match} AND {prefix}dedup_key IS NOT NULL"
        f" AND {prefix}status IN ({_STATUSES})"
    )


def active_with_keys(using: str, keys: Sequence[str]) -> QuerySet[Job]:
    """The active jobs of database ``using`` whose dedup key is one of ``keys``."""
    jobs = Job.objects.using(using)
    if not keys:
        return jobs.none()
    match = f"IN ({', '.join(['%s'] * len(keys))})"
    return jobs.extra(where=[active_key_condition(using, match)], params=list(keys))
