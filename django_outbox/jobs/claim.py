"""The batched claim: one statement takes up to ``limit`` due jobs and leases them.

    UPDATE job SET status = 'running', lease_until = …, attempts = attempts + 1, …
    WHERE id IN (SELECT id … ORDER BY priority DESC, run_at, id LIMIT n FOR UPDATE SKIP LOCKED)
    RETURNING …

Where the database skips locked rows (``Dialect.skip_locked``: PostgreSQL) the inner
SELECT passes over rows other workers hold, so claims never wait on each other (READ
COMMITTED, autocommit). SQLite has no row locks: the statement takes the database's single
write lock when it starts, which serialises claims. Where UPDATE returns nothing (MariaDB,
MySQL) the claim is two statements in one short transaction: the SELECT … FOR UPDATE SKIP
LOCKED of the rows, then one UPDATE of their ids (``_lock_then_mark``).

The statement is written out once per database and number of queues (``_claim_sql``), not
built by the ORM at every claim: compiling it cost the worker more CPU than running it
cost PostgreSQL. The returned rows go through the ORM's own converters.

One module of over 400 lines: every form of the claim (one statement, lock then mark,
limited queues, rate-limited queues) shares its columns, its decoding and its lease, and
split they would drift apart.
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from django.db import DatabaseError, OperationalError, connections, router, transaction
from django.utils import timezone

from django_outbox import conf, ratelimits
from django_outbox.db import dialect, named
from django_outbox.jobs.returning import column, returned_values
from django_outbox.jobs.types import Claimed, ClaimedJob
from django_outbox.models import Job, JobStatus
from django_outbox.ratelimits import Rate

logger = logging.getLogger("django_outbox.worker")

#: The claim's RETURNING columns: ClaimedJob's fields, in the same order.
RETURNED_FIELDS = (
    "id",
    "token",
    "backend",
    "queue",
    "task_path",
    "args",
    "kwargs",
    "priority",
    "run_at",
    "run_after",
    "attempts",
    "max_attempts",
    "timeout",
    "backoff_base",
    "backoff_cap",
    "worker_ids",
    "errors",
    "enqueued_at",
    "started_at",
    "trace_context",
    "workflow_id",
    "receives",
    "limit_key",
)


# A claim builds ClaimedJob from the returned columns by position.
assert [f.name for f in fields(ClaimedJob)] == [*RETURNED_FIELDS, "last_attempted_at"]


def claim(
    worker_id: str,
    queues: list[str],
    limit: int,
    lease_seconds: float,
    backend: str = "default",
) -> list[ClaimedJob]:
    """Lease up to ``limit`` due jobs of ``queues`` to ``worker_id``; [] when none are due."""
    return claim_batch(worker_id, queues, limit, lease_seconds, backend).jobs


def claim_batch(
    worker_id: str,
    queues: list[str],
    limit: int,
    lease_seconds: float,
    backend: str = "default",
    rated_room: int | None = None,
) -> Claimed:
    """Lease up to ``limit`` due jobs of ``queues`` to ``worker_id``.

    Only jobs enqueued through the TASKS alias ``backend`` are claimed. Queues with a limit
    (``OUTBOX["QUEUES"]``) are claimed first, each on its own: a concurrency limit under
    the queue's lock, a rate limit for no more jobs than its bucket gives tokens (tokens
    left unused go back). The other queues are claimed together, as before, without either.
    Should a later statement fail, the jobs the earlier ones claimed are returned, not lost.

    ``rated_room``: most jobs to take from limited queues, together (a worker passes its
    idle threads, so that the jobs a rate lets through start when claimed, not later all at
    once, and a slot of a concurrency-limited queue goes to a job that starts now, not to
    one that waits in this worker behind the others while a worker elsewhere idles).
    """
    if limit < 1 or not queues:
        return Claimed([])
    now = timezone.now()
    connection = connections[router.db_for_write(Job)]
    settings = conf.get()
    limits = settings.concurrency_limits(queues)
    rates = settings.rate_limits(queues)
    limited = [queue for queue in queues if queue in limits or queue in rates]
    free = [queue for queue in queues if queue not in limited]
    rows: list[tuple[Any, ...]] = []
    waits: list[float] = []
    # Limited queues first: each takes at most what its limits allow, so the unlimited
    # ones, which take the rest of the batch, cannot crowd them out.
    rated_taken = 0
    for queue in limited:
        if len(rows) >= limit:
            break
        room = limit - len(rows)
        if rated_room is not None:
            room = min(room, rated_room - rated_taken)
            if room < 1:
                continue
        try:
            got, wait = _claim_one_limited(
                connection,
                worker_id,
                queue,
                limits.get(queue),
                rates.get(queue),
                room,
                lease_seconds,
                backend,
                now,
            )
        except DatabaseError as exc:
            if not rows:
                raise
            logger.warning(
                "claiming from limited queue %s failed (%s: %s); keeping the jobs claimed so far",
                queue,
                type(exc).__name__,
                exc,
            )
            break
        rows += got
        rated_taken += len(got)
        if wait is not None:
            waits.append(wait)
    if free and len(rows) < limit:
        try:
            rows += _run_claim(
                connection, worker_id, free, limit - len(rows), lease_seconds, backend, now
            )
        except DatabaseError as exc:
            if not rows:
                raise
            logger.warning(
                "claiming from queue(s) %s failed (%s: %s); keeping the jobs claimed so far",
                ", ".join(free),
                type(exc).__name__,
                exc,
            )
    claimed = claimed_jobs(connection, rows, worker_id, now)
    # RETURNING comes in no particular order: restore the claim order.
    claimed.sort(key=lambda job: (-job.priority, job.run_at, job.id))
    return Claimed(claimed, min(waits) if waits else None)


def claimed_jobs(
    connection: Any, rows: list[tuple[Any, ...]], worker_id: str, now: datetime
) -> list[ClaimedJob]:
    """The jobs of the RETURNED_FIELDS ``rows`` a claim at ``now`` took (or, where UPDATE
    returns nothing, read before it wrote them)."""
    decode = returned_values(connection, Job, RETURNED_FIELDS)
    # ClaimedJob's fields are RETURNED_FIELDS, in that order, then last_attempted_at.
    claimed = [ClaimedJob(*[*decode(row), now]) for row in rows]
    if not dialect(connection.alias).update_returning:
        # The rows were read before the claim wrote them: write the same here.
        for job in claimed:
            job.attempts += 1
            job.started_at = job.started_at or now
            job.worker_ids = [*job.worker_ids, worker_id]
    return claimed


def _claim_one_limited(
    connection: Any,
    worker_id: str,
    queue: str,
    most_running: int | None,
    rate: Rate | None,
    limit: int,
    lease_seconds: float,
    backend: str,
    now: datetime,
) -> tuple[list[tuple[Any, ...]], float | None]:
    """Claim from one limited queue: (rows, seconds until its next token when the bucket
    gave fewer tokens than asked for, else None).

    With a rate limit, the claim asks for no more jobs than the bucket gives tokens; a queue
    whose bucket is empty is not read at all, and its jobs keep their place."""
    key = f"queue:{queue}"
    wait = None
    if rate is not None:
        grant = ratelimits.take(key, rate, limit)
        if not grant.granted:
            return [], grant.retry_in
        if grant.granted < limit:  # it may hold more than the bucket gave: look again then
            wait = grant.retry_in
        limit = grant.granted
    rows: list[tuple[Any, ...]] = []
    try:
        if most_running is not None:
            rows = _claim_limited(
                connection, worker_id, queue, most_running, limit, lease_seconds, backend, now
            )
        else:
            rows = _run_claim(connection, worker_id, [queue], limit, lease_seconds, backend, now)
    finally:
        if rate is not None and len(rows) < limit:
            ratelimits.give_back(key, rate, limit - len(rows))
            wait = None  # fewer jobs than tokens: the queue has run dry
    return rows, wait


def _run_claim(
    connection: Any,
    worker_id: str,
    queues: list[str],
    limit: int,
    lease_seconds: float,
    backend: str,
    now: datetime,
    running_limit: int | None = None,
) -> list[tuple[Any, ...]]:
    if not dialect(connection.alias).update_returning:
        return _lock_then_mark(
            connection, worker_id, queues, limit, lease_seconds, backend, now, running_limit
        )
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        *claimed_params(connection, worker_id, lease_seconds, now),
        *queues,
        adapt(now),
        backend,
        limit,
    ]
    if running_limit is not None:
        params += [running_limit, queues[0]]
    # The table it updates is asked each time (the answer is cached): a process that finds
    # the job table's layout changed under it learns it again (Dialect.relearn_layout).
    updated = dialect(connection.alias).active_jobs_table(connection.alias, Job._meta.db_table)
    sql = _claim_sql(connection.alias, len(queues), running_limit is not None, updated)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _claim_limited(
    connection: Any,
    worker_id: str,
    queue: str,
    most: int,
    limit: int,
    lease_seconds: float,
    backend: str,
    now: datetime,
) -> list[tuple[Any, ...]]:
    """Claim from a queue that may run at most ``most`` jobs at once, everywhere.

    The statement counts the queue's running jobs and claims no more than the difference.
    Two such statements must not count at the same time: they run in a transaction holding
    the queue's lock where the database has one (``Dialect.queue_lock``: only claims of
    this queue wait for it); SQLite runs one writing statement at a time anyway.
    """
    sql = dialect(connection.alias)
    lock = sql.queue_lock(LOCK_CLASS, _key(queue))
    unlock = sql.queue_unlock(LOCK_CLASS, _key(queue))
    try:
        with transaction.atomic(using=connection.alias):
            if lock is not None:
                with connection.cursor() as cursor:
                    cursor.execute(named("claim-lock", lock[0]), lock[1])
                    if cursor.fetchone()[0] == 0:  # a lock with a timeout, which ran out
                        raise OperationalError(f"the lock of queue {queue!r} was not free")
            return _run_claim(
                connection,
                worker_id,
                [queue],
                limit,
                lease_seconds,
                backend,
                now,
                running_limit=most,
            )
    finally:
        if unlock is not None:
            _unlock(connection, unlock)


def _unlock(connection: Any, unlock: tuple[str, list[int]]) -> None:
    """Free a session's lock once the claim's transaction has ended (a connection that
    broke has freed it already)."""
    with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
        cursor.execute(named("claim-unlock", unlock[0]), unlock[1])


def _lock_then_mark(
    connection: Any,
    worker_id: str,
    queues: list[str],
    limit: int,
    lease_seconds: float,
    backend: str,
    now: datetime,
    running_limit: int | None,
) -> list[tuple[Any, ...]]:
    """The claim where UPDATE returns nothing (``Dialect.update_returning``): in one short
    transaction, lock up to ``limit`` due rows passing over those locked elsewhere
    (``SKIP LOCKED``), then mark them all with one UPDATE. Returns the rows as they were
    read; ``claim_batch`` applies the UPDATE's changes to them."""
    adapt = connection.ops.adapt_datetimefield_value
    select, count = _locking_claim_sql(connection.alias, len(queues))
    with _short_transaction(connection), connection.cursor() as cursor:
        if running_limit is not None:
            cursor.execute(count, [queues[0]])
            limit = max(0, min(limit, running_limit - int(cursor.fetchone()[0])))
            if not limit:
                return []
        cursor.execute(select, [*queues, adapt(now), backend, limit])
        rows = list(cursor.fetchall())
        if rows:
            cursor.execute(
                _mark_sql(connection.alias, len(rows)),
                [
                    *claimed_params(connection, worker_id, lease_seconds, now),
                    *[row[0] for row in rows],
                ],
            )
    return rows


