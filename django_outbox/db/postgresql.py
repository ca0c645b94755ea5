"""PostgreSQL."""

from __future__ import annotations

from typing import Any

from django_outbox.db import partitions
from django_outbox.db.base import Dialect


class PostgreSQL(Dialect):
    vendor = "postgresql"
    array_parameters = True
    skip_locked = True
    update_returning = True
    listen_notify = True
    server_clock = True
    pipelines = True  # psycopg 3 on libpq 14 or newer (Batches asks the driver too)

    def deadlock(self, exc: BaseException) -> bool:
        # deadlock_detected, serialization_failure
        return getattr(exc.__cause__, "sqlstate", None) in ("40P01", "40001")

    def partitioned(self, connection: Any, table: str) -> bool:
        return partitions.is_partitioned(connection, table)

    def active_jobs_table(self, alias: str, table: str) -> str:
        if partitions.jobs_partitioned(alias):
            table = partitions.Names(table).active
        return super().active_jobs_table(alias, table)

    def relearn_layout(self, alias: str, exc: BaseException) -> bool:
        return partitions.forget_if_gone(exc)

    def row_estimate(self, table: str) -> tuple[str, list[str]] | None:
        return partitions.row_estimate_sql(), [table]

    def real(self, sql: str) -> str:
        return f"{sql}::float8"

    def epoch_seconds(self) -> str:
        return "EXTRACT(EPOCH FROM statement_timestamp())::float8"

    def update_from_arrays(
        self,
        table: str,
        assignments: str,
        columns: list[tuple[str, str]],
        where: str,
        constants: tuple[tuple[str, str], ...] = (),
        key: tuple[str, str] | None = None,
    ) -> str:
        arrays = ", ".join(f"%s::{element}[]" for _name, element in columns)
        names = ", ".join(name for name, _element in columns)
        rows = f"unnest({arrays}) AS v({names})"
        if constants:
            # The constants as columns of v behind OFFSET 0, which keeps the subquery from
            # being pulled up: compared with them, the table's columns are join clauses,
            # not restrictions. The table then has no restriction a partial index's
            # predicate could match (status = 'running' matched outbox_job_lease, whose
            # dead entries a bitmap scan reads all of until VACUUM), and no selectivity
            # for stale statistics to underestimate (one running row: a nested loop that
            # rescanned v once per row).
            extra = ", ".join(f"%s::{element} AS {name}" for name, element in constants)
            rows = f"(SELECT *, {extra} FROM {rows} OFFSET 0) AS v"
        if key is not None:
            # The keys once more, as the table's one restriction: estimated at one row
            # per key whatever the statistics say, and read by primary key (by one
            # sequential scan only where the table is small enough for that to cost less).
            column, element = key
            where = f"{where} AND {table}.{column} = ANY(%s::{element}[])"
        return f"UPDATE {table} SET {assignments} FROM {rows} WHERE {where}"

    def admit_held(
        self, jobs: str, keys: str, among: str, turns: str, held: str, queued: str
    ) -> str | None:
        # Each key's turns and its oldest held jobs are one index range each, whatever
        # waits behind them; a LATERAL join plans the same for 1 key or 500.
        return (
            f'WITH free AS (SELECT k.key, k."limit" - (SELECT COUNT(*) FROM {jobs} AS t '
            f"WHERE t.limit_key = k.key AND t.status IN ({turns})) AS n FROM {keys} AS k "
            f"WHERE {among} AND k.held_by IS NULL), "
            f"picked AS (SELECT h.id FROM free CROSS JOIN LATERAL (SELECT id FROM {jobs} "
            f"WHERE limit_key = free.key AND status = {held} ORDER BY id "
            "LIMIT GREATEST(free.n, 0)) AS h) "
            f"UPDATE {jobs} SET status = {queued} FROM picked "
            f"WHERE {jobs}.id = picked.id AND {jobs}.status = {held} "
            f"RETURNING {jobs}.id, {jobs}.queue, {jobs}.run_at, {jobs}.limit_key"
        )

    def delete_chunk(self, table: str, where: str, order: str, most: int) -> str:
        # "= ANY(ARRAY(…))": the SELECT runs once. Under "IN (SELECT … LIMIT …)" a plan
        # that rescans the subquery (a nested loop, which statistics taken on an empty
        # table can pick) takes the next rows at each rescan, its own deleted ones being
        # skipped as locked: the DELETE went past its chunk.
        select = (
            f"SELECT id FROM {table} WHERE {where} ORDER BY {order} LIMIT {most}"
            f"{self.skip_locked_suffix()}"
        )
        return f"DELETE FROM {table} WHERE {self.id_in_subquery('id', select)}"

    def id_in_subquery(self, column: str, select: str) -> str:
        # "= ANY(ARRAY(…))" runs the SELECT first, then finds its rows by primary key; with
        # "IN (SELECT …)" the planner may hash-join the whole table instead.
        return f"{column} = ANY(ARRAY({select}))"

    def queue_lock(self, space: int, key: int) -> tuple[str, list[int]] | None:
        return "SELECT pg_advisory_xact_lock(%s, %s)", [space, key]

    def json_append_text(self, column: str, text: str) -> str:
        return f"{column} || jsonb_build_array({text}::text)"

    def json_array_of(self, sql: str) -> str:
        return f"jsonb_build_array({sql})"

    def json_append(self, column: str, item: str) -> str:
        return f"({column} || jsonb_build_array(({item})::jsonb))"

    def json_remove_last(self, column: str) -> str:
        return f"({column} - -1)"

    def random_token(self, most: int) -> str:
        return f"(1 + floor(random() * {most}))::integer"

    def event_type_matches(self, patterns: str) -> str:
        # LIKE with * turned into %, and _ (LIKE's other wildcard) escaped.
        return (
            f"(jsonb_array_length({patterns}) = 0 OR EXISTS (SELECT 1 FROM "
            f"jsonb_array_elements_text({patterns}) AS p(pattern) WHERE %s LIKE "
            "replace(replace(p.pattern, '_', '\\_'), '*', '%%') ESCAPE '\\'))"
        )
