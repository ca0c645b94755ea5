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
lock, then, on PostgreSQL and SQLite, one statement that counts the keys' turns and queues
their next jobs (SQLite's queues one per key: again for the keys with a higher limit that
took one); on MariaDB and MySQL one count, one read of the held jobs to queue (for each
key, no further than the jobs it takes) and one UPDATE. A worker's hand-off (handoff.py)
adds one statement (two on MariaDB and MySQL), or none on SQLite, whose admission hands off
itself. Written out rather than built by the ORM: a worker runs them for every batch of
keyed jobs it ends, and the ORM's building cost more than the database's work.

One module of over 400 lines: entering, admitting, ending, holding and sweeping keys all
take the key's row as their lock, in one order; the rule is kept in one place to be read
whole. Forgetting idle keys' rows lives in jobs/idlekeys.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import connections, router, transaction
from django.db.models import CharField, Count, Exists, F, OuterRef, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact, In
from django.utils import timezone

from django_outbox.db import dialect, named
from django_outbox.db.rowvalues import among, among_texts
from django_outbox.jobs.claim import RETURNED_FIELDS
from django_outbox.jobs.handoff import Handoff, assignments, take
from django_outbox.jobs.returning import column, returned_values
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


def admit(using: str, keys: Iterable[str], now: datetime, handoff: Handoff | None = None) -> int:
    """Queue the held jobs of ``keys`` whose turn has come, oldest first, and signal their
    queues on commit; returns how many were queued. Safe to run at any time: it counts
    what is there. With a ``handoff``, its worker takes those it may run (handoff.py)."""
    keys = sorted(set(keys))
    if not keys:
        return 0
    found: list[tuple[int, str, datetime]] = []
    # No savepoint of its own: it runs inside a completion, an enqueue or an operation,
    # and a failure here fails the whole of it anyway.
    taken_before = len(handoff.rows) if handoff is not None else 0
    with transaction.atomic(using=using, savepoint=False):
        for start in range(0, len(keys), CHUNK):
            found += _admit(using, keys[start : start + CHUNK], handoff, now)
        # Queued, and taken by the handoff in the same statement.
        admitted = len(found) + (len(handoff.rows) - taken_before if handoff is not None else 0)
        if found and handoff is not None and handoff.room > 0:
            taken = take(using, handoff, found, now)
            found = [job for job in found if job[0] not in taken]
    if handoff is not None:
        handoff.queued += len(found)
    if found:
        notify_on_commit([(queue, run_at) for _, queue, run_at in found], using=using)
    return admitted


def _admit(
    using: str, keys: list[str], handoff: Handoff | None, now: datetime
) -> list[tuple[int, str, datetime]]:
    """Lock ``keys``' rows, then queue their next held jobs; returns those queued (id,
    queue, due time), not those a ``handoff`` took in the same statement.

    The lock is a statement of its own: under READ COMMITTED, a statement that waited for
    a lock still reads what it saw when it began, and what the transaction it waited for
    committed (a turn taken, a job queued) must be counted."""
    connection = connections[using]
    quote = connection.ops.quote_name
    where, params = among_texts(using, quote("key"), keys)
    sql_dialect = dialect(using)
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "key-lock",
                f"SELECT {quote('key')}, {quote('limit')}, held_by "
                f"FROM {quote(LimitKey._meta.db_table)} WHERE {where} "
                f"ORDER BY {quote('key')}{sql_dialect.lock_suffix()}",
            ),
            params,
        )
        rows = cursor.fetchall()
    if _admit_sql(using, "") is not None:  # the dialect has a statement for it
        limits = {key: limit for key, limit, held_by in rows if held_by is None}
        return _admit_in_one(using, limits, handoff, now)
    free = _free_turns(using, {key: (limit, held_by) for key, limit, held_by in rows})
    found = _oldest_held(using, free)
    if found:
        # Their due times unchanged: a held job keeps its place in the queue's order. The
        # rows are the key's, locked by its row: only a cancel can have ended one meanwhile.
        ids, id_params = among(using, "id", [job_id for job_id, _, _ in found])
        with connection.cursor() as cursor:
            cursor.execute(
                named(
                    "key-queue",
                    f"UPDATE {connection.ops.quote_name(Job._meta.db_table)} "
                    f"SET status = '{JobStatus.QUEUED.value}' "
                    f"WHERE {ids} AND status = '{JobStatus.HELD.value}'",
                ),
                id_params,
            )
    return found