#: The first key of the advisory locks of limited queues ("outb").
LOCK_CLASS = 0x6F757462


def _key(queue: str) -> int:
    """A queue's advisory lock key: a signed 32-bit hash of its name."""
    value = zlib.crc32(queue.encode())
    return value - 2**32 if value >= 2**31 else value


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


def _due_sql(alias: str, queue_count: int, columns: str, limit: str) -> str:
    """The SELECT of due jobs of ``queue_count`` queues, in claim order, locked."""
    quote = connections[alias].ops.quote_name
    return (
        f"SELECT {columns} FROM {quote(Job._meta.db_table)}"
        f"{dialect(alias).claim_index(queue_count)} WHERE status = '{JobStatus.QUEUED.value}' "
        f"AND queue IN ({', '.join(['%s'] * queue_count)}) AND run_at <= %s AND backend = %s "
        f"ORDER BY priority DESC, run_at ASC, id ASC LIMIT {limit}"
        f"{dialect(alias).skip_locked_suffix()}"
    )


def claimed_params(
    connection: Any, worker_id: str, lease_seconds: float, now: datetime
) -> list[Any]:
    """The parameters of ``set_claimed``'s assignments, in their order."""
    adapt = connection.ops.adapt_datetimefield_value
    lease_until = adapt(now + timedelta(seconds=lease_seconds))
    return [worker_id, lease_until, adapt(now), adapt(now), worker_id]


