"""What every dialect says about its database (see ``django_outbox.db``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from django.db import connections

from django_outbox.db.names import named


class Dialect(ABC):
    #: Django's name for the database (``connection.vendor``).
    vendor: str
    #: Arrays as statement parameters (``= ANY(%s::bigint[])``, ``unnest(%s::text[])``):
    #: one statement text for any number of rows, which the driver converts once. Without
    #: them, batched statements spell out a placeholder per row.
    array_parameters: bool
    #: ``SELECT … FOR UPDATE SKIP LOCKED``: claimers pass over each other's rows. Without
    #: it, a claim is one writer at a time (SQLite's database lock).
    skip_locked: bool
    #: ``UPDATE … RETURNING``: a claim marks and reads its rows in one statement.
    update_returning: bool
    #: ``INSERT … RETURNING``: a multi-row insert gives its rows' ids. Without it (MySQL),
    #: they are read from the first id the statement took (``inserted_ids``).
    insert_returning: bool = True
    #: ``LISTEN``/``NOTIFY``: commits wake workers through the database itself.
    listen_notify: bool
    #: The driver's pipeline mode: a statement sent without waiting for the result of the
    #: one before (``db.inserts.Batches``), so the server writes one batch of a bulk write
    #: while Python makes the next.
    pipelines: bool = False
    #: ``SELECT MIN(id) … GROUP BY key`` over an index on (key, status, id) reads one entry
    #: per key ("Using index for group-by"), not every row of each key.
    loose_index_scan: bool = False
    #: ``epoch_seconds()``: the server's own clock, which times every worker alike whichever
    #: machine it runs on. Without it (an embedded database) statements take the time as
    #: a parameter.
    server_clock: bool
    #: The job column whose index finds an active job by its dedup key: ``dedup_key``
    #: itself where a partial unique index covers the active rows; where a database has
    #: no partial index (MariaDB, MySQL), the generated column that holds the key of an
    #: active (waiting, held, queued, running) row only, which its unique index covers
    #: (migration 0010). A comparison with ``dedup_key`` there reads every row.
    active_dedup_column: str = "dedup_key"
    #: The column a query for failed jobs orders and bounds by: ``finished_at`` under the
    #: partial index of failed rows; on a database with no partial index (MariaDB,
    #: MySQL), the generated column that holds a failed row's ``finished_at`` only, which
    #: its index covers (migration 0018), so that no other status change rewrites it.
    failed_finished_column: str = "finished_at"
    #: The column a query for a limit key's jobs by status names (jobs/keys.py): ``status``
    #: under the partial index of keyed rows; where there is none (MariaDB, MySQL), the
    #: generated column that holds a keyed row's status only (migration 0018), so that a
    #: job without a key keeps one entry in that index, which no status change rewrites.
    keyed_status_column: str = "status"
    #: The column the dashboard counts finished jobs by status with: ``status`` under the
    #: partial index of finished rows; on MariaDB and MySQL the generated column that
    #: holds a finished row's status only, which their index of finished rows covers
    #: (migration 0020), so the count reads the index alone.
    finished_status_column: str = "status"

    def partitioned(self, connection: Any, table: str) -> bool:
        """Whether ``table`` is partitioned by status and day of finishing, so that
        retention drops a day instead of deleting its rows (PostgreSQL only:
        ``OUTBOX["RETENTION"]["PARTITIONS"]``, ``db/partitions.py``)."""
        return False

    def active_jobs_table(self, alias: str, table: str) -> str:
        """The table, quoted, that a statement moving jobs between active statuses updates
        (a claim: queued to running): ``table`` itself, or, where the job table of
        ``alias`` is partitioned, its active partition, which holds those rows before and
        after. A statement finding its rows by id then looks in no other partition."""
        return str(connections[alias].ops.quote_name(table))

    def relearn_layout(self, alias: str, exc: BaseException) -> bool:
        """Whether ``exc`` says the job table's layout changed under this process (a
        partition it names is gone); if so, the dialect forgets what it knew of it, and
        running the operation again builds its statements for the table as it is now."""
        return False

    def greatest(self, *sql: str) -> str:
        return f"GREATEST({', '.join(sql)})"

    def least(self, *sql: str) -> str:
        return f"LEAST({', '.join(sql)})"

    def deadlock(self, exc: BaseException) -> bool:
        """``exc`` says the database undid the transaction to break a deadlock (or, where
        it has them, a serialization failure): running it again is the remedy."""
        return False

    def row_estimate(self, table: str) -> tuple[str, list[str]] | None:
        """A statement reading the planner's estimate of ``table``'s rows (negative or NULL:
        unknown), or None where the database keeps none: the admin shows it for big
        tables instead of counting them."""
        return None

    def real(self, sql: str) -> str:
        """``sql`` as a double-precision number (where parameters need the type said)."""
        return sql

    def epoch_seconds(self) -> str:
        """The statement's time, in seconds since the epoch (``server_clock`` only)."""
        raise NotImplementedError(f"{self.vendor} statements take the time as a parameter")

    def upsert(
        self,
        table: str,
        columns: list[str],
        values: list[str],
        conflict: list[str],
        updates: list[tuple[str, str]],
    ) -> str:
        """INSERT one row, or where a row with the same ``conflict`` columns exists, set
        its ``updates`` (column, SQL in which the table's name means the old row)."""
        assignments = ", ".join(f"{name} = {sql}" for name, sql in updates)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)}) "
            f"ON CONFLICT ({', '.join(conflict)}) DO UPDATE SET {assignments}"
        )

    def upsert_adding(self, table: str, columns: list[str], rows: int, added: list[str]) -> str:
        """INSERT ``rows`` rows of ``columns``; where a row's key (the columns not ``added``)
        exists, add its ``added`` values to the row's instead."""
        key = [name for name in columns if name not in added]
        sums = ", ".join(f"{name} = {table}.{name} + excluded.{name}" for name in added)
        return (
            f"{insert_values(table, columns, rows)} "
            f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sums}"
        )

    def insert_unless_conflicting(
        self, connection: Any, name: str, table: str, columns: str, values: list[Any]
    ) -> int | None:
        """INSERT one row of ``values``, or nothing where it would break a unique index (a
        partial one included); the new row's id, or None (nothing inserted). A statement
        named ``name``."""
        placeholders = ", ".join(["%s"] * len(values))
        sql = (
            f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING "
            "RETURNING id"
        )
        with connection.cursor() as cursor:
            cursor.execute(named(name, sql), values)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def concat(self, *sql: str) -> str:
        """The texts of ``sql`` one after another."""
        return " || ".join(sql)

    def inserted_ids(self, cursor: Any, count: int) -> list[int]:
        """The ids of the ``count`` rows the multi-row INSERT ``cursor`` just ran took, in
        order (``insert_returning`` False only)."""
        raise NotImplementedError(f"{self.vendor} returns the ids of an INSERT")

    def text(self, sql: str) -> str:
        """``sql`` as text."""
        return f"CAST({sql} AS TEXT)"

    def deep_recursion(self, sql: str) -> str:
        """``sql``, a ``WITH RECURSIVE`` read, allowed to recurse as deep as its data goes
        (a workflow's chain may be thousands of steps long)."""
        return sql

    def claim_index(self, queue_count: int) -> str:
        """What follows the job table's name in the claim's SELECT: an index hint where the
        database needs one ("" elsewhere)."""
        return ""

    def skip_locked_suffix(self) -> str:
        """What ends a SELECT that locks its rows and skips those locked elsewhere ("" when
        the database has no row locks)."""
        return " FOR UPDATE SKIP LOCKED" if self.skip_locked else ""

    def lock_suffix(self) -> str:
        """What ends a SELECT that locks its rows until the transaction ends ("" when the
        database has no row locks: SQLite's IMMEDIATE transaction holds the whole file)."""
        return " FOR UPDATE" if self.skip_locked else ""

    #: ``admit_held()`` queues at most one job of each key per statement (the caller runs
    #: it again for the keys that may take more).
    admits_one_per_key: bool = False

    def admit_held(
        self, jobs: str, keys: str, among: str, turns: str, held: str, queued: str
    ) -> str | None:
        """One statement that, for the keys ``among`` selects (``k.key``, a condition on
        the key table), counts each key's turns (jobs whose status is in ``turns``)
        against its limit and moves its oldest ``held`` jobs up to the free turns to
        ``queued``, returning their (id, queue, run_at, limit_key); None where the caller
        counts, reads and updates in statements of its own."""
        return None

    def admit_held_taking(
        self,
        jobs: str,
        keys: str,
        among: str,
        turns: str,
        held: str,
        assignments: str,
        returning: str,
    ) -> str | None:
        """As ``admit_held()``, with ``assignments`` (the hand-off's: running for the jobs
        its worker takes, queued for the others) as the SET clause, returning the columns
        ``returning``; its parameters are the assignments', then ``among``'s. None where
        the hand-off takes the jobs in a statement of its own (jobs/handoff.py)."""
        return None

    def delete_chunk(self, table: str, where: str, order: str, most: int) -> str:
        """DELETE the first ``most`` rows of ``table`` matching ``where`` by ``order``,
        passing over rows another transaction holds where the database can."""
        return (
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {where} "
            f"ORDER BY {order} LIMIT {most}{self.skip_locked_suffix()})"
        )

    def update_from_arrays(
        self,
        table: str,
        assignments: str,
        columns: list[tuple[str, str]],
        where: str,
        constants: tuple[tuple[str, str], ...] = (),
        key: tuple[str, str] | None = None,
    ) -> str:
        """UPDATE ``table`` joined to a table ``v`` of one array parameter per column (name,
        element type), one row per index (``array_parameters`` only). ``constants`` (name,
        type): more columns of ``v``, one parameter each, the same in every row, which the
        planner cannot see through: ``where`` compares the table with them rather than with
        constants, which a partial index or stale statistics could then pick the plan by.
        ``key`` (column, element type): the table's rows are also restricted to that
        column being in one more array parameter (the keys, again). Parameters: the
        assignments', the constants', the arrays', the keys."""
        raise NotImplementedError(f"{self.vendor} has no array parameters")

    def id_in_subquery(self, column: str, select: str) -> str:
        """``column`` is among the ids ``select`` returns."""
        return f"{column} IN ({select})"

    def queue_lock(self, space: int, key: int) -> tuple[str, list[int]] | None:
        """A statement taking a lock on (``space``, ``key``) until the transaction ends, or
        None where one writer at a time is the database's own rule."""
        return None

    def queue_unlock(self, space: int, key: int) -> tuple[str, list[int]] | None:
        """A statement freeing the lock ``queue_lock`` took, where it outlives the
        transaction (a session's lock), to run once the transaction ends; else None."""
        return None

    @abstractmethod
    def json_append_text(self, column: str, text: str) -> str:
        """``column`` (quoted) with the text value ``text`` (SQL) added at the end of its
        JSON array."""

    @abstractmethod
    def json_array_of(self, sql: str) -> str:
        """A JSON array holding the value of ``sql``."""

    @abstractmethod
    def json_append(self, column: str, item: str) -> str:
        """``column`` (quoted) with the JSON value ``item`` (SQL giving JSON text) added
        at the end of its array."""

    @abstractmethod
    def json_remove_last(self, column: str) -> str:
        """``column`` (quoted) without the last element of its JSON array."""

    @abstractmethod
    def random_token(self, most: int) -> str:
        """A whole number from 1 to ``most``, drawn for each row, for statements that write
        rows Python never sees (``%`` doubled: they run with parameters)."""

    @abstractmethod
    def event_type_matches(self, patterns: str) -> str:
        """True when the event type (the statement's next parameter) matches one of the
        patterns in the JSON array column ``patterns``, or the array is empty. Patterns
        hold ``*`` as their only wildcard; matching is case-sensitive."""


def insert_values(table: str, columns: list[str], rows: int) -> str:
    """``INSERT INTO table (columns) VALUES`` with placeholders for ``rows`` rows."""
    row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * rows)}"
