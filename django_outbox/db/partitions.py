"""The job table partitioned on PostgreSQL (``OUTBOX["RETENTION"]["PARTITIONS"]``):
every statement that makes, reads or drops its partitions.

The layout (docs/scaling.md, "Partitioning the job table"):

    django_outbox_job                  PARTITION BY LIST (status)
    ├── django_outbox_job_active       waiting, held, queued, running
    └── django_outbox_job_finished     succeeded, failed, cancelled;
        │                              PARTITION BY RANGE (finished_at)
        ├── django_outbox_job_d20261207   a UTC day each
        └── django_outbox_job_fdefault    rows of a day without a partition of its own

Claims, heartbeats and completions name a status, so they reach the active partition only,
and retention drops a past day's partition instead of deleting its rows. The parent has no
primary key (it would have to include ``finished_at``): each leaf has ``PRIMARY KEY (id)``
and the identity sequence keeps ids unique across them. A unique index cannot live on the
parent either, so the job table's unique indexes (the active unique key) live on the active
partition, which holds every row they cover. The other indexes live on the parent, so each
partition has them.

``partition()`` and ``unpartition()`` rewrite the table in one transaction holding it
exclusively: run them with the workers stopped (``manage.py outbox_partition``).

One module over 400 lines: every statement about the partitioned job table, its making,
its days and their drop, reads in one place.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Any

from django.db import DatabaseError, connections, transaction

from django_outbox.conf import FINISHED_STATUSES
from django_outbox.db.names import named
from django_outbox.models.jobs import ACTIVE_STATUSES, Job

#: Days of partitions made ahead of today, at conversion and at every prune.
DAYS_AHEAD = 3
#: Days before today that a conversion makes partitions for by default, where rows
#: finished then; older rows go to the default partition (pruned in chunks). Statements
#: that find a job by id alone look in every partition: fewer partitions, fewer looks.
DAYS_BEHIND = 8
#: How long a prune waits to detach a partition before it leaves it for the next round:
#: the detach holds the finished partitions' parent exclusively, and completions wait.
DETACH_LOCK_TIMEOUT = "2s"

#: The advisory lock (two keys) that one prune at a time holds while it drops days.
DROPPER_LOCK = (0x6F7574, 0x64726F70)

_DAY_NAME = re.compile(r"_d(\d{8})$")

logger = logging.getLogger("django_outbox.retention")


@dataclass(frozen=True)
class Names:
    """The tables of one partitioned job table."""

    table: str

    @property
    def active(self) -> str:
        return f"{self.table}_active"

    @property
    def finished(self) -> str:
        return f"{self.table}_finished"

    @property
    def default(self) -> str:
        return f"{self.table}_fdefault"

    def day(self, day: date) -> str:
        return f"{self.table}_d{day:%Y%m%d}"


@dataclass(frozen=True)
class Day:
    """A day's partition of finished jobs: rows with ``start <= finished_at < end``."""

    name: str
    start: datetime

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=1)


class NotConvertible(Exception):
    """The job table cannot be converted as it is (the message says why)."""


def day_start(moment: datetime) -> datetime:
    """The UTC midnight that begins ``moment``'s day: the day partitions' bounds."""
    return datetime.combine(moment.astimezone(UTC).date(), time(), tzinfo=UTC)


@contextmanager
def one_dropper(connection: Any) -> Iterator[bool]:
    """Whether this prune is the one that drops days now (a session's advisory lock, held
    for the block): two at once would race to detach and drop the same day."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", list(DROPPER_LOCK))
        alone = bool(cursor.fetchone()[0])
    try:
        yield alone
    finally:
        if alone:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(DROPPER_LOCK))


def supported(alias: str) -> bool:
    """Whether the database at ``alias`` can partition the job table (PostgreSQL)."""
    return bool(connections[alias].vendor == "postgresql")


@cache
def jobs_partitioned(alias: str) -> bool:
    """Whether the job table of ``alias`` is partitioned, asked once per process: it is
    converted with the workers stopped. A claim then updates the active partition
    (``Dialect.active_jobs_table``). A process that was not stopped for an
    ``outbox_partition --undo`` asks again when its claim finds the partition gone
    (``forget_if_gone``); one not stopped for the conversion claims through the parent."""
    return is_partitioned(connections[alias], Job._meta.db_table)


def forget_if_gone(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's undefined_table for the job table's active
    partition, which ``outbox_partition --undo`` dropped while this process ran; if so,
    ``jobs_partitioned`` is asked again next time. No statement runs here: the caller's
    transaction may be one the error undid."""
    if getattr(exc.__cause__, "sqlstate", None) != "42P01":
        return False
    if f'"{Names(Job._meta.db_table).active}"' not in str(exc):
        return False
    jobs_partitioned.cache_clear()
    return True