def _claimed_columns(alias: str) -> list[tuple[str, str, int]]:
    """The claim's assignments (column, value, how many of ``claimed_params()`` it takes):
    running, leased to the worker, one more attempt."""
    return [
        ("status", f"'{JobStatus.RUNNING.value}'", 0),
        ("worker_id", "%s", 1),
        ("lease_until", "%s", 1),
        ("attempts", "attempts + 1", 0),
        ("started_at", "COALESCE(started_at, %s)", 1),
        ("last_attempted_at", "%s", 1),
        ("worker_ids", dialect(alias).json_append_text("worker_ids", "%s"), 1),
    ]


def set_claimed(alias: str) -> str:
    """The claim's assignments; their parameters are ``claimed_params()``."""
    return ", ".join(f"{name} = {value}" for name, value, _ in _claimed_columns(alias))


def set_claimed_when(
    alias: str, condition: str, condition_params: list[Any], claimed: list[Any], otherwise: str
) -> tuple[str, list[Any]]:
    """The claim's assignments for the rows that meet ``condition``; the others keep their
    values, but for the status ``otherwise``. Returns them with their parameters (where
    ``claimed`` is ``claimed_params()``). Every value reads the row as it was (SQLite,
    PostgreSQL; not MariaDB or MySQL, which assign left to right)."""
    parts: list[str] = []
    params: list[Any] = []
    given = iter(claimed)
    for name, value, count in _claimed_columns(alias):
        kept = otherwise if name == "status" else name
        parts.append(f"{name} = CASE WHEN {condition} THEN {value} ELSE {kept} END")
        params += [*condition_params, *(next(given) for _ in range(count))]
    return ", ".join(parts), params


