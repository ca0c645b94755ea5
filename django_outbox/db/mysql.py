"""MariaDB 10.6+ and MySQL 8.0.11+: InnoDB row locks with ``SKIP LOCKED``, JSON read and
written through the JSON functions, and no ``UPDATE … RETURNING``.

Statements that read back what they wrote do it in a short transaction instead: lock the
rows, write them, read them (see ``jobs/returning.py``). MySQL has no ``INSERT …
RETURNING`` either: ``MySQL.inserted_ids``.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from django_outbox.db.base import Dialect, insert_values
from django_outbox.db.names import named

#: MySQL's error number for a duplicate key (ER_DUP_ENTRY).
DUPLICATE_KEY = 1062
#: ER_LOCK_DEADLOCK: InnoDB undid the transaction to break a deadlock.
DEADLOCK = 1213


class MariaDB(Dialect):
    vendor = "mysql"
    array_parameters = False
    skip_locked = True
    update_returning = False
    loose_index_scan = True
    listen_notify = False
    server_clock = True
    active_dedup_column = "dedup_active"
    failed_finished_column = "failed_at"
    keyed_status_column = "limit_status"
    finished_status_column = "finished_status"

    def deadlock(self, exc: BaseException) -> bool:
        return bool(exc.args) and exc.args[0] == DEADLOCK

    def row_estimate(self, table: str) -> tuple[str, list[str]] | None:
        return (
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            [table],
        )

    def real(self, sql: str) -> str:
        # A DOUBLE literal makes the product a DOUBLE (parameters arrive as DECIMALs).
        return f"({sql} * 1e0)"

    def epoch_seconds(self) -> str:
        # Microseconds since the epoch in UTC whatever the session's time zone
        # (UNIX_TIMESTAMP(NOW(6)) would go through it, ambiguous once a year).
        return "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) / 1e6)"

    def upsert(
        self,
        table: str,
        columns: list[str],
        values: list[str],
        conflict: list[str],
        updates: list[tuple[str, str]],
    ) -> str:
        # ON DUPLICATE KEY UPDATE assigns left to right: an assignment that reads a column
        # set before it would see the new value. The callers' updates read only columns
        # they set later, or none.
        assignments = ", ".join(f"{name} = {sql}" for name, sql in updates)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)}) "
            f"ON DUPLICATE KEY UPDATE {assignments}"
        )

    def upsert_adding(self, table: str, columns: list[str], rows: int, added: list[str]) -> str:
        sums = ", ".join(f"{name} = {name} + VALUES({name})" for name in added)
        return f"{insert_values(table, columns, rows)} ON DUPLICATE KEY UPDATE {sums}"

    def insert_unless_conflicting(
        self, connection: Any, name: str, table: str, columns: str, values: list[Any]
    ) -> int | None:
        # No ON CONFLICT DO NOTHING (INSERT IGNORE would also turn a value too long into a
        # warning): insert under a savepoint and take a duplicate key for "held". InnoDB
        # makes an insert meeting a key another transaction has just written wait for it,
        # as PostgreSQL does.
        sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(values))})"
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(named(name, sql), values)
                return int(cursor.lastrowid)
        except IntegrityError as exc:
            if exc.args and exc.args[0] == DUPLICATE_KEY:
                return None
            raise

    def claim_index(self, queue_count: int) -> str:
        # InnoDB locks every row a locking read reads that matches what the index holds.
        # Sorting the queued rows of several queues would read (and lock) them all, and
        # leave other workers nothing to claim: read them in claim order instead, with the
        # queue and backend in the index to pass over other queues' rows unlocked
        # (migration 0010). One queue: its own rows, in claim order.
        name = "outbox_job_claim" if queue_count == 1 else "outbox_job_claim_order"
        return f" FORCE INDEX ({name})"

    def concat(self, *sql: str) -> str:
        return f"CONCAT({', '.join(sql)})"

    def deep_recursion(self, sql: str) -> str:
        # MariaDB stops a recursive CTE after 1,000 rounds by default (max_recursive_iterations).
        return f"SET STATEMENT max_recursive_iterations = {RECURSION_MOST} FOR {sql}"

    def text(self, sql: str) -> str:
        return f"CAST({sql} AS CHAR)"

    def delete_chunk(self, table: str, where: str, order: str, most: int) -> str:
        # MySQL allows neither LIMIT in an IN subquery nor the deleted table in one; a
        # single-table DELETE takes ORDER BY and LIMIT itself.
        return f"DELETE FROM {table} WHERE {where} ORDER BY {order} LIMIT {most}"

    def id_in_subquery(self, column: str, select: str) -> str:
        raise NotImplementedError("MySQL has no LIMIT in IN subqueries; lock, then update")

    def queue_lock(self, space: int, key: int) -> tuple[str, list[int]] | None:
        # A named lock is the session's, not the transaction's: queue_unlock() frees it.
        # GET_LOCK returns 0 after the timeout (a minute): the claim then counts unlocked,
        # which queue_locked() refuses.
        return "SELECT GET_LOCK(CONCAT('outbox:', %s, ':', %s), 60)", [space, key]

    def queue_unlock(self, space: int, key: int) -> tuple[str, list[int]] | None:
        return "SELECT RELEASE_LOCK(CONCAT('outbox:', %s, ':', %s))", [space, key]

    def json_append_text(self, column: str, text: str) -> str:
        return f"JSON_ARRAY_APPEND({column}, '$', {text})"

    def json_array_of(self, sql: str) -> str:
        return f"JSON_ARRAY({sql})"

    def json_append(self, column: str, item: str) -> str:
        # JSON_EXTRACT(…, '$') makes the text a JSON value, appended as one (not a string).
        return f"JSON_ARRAY_APPEND({column}, '$', JSON_EXTRACT({item}, '$'))"

    def json_remove_last(self, column: str) -> str:
        # '$[last]' is MariaDB 10.9+: count instead; an empty array stays as it is.
        return (
            f"IF(JSON_LENGTH({column}) = 0, {column}, "
            f"JSON_REMOVE({column}, CONCAT('$[', JSON_LENGTH({column}) - 1, ']')))"
        )

    def random_token(self, most: int) -> str:
        return f"CAST(FLOOR(1 + RAND() * {most}) AS SIGNED)"

    def event_type_matches(self, patterns: str) -> str:
        # LIKE over the binary forms (case-sensitive whatever the collation), with * turned
        # into % and LIKE's own wildcards escaped with !.
        pattern = (
            "REPLACE(REPLACE(REPLACE(REPLACE(p.pattern, '!', '!!'), '%%', '!%%'), "
            "'_', '!_'), '*', '%%')"
        )
        return (
            f"(JSON_LENGTH({patterns}) = 0 OR EXISTS (SELECT 1 FROM JSON_TABLE({patterns}, "
            "'$[*]' COLUMNS (pattern VARCHAR(255) PATH '$')) AS p "
            f"WHERE CAST(%s AS BINARY) LIKE CAST({pattern} AS BINARY) ESCAPE '!'))"
        )


#: The deepest a workflow's recursive read may go (MariaDB's and MySQL's default: 1,000).
RECURSION_MOST = 4_294_967_295


class MySQL(MariaDB):
    """MySQL: what MariaDB does, but for the ids of a multi-row insert."""

    insert_returning = False

    def deep_recursion(self, sql: str) -> str:
        # MySQL's own limit, cte_max_recursion_depth, set for the statement by a hint after
        # its last SELECT (the one reading the recursive table).
        head, _, tail = sql.rpartition(" SELECT ")
        return f"{head} SELECT /*+ SET_VAR(cte_max_recursion_depth = {RECURSION_MOST}) */ {tail}"

    def inserted_ids(self, cursor: Any, count: int) -> list[int]:
        # InnoDB takes the ids of a multi-row INSERT … VALUES (a "simple insert": its
        # number of rows is known up front) in one go, whatever innodb_autoinc_lock_mode
        # says: consecutive, auto_increment_increment apart, from LAST_INSERT_ID(), which is
        # the first (an INSERT … SELECT may leave gaps: nothing here relies on its ids).
        first = int(cursor.lastrowid)
        cursor.execute("SELECT @@auto_increment_increment")
        step = int(cursor.fetchone()[0])
        return [first + n * step for n in range(count)]
