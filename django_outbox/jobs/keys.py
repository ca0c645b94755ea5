"""Concurrency and sequence keys: at most N jobs of a key queued or running at once.

A job with a key is written ``held``, which no claim reads; ``admit()`` queues the held
jobs of a key, oldest first, while the key has fewer than its limit queued or running
("turns"). So the jobs waiting for a busy key never stand in a claim's way, whatever their
number: a claim reads queued rows only, and other keys' jobs are queued. A key's turn
comes free when one of its jobs ends (succeeds, fails for good, is cancelled); a retry
keeps its turn, so a sequence keeps its order across retries.

Every change that may give a key a turn runs ``admit()`` for it in the same transaction,
after writing the key's row (``LimitKey``), which is the key's lock: an enqueue writes it
before inserting its held jobs, an ending after storing its outcome. Of two such
transactions the second waits for the first, then counts what the first committed, so no
turn is lost and none is given twice. Keys are locked in sorted order.

Statements per call, whatever the number of jobs and keys (up to 500 keys each): the
lock, one count of the keys' turns, one read of the held jobs to queue (for each key, no
further than the jobs it takes), one UPDATE.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_outbox.db import dialect, named
from django_outbox.jobs.returning import returned_values
from django_outbox.models import Job, JobStatus, LimitKey
from django_outbox.models.jobs import TURN_STATUSES
from django_outbox.task import SEQUENCE_PREFIX, OutboxTask
from django_outbox.wake.notify import notify_on_commit

#: Keys per statement.
CHUNK = 500


@dataclass(frozen=True, slots=True)
class Rule:
    """What the latest enqueue said of a key: its limit, and whether a job failing for
    good holds it (a sequence that waits for its failed job to be retried or skipped)."""

    limit: int
    holds_on_failure: bool = False


def rule_of(task: OutboxTask) -> Rule:
    """The rule ``task``'s jobs enqueue under their key."""
    if task.sequence_key is not None:
        return Rule(1, holds_on_failure=task.sequence_on_failure == "hold")
    return Rule(task.concurrency_limit)


def enter(using: str, rules: dict[str, Rule], now: datetime) -> None:
    """Write (and so lock) the rows of the keys an enqueue is about to hold jobs under,
    in the caller's transaction: one upsert, keys in sorted order."""
    rows = [
        LimitKey(key=key, limit=rule.limit, holds_on_failure=rule.holds_on_failure, updated_at=now)
        for key, rule in sorted(rules.items())
    ]
    # MariaDB and MySQL name no target: their ON DUPLICATE KEY meets the primary key.
    target = ["key"] if connections[using].features.supports_update_conflicts_with_target else None
    for start in range(0, len(rows), CHUNK):
        LimitKey.objects.using(using).bulk_create(
            rows[start : start + CHUNK],
            update_conflicts=True,
            unique_fields=target,
            update_fields=["limit", "holds_on_failure", "updated_at"],
        )


def lock(using: str, keys: Iterable[str]) -> dict[str, LimitKey]:
    """Lock the rows of ``keys`` (sorted) in the caller's transaction; returns them."""
    found: dict[str, LimitKey] = {}
    ordered = sorted(set(keys))
    for start in range(0, len(ordered), CHUNK):
        rows = (
            LimitKey.objects.using(using)
            .select_for_update()
            .filter(key__in=ordered[start : start + CHUNK])
            .order_by("key")
        )
        found.update((row.key, row) for row in rows)
    return found


def admit(using: str, keys: Iterable[str], now: datetime) -> int:
    """Queue the held jobs of ``keys`` whose turn has come, oldest first, and signal their
    queues on commit; returns how many were queued. Safe to run at any time: it counts
    what is there."""
    keys = sorted(set(keys))
    if not keys:
        return 0
    queued = 0
    with transaction.atomic(using=using):
        for start in range(0, len(keys), CHUNK):
            queued += _admit(using, keys[start : start + CHUNK], now)
    return queued


def _admit(using: str, keys: list[str], now: datetime) -> int:
    rows = lock(using, keys)
    turns = dict(
        Job.objects.using(using)
        .filter(limit_key__in=keys, status__in=TURN_STATUSES)
        .values("limit_key")
        .annotate(n=Count("id"))
        .values_list("limit_key", "n")
    )
    free = {
        key: row.limit - turns.get(key, 0)
        for key, row in rows.items()
        if row.held_by is None and row.limit > turns.get(key, 0)
    }
    found = _oldest_held(using, free)
    if not found:
        return 0
    # Their due times unchanged: a held job keeps its place in the queue's order. The rows
    # are the key's, locked by its row: only a cancel can have ended one meanwhile.
    queued: int = (
        Job.objects.using(using)
        .filter(id__in=[job_id for job_id, _, _ in found], status=JobStatus.HELD)
        .update(status=JobStatus.QUEUED)
    )
    notify_on_commit([(queue, run_at) for _, queue, run_at in found], using=using)
    return queued


