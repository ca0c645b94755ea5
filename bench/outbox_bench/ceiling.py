"""The raw-SQL ceiling: the fastest a job queue on this PostgreSQL can drain, for comparison.

Plain psycopg, no Django, and as lean as a correct queue can be. A job is a row of six
columns: ``id``, ``queue``, ``status``, ``priority`` and ``run_at`` (the claim order is
django_outbox's: priority, then due time, then id) and ``lease_until`` (a claimed job is
leased, so a dead worker's jobs can be claimed again). One partial index holds the queued
rows in claim order. Workers claim 50 at a time with ``UPDATE … WHERE id IN (SELECT …
ORDER BY priority DESC, run_at, id LIMIT 50 FOR UPDATE SKIP LOCKED) RETURNING id`` and
complete each batch with one UPDATE. Nothing else: no payload, no attempt count, no task
lookup, no results, no leases renewed, no signals. What django_outbox does on top is the
difference between this and ``outbox_bench drain`` on the same database.

A drain is timed as django_outbox's is, from its jobs' own record: from the first claim
to the end of the last batch run (its completion statement, like django_outbox's last
one, is not counted). Each thread connects before the clock starts.

For pickup latency and idle cost, its workers LISTEN and an enqueue is an INSERT and a
NOTIFY in one transaction; an idle worker claims once every ``POLL_SECONDS`` in case a
notification was missed.

The table is created for the run, in the database Django is configured with, and dropped
after it.

On MariaDB the drain is ``ceiling_mariadb``'s, written the same way with MySQLdb; this
module keeps what the two share (the figures, the spawned workers and their clock). The
latency and idle ceilings wait on LISTEN/NOTIFY, which only PostgreSQL has.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from outbox_bench.peers.base import PeerError, PeerIdle, PeerLatency, latency_figures

TABLE = "outbox_bench_ceiling"
BATCH = 50
#: An idle ceiling worker's safety-net poll (Procrastinate's default, too).
POLL_SECONDS = 5.0

_CREATE = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    status text NOT NULL DEFAULT 'queued',
    priority smallint NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz
);
CREATE INDEX {TABLE}_claim ON {TABLE} (queue, priority DESC, run_at, id) WHERE status = 'queued';
"""

_CLAIM = f"""
UPDATE {TABLE} SET status = 'running', lease_until = now() + interval '30 seconds'
WHERE id IN (
    SELECT id FROM {TABLE} WHERE status = 'queued' AND queue = 'default' AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED
)
RETURNING id
"""

# Latency and idle runs also stamp when a job was enqueued and started (the drain does not,
# so its WAL is the bare minimum).
_CREATE_TIMED = f"""{_CREATE}
ALTER TABLE {TABLE} ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ADD COLUMN started_at timestamptz;
"""
_CLAIM_TIMED = _CLAIM.replace(
    "SET status = 'running',", "SET status = 'running', started_at = clock_timestamp(),"
)

_COMPLETE = f"UPDATE {TABLE} SET status = 'succeeded', lease_until = NULL WHERE id = ANY(%s)"


@dataclass(frozen=True, slots=True)
class CeilingFigures:
    jobs: int
    processes: int
    threads: int
    #: From the first claim to the end of the last batch run (django_outbox's drain is timed
    #: from its first job's start to its last one's finish the same way).
    seconds: float
    per_s: float
    statements_per_job: float
    succeeded: int
    #: PostgreSQL: WAL written from the insert of the jobs to the end of the drain, per job
    #: (MariaDB counts its redo log for the whole server only: None there).
    wal_bytes_per_job: float | None
    batch: int = BATCH
    #: How a batch is claimed, for the table.
    claim: str = "one UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING id"


#: The databases with a drain ceiling: PostgreSQL's here, MariaDB's in ``ceiling_mariadb``.
DRAIN_VENDORS = {"postgresql": "PostgreSQL", "mysql": "MariaDB"}


def available() -> bool:
    """Whether the drain's ceiling runs on this database."""
    return connection.vendor in DRAIN_VENDORS


def unavailable() -> str:
    """Why the drain's ceiling is not measured here."""
    return f"{' and '.join(DRAIN_VENDORS.values())} only, not {connection.vendor}"


def listens() -> bool:
    """Whether the latency and idle ceilings run here: they wait on LISTEN/NOTIFY."""
    return connection.vendor == "postgresql"


def drain(jobs: int, processes: int, threads: int) -> CeilingFigures:
    """Fill the table with ``jobs`` rows, then time ``processes`` x ``threads`` workers
    emptying it."""
    if connection.vendor == "mysql":
        from outbox_bench import ceiling_mariadb

        return ceiling_mariadb.drain(jobs, processes, threads)
    if not available():
        raise RuntimeError(f"the raw-SQL ceiling is measured on {unavailable()}")
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
    seconds, statements = run_workers(_work, params, processes, threads)
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
        statements_per_job=statements / jobs,
        succeeded=succeeded,
        wal_bytes_per_job=(wal_after - wal_before) / jobs,
    )


#: A ceiling thread: ``work(params, slot, statements, firsts, lasts, ready)`` connects,
#: waits on ``ready``, drains, then notes its first claim's and last batch's times in
#: ``firsts[slot]`` and ``lasts[slot]`` and adds the statements it sent to ``statements``.
Work = Callable[[dict[str, Any], int, Any, Any, Any, Any], None]