def is_partitioned(connection: Any, table: str) -> bool:
    """Whether ``table`` is a partitioned table."""
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "partitions-is-partitioned",
                "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = "
                "to_regclass(%s))",
            ),
            [table],
        )
        return bool(cursor.fetchone()[0])


def partition(
    connection: Any, table: str, days_behind: int = DAYS_BEHIND, today: date | None = None
) -> int:
    """Rewrite ``table`` (one table) as the partitioned layout above, with its rows, in one
    transaction: a partition for each day from ``days_behind`` days ago that has finished
    rows, and for today and DAYS_AHEAD days after. Returns how many day partitions it made."""
    names = Names(table)
    today = today or _utc_today()
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        old = f"{table}_unpartitioned"
        indexes, options = _take_apart(cursor, table, old)
        cursor.execute(
            f"CREATE TABLE {_q(table)} (LIKE {_q(old)} {_LIKE}) PARTITION BY LIST (status)"
        )
        cursor.execute(
            f"CREATE TABLE {_q(names.active)} PARTITION OF {_q(table)} FOR VALUES IN "
            f"({_literals(ACTIVE_STATUSES)}){_with(options)}"
        )
        cursor.execute(
            f"CREATE TABLE {_q(names.finished)} PARTITION OF {_q(table)} FOR VALUES IN "
            f"({_literals(FINISHED_STATUSES)}) PARTITION BY RANGE (finished_at)"
        )
        cursor.execute(
            f"CREATE TABLE {_q(names.default)} PARTITION OF {_q(names.finished)} DEFAULT"
        )
        cursor.execute(f"SELECT min(finished_at) FROM {_q(old)}")
        oldest = cursor.fetchone()[0]
        first = today - timedelta(days=days_behind)
        if oldest is not None:
            first = max(first, oldest.astimezone(UTC).date())
        first = min(first, today)
        made = 0
        for offset in range((today - first).days + DAYS_AHEAD + 1):
            made += _make_day(cursor, names, first + timedelta(days=offset), check_default=False)
        cursor.execute(f"INSERT INTO {_q(table)} SELECT * FROM {_q(old)}")
        _continue_ids(cursor, table, old)
        cursor.execute(f"DROP TABLE {_q(old)}")
        cursor.execute(f"ALTER TABLE {_q(names.active)} ADD PRIMARY KEY (id)")
        cursor.execute(f"ALTER TABLE {_q(names.default)} ADD PRIMARY KEY (id)")
        for day in days(connection, table):
            cursor.execute(f"ALTER TABLE {_q(day.name)} ADD PRIMARY KEY (id)")
        for name, definition, unique in indexes:
            cursor.execute(_retarget(definition, names.active if unique else table))
            if not unique:
                _name_active_copy(cursor, name, names.active)
        cursor.execute(f"ANALYZE {_q(table)}")
    jobs_partitioned.cache_clear()
    return made


def unpartition(connection: Any, table: str) -> None:
    """Rewrite the partitioned ``table`` as one table again, with its rows, its primary
    key and every index it had, in one transaction."""
    names = Names(table)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        old = f"{table}_partitioned"
        indexes = _indexes(cursor, table) + [
            index for index in _indexes(cursor, names.active) if index[2]
        ]
        options = _options(cursor, names.active)
        cursor.execute(f"LOCK TABLE {_q(table)} IN ACCESS EXCLUSIVE MODE")
        _rename(cursor, table, old)
        cursor.execute(f"CREATE TABLE {_q(table)} (LIKE {_q(old)} {_LIKE}){_with(options)}")
        cursor.execute(f"INSERT INTO {_q(table)} SELECT * FROM {_q(old)}")
        _continue_ids(cursor, table, old)
        cursor.execute(f"DROP TABLE {_q(old)}")
        cursor.execute(
            f"ALTER TABLE {_q(table)} ADD CONSTRAINT {_q(table + '_pkey')} PRIMARY KEY (id)"
        )
        for _name, definition, _unique in indexes:
            cursor.execute(_retarget(definition, table))
        cursor.execute(f"ANALYZE {_q(table)}")
    jobs_partitioned.cache_clear()