def _oldest_held(using: str, free: dict[str, int]) -> list[tuple[int, str, datetime]]:
    """The oldest ``free[key]`` held jobs of each key (id, queue, due time), reading no
    further than those: one statement (on MariaDB and MySQL two, when some keys want more
    than one)."""
    if not free:
        return []
    connection = connections[using]
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    held = f"status = '{JobStatus.HELD.value}'"
    statements: list[tuple[str, list[Any]]] = []
    per_key = dialect(using).first_per_key(table, "id, queue, run_at", "limit_key", held)
    if per_key is not None:
        statements.append((per_key, [list(free), list(free.values())]))
        free = {}
    elif dialect(using).loose_index_scan:
        # The oldest held job of each key with one turn free, one index entry per key (a
        # UNION of 500 branches took MariaDB 30 ms); the others, branch by branch below.
        ones = [key for key, count in free.items() if count == 1]
        free = {key: count for key, count in free.items() if count != 1}
        if ones:
            oldest = (
                f"SELECT MIN(id) FROM {table} WHERE {held} "
                f"AND limit_key IN ({', '.join(['%s'] * len(ones))}) GROUP BY limit_key"
            )
            statements.append(
                (
                    f"SELECT id, queue, run_at FROM {table} "
                    f"WHERE id IN (SELECT * FROM ({oldest}) AS o)",
                    ones,
                )
            )
    if free:
        branch = (
            f"SELECT id, queue, run_at FROM (SELECT id, queue, run_at FROM {table} "
            f"WHERE limit_key = %s AND {held} ORDER BY id LIMIT %s) AS h{{n}}"
        )
        params: list[Any] = []
        for key, count in free.items():
            params += [key, count]
        sql = " UNION ALL ".join(branch.format(n=n) for n in range(len(free)))
        statements.append((sql, params))
    found = []
    decode = returned_values(connection, Job, ["id", "queue", "run_at"])
    with connection.cursor() as cursor:
        for sql, params in statements:
            cursor.execute(named("key-held", sql), params)
            found += [tuple(decode(row)) for row in cursor.fetchall()]
    return found


def ended(using: str, jobs: Sequence[tuple[int, str]], failed: Iterable[int], now: datetime) -> int:
    """Jobs with keys ended (``(id, limit_key)``): a sequence that holds on failure is held
    by its job that failed for good (``failed``; the row must say so), then each key's
    next jobs are queued. In the caller's transaction, after it stored the endings."""
    if not jobs:
        return 0
    keys = sorted({key for _, key in jobs})
    failed = set(failed)
    holding = [(i, key) for i, key in jobs if i in failed and key.startswith(SEQUENCE_PREFIX)]
    with transaction.atomic(using=using):
        if holding:
            lock(using, keys)  # all of them, in order, before the first is written
        for job_id, key in holding:
            hold(using, key, job_id)
        return admit(using, keys, now)


def hold(using: str, key: str, job_id: int) -> None:
    """Hold a sequence that holds on failure by its job ``job_id``, if that job did fail."""
    LimitKey.objects.using(using).filter(
        Exists(Job.objects.filter(pk=job_id, status=JobStatus.FAILED, limit_key=OuterRef("key"))),
        key=key,
        holds_on_failure=True,
        held_by__isnull=True,
    ).update(held_by=job_id)


def let_go(using: str, job_ids: Iterable[int], now: datetime) -> int:
    """Sequences held by ``job_ids`` go on without them (they were skipped); returns how
    many jobs were queued."""
    rows = list(LimitKey.objects.using(using).filter(held_by__in=list(job_ids)))
    if not rows:
        return 0
    with transaction.atomic(using=using):
        lock(using, [row.key for row in rows])
        LimitKey.objects.using(using).filter(key__in=[row.key for row in rows]).update(held_by=None)
        return admit(using, [row.key for row in rows], now)


def sweep(now: datetime | None = None) -> int:
    """Queue the held jobs of keys that have a free turn nobody gave them: a safety net
    for turns freed outside the engine (a queued job's row deleted by hand). Reads each
    key row once (up to 1,000 keys with held jobs); the stalled check runs it."""
    using = router.db_for_write(Job)
    now = now or timezone.now()
    held = Job.objects.filter(limit_key=OuterRef("key"), status=JobStatus.HELD)
    turns = (
        Job.objects.filter(limit_key=OuterRef("key"), status__in=TURN_STATUSES)
        .values("limit_key")
        .annotate(n=Count("id"))
        .values("n")
    )
    found = (
        LimitKey.objects.using(using)
        .filter(Exists(held), held_by__isnull=True)
        .annotate(turns=Coalesce(Subquery(turns), 0))
        .filter(turns__lt=F("limit"))
        .values_list("key", flat=True)[:1000]
    )
    return admit(using, list(found), now)


def held_behind_running(queues: list[str], backend: str = "default") -> bool:
    """Whether a job of ``queues`` is held behind a key that has a running job (whose end
    gives it its turn). For a burst worker deciding whether to leave."""
    running = Job.objects.filter(status=JobStatus.RUNNING, limit_key__isnull=False)
    return (
        Job.objects.using(router.db_for_write(Job))
        .filter(
            status=JobStatus.HELD,
            queue__in=queues,
            backend=backend,
            limit_key__in=running.values("limit_key"),
        )
        .exists()
    )