@contextmanager
def _short_transaction(connection: Any) -> Iterator[None]:
    """A transaction of a few statements. In autocommit, BEGIN and COMMIT go as statements:
    Django's ``atomic()`` would also switch autocommit off and on again, two more round
    trips per claim. Inside a transaction already, a savepoint, as ``atomic()`` makes."""
    if connection.in_atomic_block or not connection.get_autocommit():
        with transaction.atomic(using=connection.alias):
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
    try:
        yield
    except BaseException:
        with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute("ROLLBACK")  # a connection that broke has rolled back already
        raise
    with connection.cursor() as cursor:
        cursor.execute("COMMIT")


@lru_cache(maxsize=64)
def _locking_claim_sql(alias: str, queue_count: int) -> tuple[str, str]:
    """The locking claim's SELECT of the returned columns, and its count of a queue's
    running jobs (for a concurrency limit)."""
    quote = connections[alias].ops.quote_name
    columns = ", ".join(quote(column(Job, name)) for name in RETURNED_FIELDS)
    count = (
        f"SELECT COUNT(*) FROM {quote(Job._meta.db_table)} "
        f"WHERE status = '{JobStatus.RUNNING.value}' AND queue = %s"
    )
    return named("claim", _due_sql(alias, queue_count, columns, "%s")), named("claim-count", count)


@lru_cache(maxsize=64)
def _mark_sql(alias: str, count: int) -> str:
    """The locking claim's UPDATE of ``count`` locked rows."""
    table = connections[alias].ops.quote_name(Job._meta.db_table)
    ids = ", ".join(["%s"] * count)
    return named("claim-mark", f"UPDATE {table} SET {set_claimed(alias)} WHERE id IN ({ids})")


@lru_cache(maxsize=64)
def _claim_sql(alias: str, queue_count: int, limited: bool, updated: str) -> str:
    """The claim for ``queue_count`` queues on the database ``alias``, built once, updating
    the table ``updated`` (``Dialect.active_jobs_table``: on a partitioned job table, its
    partition of active rows).

    The inner SELECT is ``Job.objects.due(…)`` with ``select_for_update(skip_locked=True)``
    spelled by the dialect (Django refuses to compile ``select_for_update()`` outside a
    transaction even as the subquery of one autocommit UPDATE, and a transaction would add
    a BEGIN and a COMMIT round trip to every claim). Statuses are literals, not parameters,
    so the partial indexes match under any binding.
    """
    quote = connections[alias].ops.quote_name
    sql = dialect(alias)
    table = quote(Job._meta.db_table)
    limit = "%s"
    if limited:
        # No more than the queue's limit minus its running jobs (never below zero).
        limit = (
            f"(SELECT {sql.greatest('0', sql.least('%s', '%s - COUNT(*)'))} FROM {table} "
            f"WHERE status = '{JobStatus.RUNNING.value}' AND queue = %s)"
        )
    due = _due_sql(alias, queue_count, "id", limit)
    returning = ", ".join(quote(column(Job, name)) for name in RETURNED_FIELDS)
    return named(
        "claim",
        f"UPDATE {updated} SET {set_claimed(alias)} "
        f"WHERE {sql.id_in_subquery('id', due)} "
        f"RETURNING {returning}",
    )