def make_days(connection: Any, table: str, today: date | None = None) -> list[str]:
    """Make the partitions of today and the DAYS_AHEAD days after it that are missing;
    the names of those made. A day whose rows already went to the default partition gets
    none (its rows stay there)."""
    names = Names(table)
    today = today or _utc_today()
    made = []
    for offset in range(DAYS_AHEAD + 1):
        day = today + timedelta(days=offset)
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                # Making a partition holds the finished partitions exclusively, as a detach
                # does: completions wait, so wait for them briefly only.
                cursor.execute(f"SET LOCAL lock_timeout = '{DETACH_LOCK_TIMEOUT}'")
                if _make_day(cursor, names, day, check_default=True):
                    cursor.execute(f"ALTER TABLE {_q(names.day(day))} ADD PRIMARY KEY (id)")
                    made.append(names.day(day))
        except DatabaseError as exc:
            # Another worker made it at the same moment (the day has its partition), or the
            # lock was not to be had: the next prune makes it.
            if not _exists(connection, names.day(day)):
                logger.warning(
                    "the job table's partition %s was not made (%s)", names.day(day), exc
                )
                break
    return made


def days(connection: Any, table: str) -> list[Day]:
    """The day partitions attached to ``table``'s finished partition, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "partitions-days",
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
            ),
            [Names(table).finished],
        )
        found = [row[0] for row in cursor.fetchall()]
    return [day for name in found if (day := _day_of(name)) is not None]


def leftovers(connection: Any, table: str) -> list[str]:
    """Day tables of ``table`` that are no partition (a prune detached them, then
    stopped before it dropped them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            named(
                "partitions-leftovers",
                "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' "
                "AND c.relname LIKE %s AND NOT c.relispartition "
                "AND pg_table_is_visible(c.oid)",
            ),
            [table.replace("_", "\\_") + "\\_d%"],
        )
        return sorted(row[0] for row in cursor.fetchall() if _day_of(row[0]) is not None)


def keeps_rows(connection: Any, day: Day, keep: str) -> bool:
    """Whether a row of ``day`` matches ``keep`` (a condition on its columns)."""
    with connection.cursor() as cursor:
        cursor.execute(
            named("partitions-keeps", f"SELECT EXISTS (SELECT 1 FROM {_q(day.name)} WHERE {keep})")
        )
        return bool(cursor.fetchone()[0])


def detach(connection: Any, table: str, day: Day) -> bool:
    """Detach ``day`` from the finished partitions; False if it could not take the lock in
    DETACH_LOCK_TIMEOUT (completions were writing), or another prune took it first."""
    try:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{DETACH_LOCK_TIMEOUT}'")
            cursor.execute(
                named(
                    "partitions-detach",
                    f"ALTER TABLE {_q(Names(table).finished)} DETACH PARTITION {_q(day.name)}",
                )
            )
    except DatabaseError as exc:
        logger.warning("%s was not detached; its rows are deleted in chunks (%s)", day.name, exc)
        return False
    return True


def drop(connection: Any, name: str) -> int:
    """Drop the detached day table ``name``; how many rows it held."""
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {_q(name)} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"SELECT count(*) FROM {_q(name)}")
        count = int(cursor.fetchone()[0])
        cursor.execute(named("partitions-drop", f"DROP TABLE {_q(name)}"))
    return count


def row_estimate_sql() -> str:
    """The planner's row count of a table, summed over its leaves where it is partitioned
    (a partitioned parent has no count of its own)."""
    return (
        "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT coalesce(sum(greatest(l.reltuples, 0)), 0) "
        "FROM pg_partition_tree(c.oid) t JOIN pg_class l ON l.oid = t.relid WHERE t.isleaf) "
        "ELSE c.reltuples END::bigint FROM pg_class c WHERE c.oid = %s::regclass"
    )


#: What a copy of the table takes with it: no indexes (they are made after the rows).
_LIKE = (
    "INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING GENERATED "
    "INCLUDING STORAGE INCLUDING COMMENTS"
)