def run_workers(
    work: Work, params: dict[str, Any], processes: int, threads: int
) -> tuple[float, int]:
    """``processes`` spawned processes of ``threads`` threads running ``work`` (a function
    of a module, which the children import); returns the seconds from the first claim to
    the end of the last batch run, and the statements sent.

    Spawned, not forked: the caller may have threads (wake-up senders), which fork copies
    badly; the children need no Django, only the module of ``work`` and its driver. Every
    thread connects, then waits for the others."""
    context = multiprocessing.get_context("spawn")
    statements: Any = context.Value("q", 0)
    firsts: Any = context.Array("d", processes * threads)
    lasts: Any = context.Array("d", processes * threads)
    ready: Any = context.Barrier(processes * threads)
    children = [
        context.Process(
            target=_process,
            args=(work, params, threads, number, statements, firsts, lasts, ready),
        )
        for number in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join()
    if any(child.exitcode for child in children):
        raise RuntimeError("a raw-SQL ceiling process failed (its traceback is above)")
    return max(lasts[:]) - min(firsts[:]), int(statements.value)


def _wal(db: Any) -> int:
    row = db.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0])


def _process(
    work: Work,
    params: dict[str, Any],
    threads: int,
    number: int,
    statements: Any,
    firsts: Any,
    lasts: Any,
    ready: Any,
) -> None:
    workers = [
        threading.Thread(
            target=work,
            args=(params, number * threads + slot, statements, firsts, lasts, ready),
        )
        for slot in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _work(
    params: dict[str, Any], slot: int, statements: Any, firsts: Any, lasts: Any, ready: Any
) -> None:
    """Claim a batch, "run" it (the jobs are no-ops), complete it; until nothing is left."""
    import psycopg

    sent = 0
    with psycopg.connect(**params, autocommit=True) as db:
        ready.wait()
        first = last = time.time()
        while True:
            claimed = db.execute(_CLAIM).fetchall()
            sent += 1
            if not claimed:
                break
            last = time.time()  # its jobs have run: each one's finish, as django_outbox's
            db.execute(_COMPLETE, [[row[0] for row in claimed]])
            sent += 1
    firsts[slot], lasts[slot] = first, last
    with statements.get_lock():
        statements.value += sent


def latency(jobs: int, gap: float) -> PeerLatency:
    """Pickup latency of one idle, listening worker: enqueue a job every ``gap`` seconds."""
    import psycopg

    params = _params()
    with psycopg.connect(**params, autocommit=True) as db:
        db.execute(_CREATE_TIMED)
        with _Listening(params, 1):
            for _ in range(jobs):
                db.execute(f"INSERT INTO {TABLE} (queue) VALUES ('default'); NOTIFY {TABLE}")
                time.sleep(gap)
            deadline = time.monotonic() + 30
            waiting = f"SELECT count(*) FROM {TABLE} WHERE started_at IS NULL"
            while db.execute(waiting).fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise PeerError("the raw-SQL ceiling: jobs not started within 30 s")
                time.sleep(0.05)
        rows = db.execute(
            f"SELECT extract(epoch FROM started_at - enqueued_at) * 1000 FROM {TABLE} "
            "WHERE started_at IS NOT NULL"
        ).fetchall()
        db.execute(f"DROP TABLE {TABLE}")
    return latency_figures("raw-SQL ceiling", [float(row[0]) for row in rows])


def idle(workers: int, seconds: float, settle: float) -> PeerIdle:
    """Transactions per second per idle, listening worker (PostgreSQL's count)."""
    import psycopg

    from outbox_bench.peers.database import Observer

    params = _params()
    with psycopg.connect(**params, autocommit=True) as db:
        db.execute(_CREATE_TIMED)
    observer = Observer()
    try:
        with _Listening(params, workers):
            time.sleep(settle)
            before, own = observer.commits(), observer.statements
            time.sleep(seconds)
            commits = observer.commits() - before - (observer.statements - own)
        observer.execute(f"DROP TABLE {TABLE}")
    finally:
        observer.close()
    return PeerIdle(
        "raw-SQL ceiling", workers, seconds, commits / workers / seconds, "transactions"
    )


def _params() -> dict[str, Any]:
    if not listens():
        raise RuntimeError("the latency and idle ceilings are measured on PostgreSQL only")
    from django_outbox.wake.postgres import plain_params

    return plain_params(connection.alias)


class _Listening:
    """``workers`` threads that LISTEN, claim and complete until the block ends."""

    def __init__(self, params: dict[str, Any], workers: int) -> None:
        self.params = params
        self.stop = threading.Event()
        self.ready = threading.Barrier(workers + 1)
        self.threads = [threading.Thread(target=self._work) for _ in range(workers)]

    def __enter__(self) -> _Listening:
        for thread in self.threads:
            thread.start()
        self.ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg

        self.stop.set()
        with psycopg.connect(**self.params, autocommit=True) as db:
            db.execute(f"NOTIFY {TABLE}")  # wake them to see the stop
        for thread in self.threads:
            thread.join(POLL_SECONDS + 5)

    def _work(self) -> None:
        import psycopg

        with psycopg.connect(**self.params, autocommit=True) as db:
            db.execute(f"LISTEN {TABLE}")
            self.ready.wait(30)
            while not self.stop.is_set():
                claimed = db.execute(_CLAIM_TIMED).fetchall()
                if claimed:
                    db.execute(_COMPLETE, [[row[0] for row in claimed]])
                    continue
                for _ in db.notifies(timeout=POLL_SECONDS, stop_after=1):
                    pass