def _free_turns(using: str, rows: dict[str, tuple[int, int | None]]) -> dict[str, int]:
    """How many turns each key has free: its limit less its queued and running jobs; none
    while a failed job holds its sequence."""
    open_keys = [key for key, (_, held_by) in rows.items() if held_by is None]
    if not open_keys:
        return {}
    connection = connections[using]
    where, params = among_texts(using, "limit_key", open_keys)
    statuses = ", ".join(f"'{status.value}'" for status in TURN_STATUSES)
    status = dialect(using).keyed_status_column
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "key-turns",
                f"SELECT limit_key, COUNT(*) FROM {connection.ops.quote_name(Job._meta.db_table)} "
                f"WHERE {where} AND {status} IN ({statuses}) GROUP BY limit_key",
            ),
            params,
        )
        turns = dict(cursor.fetchall())
    return {
        key: rows[key][0] - turns.get(key, 0)
        for key in open_keys
        if rows[key][0] > turns.get(key, 0)
    }


def _admit_in_one(
    using: str, limits: dict[str, int], handoff: Handoff | None, now: datetime
) -> list[tuple[int, str, datetime]]:
    """The free turns, the jobs to queue and their UPDATE in one statement, of the keys
    whose sequence no failed job holds (``limits``: each one's limit); returns the jobs
    queued. Where the statement queues at most one job per key, again for the keys that
    took one and may take more. Where the dialect can, a ``handoff`` with room for one
    job per key takes its jobs in the same statement (handoff.py)."""
    connection = connections[using]
    decode = returned_values(connection, Job, ["id", "queue", "run_at", "limit_key"])
    found: list[tuple[int, str, datetime]] = []
    wanted = sorted(limits)
    with connection.cursor() as cursor:
        while wanted:
            among_sql, params = among_texts(using, "k.key", wanted)
            taking = None
            if handoff is not None and handoff.room >= len(wanted):
                taking = _admit_taking(using, among_sql, params, handoff, now)
            if taking is not None:
                queued, taken_keys = taking
            else:
                statement = _admit_sql(using, among_sql)
                assert statement is not None
                cursor.execute(named("key-admit", statement), params)
                queued, taken_keys = [decode(row) for row in cursor.fetchall()], []
            found += [(job_id, queue, run_at) for job_id, queue, run_at, _ in queued]
            if not dialect(using).admits_one_per_key:
                break
            admitted = [*(key for *_, key in queued), *taken_keys]
            wanted = sorted({key for key in admitted if limits[key] > 1})
    return found


def _admit_taking(
    using: str, among_sql: str, params: list[Any], handoff: Handoff, now: datetime
) -> tuple[list[tuple[Any, ...]], list[str]] | None:
    """The admission of the keys ``among_sql`` selects, handing off as it queues: the jobs
    taken go to ``handoff.rows``. Returns (id, queue, run_at, limit_key) of the jobs
    queued, and the keys of those taken; None where the dialect has no such statement."""
    connection = connections[using]
    quote = connection.ops.quote_name
    sql, set_params = assignments(using, handoff, now)
    fields = [*RETURNED_FIELDS, "status"]
    statement = dialect(using).admit_held_taking(
        jobs=quote(Job._meta.db_table),
        keys=quote(LimitKey._meta.db_table),
        among=among_sql,
        turns=", ".join(f"'{status.value}'" for status in TURN_STATUSES),
        held=f"'{JobStatus.HELD.value}'",
        assignments=sql,
        returning=", ".join(quote(column(Job, name)) for name in fields),
    )
    if statement is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(named("key-admit-handoff", statement), [*set_params, *params])
        rows = cursor.fetchall()
    decode = returned_values(connection, Job, fields)
    at = {name: position for position, name in enumerate(fields)}
    queued: list[tuple[Any, ...]] = []
    taken_keys: list[str] = []
    for row in rows:
        if row[at["status"]] == JobStatus.RUNNING.value:
            handoff.rows.append(row[:-1])  # decoded once the transaction has committed
            handoff.room -= 1
            taken_keys.append(row[at["limit_key"]])
        else:
            job = decode(row)
            queued.append(tuple(job[at[name]] for name in ("id", "queue", "run_at", "limit_key")))
    return queued, taken_keys


@lru_cache(maxsize=64)
def _admit_sql(using: str, among_sql: str) -> str | None:
    """The dialect's admission in one statement, after the lock, of the keys ``among_sql``
    selects (None: the dialect has none)."""
    quote = connections[using].ops.quote_name
    return dialect(using).admit_held(
        jobs=quote(Job._meta.db_table),
        keys=quote(LimitKey._meta.db_table),
        among=among_sql,
        turns=", ".join(f"'{status.value}'" for status in TURN_STATUSES),
        held=f"'{JobStatus.HELD.value}'",
        queued=f"'{JobStatus.QUEUED.value}'",
    )