def _take_apart(cursor: Any, table: str, old: str) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """Check ``table`` can be converted, lock it and rename it (and its sequence) to
    ``old``; its indexes but the primary key, and its storage options."""
    cursor.execute(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint "
        "WHERE contype = 'f' AND confrelid = %s::regclass",
        [table],
    )
    references = cursor.fetchall()
    if references:
        listed = ", ".join(f"{name} on {source}" for source, name in references)
        raise NotConvertible(
            f"foreign keys reference {table} ({listed}); a partitioned table can have none "
            "(its parent has no primary key). Drop them first."
        )
    cursor.execute(f"LOCK TABLE {_q(table)} IN ACCESS EXCLUSIVE MODE")
    indexes = _indexes(cursor, table)
    options = _options(cursor, table)
    _rename(cursor, table, old)
    return indexes, options


def _indexes(cursor: Any, table: str) -> list[tuple[str, str, bool]]:
    """``table``'s own indexes but its primary key: (name, definition, unique)."""
    cursor.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisunique FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass "
        "AND NOT i.indisprimary ORDER BY c.relname",
        [table],
    )
    return [(name, definition, bool(unique)) for name, definition, unique in cursor.fetchall()]


def _name_active_copy(cursor: Any, index: str, active: str) -> None:
    """Name the active partition's copy of the parent's ``index`` after it (``…_active``),
    so that a claim's plan names the index it reads."""
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_index x ON x.indexrelid = c.oid WHERE i.inhparent = to_regclass(%s) "
        "AND x.indrelid = to_regclass(%s)",
        [index, active],
    )
    for (name,) in cursor.fetchall():
        cursor.execute(f"ALTER INDEX {_q(name)} RENAME TO {_q(f'{index}_active')}")


def _options(cursor: Any, table: str) -> list[str]:
    cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table])
    return list(cursor.fetchone()[0] or [])


def _rename(cursor: Any, table: str, new: str) -> None:
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    sequence = cursor.fetchone()[0]
    cursor.execute(f"ALTER TABLE {_q(table)} RENAME TO {_q(new)}")
    if sequence:
        cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {_q(new + '_id_seq')}")


def _continue_ids(cursor: Any, table: str, old: str) -> None:
    """The new table's identity goes on from where the old one's stood."""
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [old])
    old_sequence = cursor.fetchone()[0]
    cursor.execute(f"SELECT last_value, is_called FROM {old_sequence}")
    last, called = cursor.fetchone()
    cursor.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s, %s)", [table, last, called])


def _make_day(cursor: Any, names: Names, day: date, check_default: bool) -> bool:
    """Make ``day``'s partition unless it exists (or, with ``check_default``, its rows
    went to the default partition); whether it was made."""
    name = names.day(day)
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    if cursor.fetchone()[0]:
        return False
    start = datetime.combine(day, time(), tzinfo=UTC)
    bounds = f"FROM ('{start.isoformat()}') TO ('{(start + timedelta(days=1)).isoformat()}')"
    if check_default:
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {_q(names.default)} WHERE finished_at >= %s "
            "AND finished_at < %s)",
            [start, start + timedelta(days=1)],
        )
        if cursor.fetchone()[0]:
            return False
    cursor.execute(
        named(
            "partitions-make-day",
            f"CREATE TABLE {_q(name)} PARTITION OF {_q(names.finished)} FOR VALUES {bounds}",
        )
    )
    return True


def _exists(connection: Any, name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return bool(cursor.fetchone()[0])


def _day_of(name: str) -> Day | None:
    match = _DAY_NAME.search(name)
    if match is None:
        return None
    start = datetime.strptime(match.group(1), "%Y%m%d").replace(tzinfo=UTC)
    return Day(name, start)


def _retarget(definition: str, table: str) -> str:
    """An index definition of one table, made on ``table`` instead."""
    return re.sub(r" ON (ONLY )?\S+ USING ", f" ON {_q(table)} USING ", definition, count=1)


def _with(options: list[str]) -> str:
    return f" WITH ({', '.join(options)})" if options else ""


def _literals(values: Any) -> str:
    return ", ".join(f"'{value}'" for value in values)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _utc_today() -> date:
    return datetime.now(UTC).date()
