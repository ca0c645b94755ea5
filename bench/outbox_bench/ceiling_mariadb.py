"""The raw-SQL ceiling on MariaDB: the PostgreSQL one (``ceiling.py``) written for MySQLdb.

The same six-column row (``id``, ``queue``, ``status``, ``priority``, ``run_at``,
``lease_until``), the same claim order and batches of 50, the same spawned processes of
threads on connections of their own and the same clock (``ceiling.run_workers``). What
MariaDB spells differently, it spells as django_outbox's MariaDB dialect does:

- no partial index: the claim index is led by ``status`` instead (as migration 0010 does
  for the job table), so a claim reads only queued rows, in claim order;
- no ``UPDATE … RETURNING``: a claim is a short READ COMMITTED transaction, the ``SELECT …
  FOR UPDATE SKIP LOCKED`` of up to 50 ids, then one UPDATE of those ids, then COMMIT;
- the completion is one UPDATE of the batch's ids, committed on its own.

Statements are counted as django_outbox's worker counts its own: the SELECTs and UPDATEs
sent, not the COMMITs that end them. There is no WAL figure: MariaDB counts its redo log
for the whole server only.

The table is created for the run, in the database Django is configured with, and dropped
after it.
"""

from __future__ import annotations

import time
from typing import Any

from outbox_bench.ceiling import BATCH, TABLE, CeilingFigures, run_workers

CREATE = f"""CREATE TABLE {TABLE} (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    queue varchar(100) NOT NULL,
    status varchar(10) NOT NULL DEFAULT 'queued',
    priority smallint NOT NULL DEFAULT 0,
    run_at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    lease_until datetime(6) NULL,
    INDEX {TABLE}_claim (status, queue, priority DESC, run_at, id)
) ENGINE=InnoDB"""

LOCK = (
    f"SELECT id FROM {TABLE} WHERE status = 'queued' AND queue = 'default' "
    f"AND run_at <= NOW(6) ORDER BY priority DESC, run_at, id LIMIT {BATCH} "
    "FOR UPDATE SKIP LOCKED"
)
MARK = (
    f"UPDATE {TABLE} SET status = 'running', lease_until = NOW(6) + INTERVAL 30 SECOND "
    "WHERE id IN %s"
)
COMPLETE = f"UPDATE {TABLE} SET status = 'succeeded', lease_until = NULL WHERE id IN %s"

HOW = (
    "SELECT … FOR UPDATE SKIP LOCKED, then one UPDATE of the ids, in one READ COMMITTED "
    "transaction (MySQLdb)"
)

#: InnoDB's "deadlock found": the claim's transaction was rolled back; claim again.
DEADLOCK = 1213


def drain(jobs: int, processes: int, threads: int) -> CeilingFigures:
    """Fill the table with ``jobs`` rows, then time ``processes`` x ``threads`` workers
    emptying it."""
    from outbox_bench.mariadb import connect, plain_params, wait_for_purge

    params = plain_params()
    setup = connect(params, autocommit=True)
    try:
        cursor = setup.cursor()
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cursor.execute(CREATE)
        # MySQLdb sends these as multi-row INSERTs (MariaDB has no generate_series).
        cursor.executemany(f"INSERT INTO {TABLE} (queue) VALUES (%s)", [("default",)] * jobs)
        cursor.execute(f"ANALYZE TABLE {TABLE}")
        cursor.fetchall()
        wait_for_purge(jobs)  # as the product's drain waits: no purge of earlier runs beside it
        seconds, statements = run_workers(_work, params, processes, threads)
        cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE status = 'succeeded'")
        row = cursor.fetchone()
        succeeded = int(row[0]) if row else 0
        cursor.execute(f"DROP TABLE {TABLE}")
    finally:
        setup.close()
    return CeilingFigures(
        jobs=jobs,
        processes=processes,
        threads=threads,
        seconds=seconds,
        per_s=jobs / seconds,
        statements_per_job=statements / jobs,
        succeeded=succeeded,
        wal_bytes_per_job=None,
        claim=HOW,
    )


def _work(
    params: dict[str, Any], slot: int, statements: Any, firsts: Any, lasts: Any, ready: Any
) -> None:
    """Claim a batch, "run" it (the jobs are no-ops), complete it; until nothing is left."""
    from outbox_bench.mariadb import connect

    sent = 0
    db = connect(params, autocommit=False)
    try:
        cursor = db.cursor()
        ready.wait()
        first = last = time.time()
        while True:
            ids, tried = _claim(db, cursor)
            sent += tried
            if not ids:
                break
            last = time.time()  # its jobs have run: each one's finish, as django_outbox's
            cursor.execute(COMPLETE, [ids])
            db.commit()
            sent += 1
    finally:
        db.close()
    firsts[slot], lasts[slot] = first, last
    with statements.get_lock():
        statements.value += sent


def _claim(db: Any, cursor: Any) -> tuple[tuple[int, ...], int]:
    """One claim's transaction: the ids it took, and the statements it sent (a deadlock
    rolls it back, and it claims again)."""
    import MySQLdb

    sent = 0
    while True:
        try:
            cursor.execute(LOCK)
            sent += 1
            ids = tuple(row[0] for row in cursor.fetchall())
            if ids:
                cursor.execute(MARK, [ids])
                sent += 1
            db.commit()
            return ids, sent
        except MySQLdb.OperationalError as exc:
            db.rollback()
            if exc.args[0] != DEADLOCK:
                raise
