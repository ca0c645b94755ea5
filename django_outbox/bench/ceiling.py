"""The raw-SQL ceiling: the fastest a job queue on this PostgreSQL can drain, for comparison.

Plain psycopg, no Django: one jobs table with a partial index on queued rows, and workers
that claim 50 at a time with ``UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP
LOCKED LIMIT 50)) RETURNING`` and complete each batch with one UPDATE. Nothing else: no
task lookup, no results, no leases renewed, no signals. What django_outbox adds on top is
the difference between this and ``outbox_bench drain`` on the same database.

The table is created for the run, in the database Django is configured with, and dropped
after it.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection

TABLE = "outbox_bench_ceiling"
BATCH = 50

_CREATE = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'queued',
    run_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL DEFAULT '{{}}',
    attempts integer NOT NULL DEFAULT 0,
    lease_until timestamptz
);
CREATE INDEX {TABLE}_claim ON {TABLE} (queue, run_at, id) WHERE status = 'queued';
"""

_CLAIM = f"""
UPDATE {TABLE} SET status = 'running', attempts = attempts + 1,
    lease_until = now() + interval '30 seconds'
WHERE id = ANY(ARRAY(
    SELECT id FROM {TABLE} WHERE status = 'queued' AND queue = 'default' AND run_at <= now()
    ORDER BY run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED
))
RETURNING id, payload
"""

_COMPLETE = f"UPDATE {TABLE} SET status = 'succeeded', lease_until = NULL WHERE id = ANY(%s)"


@dataclass(frozen=True, slots=True)
class CeilingFigures:
    jobs: int
    processes: int
    threads: int
    seconds: float
    per_s: float
    statements_per_job: float
    succeeded: int
    #: WAL written from the insert of the jobs to the end of the drain, per job.
    wal_bytes_per_job: float


def available() -> bool:
    return connection.vendor == "postgresql"


def drain(jobs: int, processes: int, threads: int) -> CeilingFigures:
    """Fill the table with ``jobs`` rows, then time ``processes`` x ``threads`` workers
    emptying it."""
    if not available():
        raise RuntimeError("the raw-SQL ceiling is measured on PostgreSQL only")
    from django_outbox.wake.postgres import plain_params

    params = plain_params(connection.alias)  # the same server, user and options as Django's
    import psycopg

    with psycopg.connect(**params, autocommit=True) as setup:
        setup.execute(_CREATE)
        wal_before = _wal(setup)
        setup.execute(
            f"INSERT INTO {TABLE} (queue) SELECT 'default' FROM generate_series(1, %s)", [jobs]
        )
        setup.execute(f"VACUUM ANALYZE {TABLE}")
    # spawn, not fork: the caller may have threads (wake-up senders), which fork copies badly;
    # the children need no Django, only this module and psycopg. Timing starts once they are
    # all up, so their start-up is not counted against the ceiling.
    context = multiprocessing.get_context("spawn")
    statements: Any = context.Value("q", 0)
    ready: Any = context.Barrier(processes + 1)
    children = [
        context.Process(target=_process, args=(params, threads, statements, ready))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    ready.wait()
    started = time.perf_counter()
    for child in children:
        child.join()
    seconds = time.perf_counter() - started
    with psycopg.connect(**params, autocommit=True) as done:
        row = done.execute(f"SELECT count(*) FROM {TABLE} WHERE status = 'succeeded'").fetchone()
        succeeded = int(row[0]) if row else 0
        wal_after = _wal(done)
        done.execute(f"DROP TABLE {TABLE}")
    return CeilingFigures(
        jobs=jobs,
        processes=processes,
        threads=threads,
        seconds=seconds,
        per_s=jobs / seconds,
        statements_per_job=statements.value / jobs,
        succeeded=succeeded,
        wal_bytes_per_job=(wal_after - wal_before) / jobs,
    )


def _wal(db: Any) -> int:
    row = db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0])


def _process(params: dict[str, Any], threads: int, statements: Any, ready: Any) -> None:
    workers = [threading.Thread(target=_work, args=(params, statements)) for _ in range(threads)]
    ready.wait()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _work(params: dict[str, Any], statements: Any) -> None:
    """Claim a batch, "run" it (the jobs are no-ops), complete it; until nothing is left."""
    import psycopg

    sent = 0
    with psycopg.connect(**params, autocommit=True) as db:
        while True:
            claimed = db.execute(_CLAIM).fetchall()
            sent += 1
            if not claimed:
                break
            db.execute(_COMPLETE, [[row[0] for row in claimed]])
            sent += 1
    with statements.get_lock():
        statements.value += sent