def _oldest_held(using: str, free: dict[str, int]) -> list[tuple[int, str, datetime]]:
    """The oldest ``free[key]`` held jobs of each key (id, queue, due time), reading no
    further than those (PostgreSQL does this within ``_admit_sql``)."""
    if not free:
        return []
    connection = connections[using]
    table = connection.ops.quote_name(Job._meta.db_table)
    held = f"{dialect(using).keyed_status_column} = '{JobStatus.HELD.value}'"
    statements: list[tuple[str, list[Any]]] = []
    # The oldest held job of each key with one turn free (most keys, most of the time):
    # one statement reading one index entry per key (a UNION of a branch a key, each a
    # seek); the keys that want more, branch by branch below.
    ones = [key for key, count in free.items() if count == 1]
    free = {key: count for key, count in free.items() if count != 1}
    if ones:
        marks = ", ".join(["%s"] * len(ones))
        if dialect(using).loose_index_scan:
            oldest = (
                f"SELECT * FROM (SELECT MIN(id) FROM {table} WHERE {held} "
                f"AND limit_key IN ({marks}) GROUP BY limit_key) AS o"
            )
        else:  # SQLite: a seek per key, in a correlated subquery
            oldest = (
                f"SELECT (SELECT id FROM {table} WHERE limit_key = k.column1 AND {held} "
                f"ORDER BY id LIMIT 1) FROM (VALUES {marks.replace('%s', '(%s)')}) AS k"
            )
        statements.append((f"SELECT id, queue, run_at FROM {table} WHERE id IN ({oldest})", ones))
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


def ended(
    using: str,
    jobs: Sequence[tuple[int, str]],
    failed: Iterable[int],
    now: datetime,
    handoff: Handoff | None = None,
) -> int:
    """Jobs with keys ended (``(id, limit_key)``): a sequence that holds on failure is held
    by its job that failed for good (``failed``; the row must say so), then each key's
    next jobs are queued, or handed off. In the caller's transaction, after it stored the
    endings."""
    if not jobs:
        return 0
    keys = sorted({key for _, key in jobs})
    failed = set(failed)
    holding = [(i, key) for i, key in jobs if i in failed and key.startswith(SEQUENCE_PREFIX)]
    with transaction.atomic(using=using, savepoint=False):
        if holding:
            lock(using, keys)  # all of them, in order, before the first is written
        for job_id, key in holding:
            hold(using, key, job_id)
        return admit(using, keys, now, handoff)


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


def keyed_status(using: str) -> RawSQL:
    """A keyed job's status in the terms of the index of limit keys, for a filter. That is
    ``status``, but on MariaDB and MySQL, which have no partial index, the generated column
    holding the status of keyed rows only (migration 0018): a query naming ``status`` would
    read each of the key's jobs ever kept."""
    return RawSQL(dialect(using).keyed_status_column, (), output_field=CharField())


def sweep(now: datetime | None = None) -> int:
    """Queue the held jobs of keys that have a free turn nobody gave them: a safety net
    for turns freed outside the engine (a queued job's row deleted by hand). Reads each
    key row once (up to 1,000 keys with held jobs); the stalled check runs it."""
    using = router.db_for_write(Job)
    now = now or timezone.now()
    # Each key's oldest held job and its turns, by a seek and a range of the key's own
    # index entries. (An EXISTS, MariaDB joins by reading every held job; under a drain's
    # writes that read took seconds, and a worker's first stalled check waited for it.)
    status = keyed_status(using)
    first_held = Job.objects.filter(Exact(status, JobStatus.HELD), limit_key=OuterRef("key"))
    turns = (
        Job.objects.filter(In(status, TURN_STATUSES), limit_key=OuterRef("key"))
        .values("limit_key")
        .annotate(n=Count("id"))
        .values("n")
    )
    found = (
        LimitKey.objects.using(using)
        .filter(held_by__isnull=True)
        .annotate(
            first_held=Subquery(first_held.order_by("id").values("id")[:1]),
            turns=Coalesce(Subquery(turns), 0),
        )
        .filter(first_held__isnull=False, turns__lt=F("limit"))
        .values_list("key", flat=True)[:1000]
    )
    return admit(using, list(found), now)


def held_behind_running(queues: list[str], backend: str = "default") -> bool:
    """Whether a job of ``queues`` is held behind a key that has a running job (whose end
    gives it its turn). For a burst worker deciding whether to leave.

    Two reads, each as long as the running jobs are many: their keys (by the status's
    index), then a seek in each key's own index entries. (As one IN subquery, MariaDB
    reads every keyed job's index entry, a cost that grows with the held jobs.)"""
    using = router.db_for_write(Job)
    running = list(
        Job.objects.using(using)
        .filter(status=JobStatus.RUNNING, limit_key__isnull=False)
        .values_list("limit_key", flat=True)
        .distinct()
    )
    if not running:
        return False
    return (
        Job.objects.using(using)
        .filter(
            Exact(keyed_status(using), JobStatus.HELD),
            limit_key__in=running,
            queue__in=queues,
            backend=backend,
        )
        .exists()
    )
