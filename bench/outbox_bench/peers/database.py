"""The peers that keep their jobs in the database: in a schema of their own on PostgreSQL,
a database of their own on MariaDB (``outbox_bench.mariadb``), set up, filled and watched
the same way; and this process's PostgreSQL observer, which the raw-SQL ceiling's idle
figure uses too."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from django.db import connection

from outbox_bench.peers.base import (
    IDLE_SETTLE_SECONDS,
    PG_ENV,
    Children,
    Clocked,
    Peer,
    PeerDrain,
    PeerError,
    PeerIdle,
    PeerLatency,
    clock_drain,
    drained,
    latency_figures,
    wait_for,
)


class ServerObserver(Protocol):
    """A connection of this process's to the peer's database (``Observer`` on PostgreSQL,
    ``mariadb.Observer`` on MariaDB), counting its own statements."""

    statements: int

    def rows(self, sql: str) -> list[tuple[Any, ...]]: ...
    def value(self, sql: str) -> int: ...
    def number(self, sql: str) -> float: ...
    def execute(self, sql: str) -> None: ...
    def commits(self) -> int | None: ...
    def wal(self) -> int | None: ...


class DatabasePeer(Peer):
    """A peer that keeps its jobs in the database (PostgreSQL, or MariaDB where it runs
    there): it is set up, filled and watched the same way; subclasses say where its tables
    are and how its workers start."""

    #: The schema (on MariaDB, the database) its tables go in, and the module of its child
    #: steps (setup, enqueue N, enqueue-paced N GAP).
    schema = ""
    steps = ""
    #: Counts of its finished and its started jobs; each started job's pickup in ms; and
    #: the statement that empties its jobs.
    done_sql = ""
    started_sql = ""
    pickups_sql = ""
    clear_sql = ""
    #: Seconds from its first job's start to its last one's finish, as its own tables record
    #: them (as django_outbox's drain is timed; ``window_seconds``).
    window_sql = ""
    #: What the window is read from, for the figures; empty: polled, first job done to last.
    window = ""

    def missing(self, measure: str = "drain") -> str | None:
        why = super().missing(measure)
        if why is None and measure == "idle" and connection.vendor == "mysql":
            # Its idle cost is the transactions the server counts for its database.
            return "MariaDB counts transactions for the whole server only, not per database"
        return why

    def place(self) -> AbstractContextManager[ServerObserver]:
        """Its schema (PostgreSQL) or database (MariaDB) for the run, dropped after it;
        yields an observer."""
        if connection.vendor == "mysql":
            from outbox_bench import mariadb

            return mariadb.own_database(self.mariadb_database())
        return pg_schema(self.schema)

    def mariadb_database(self) -> str:
        """Its database on MariaDB, named after Django's: two runs at once on one server
        (CI's two rows) each have their own, as each has its own on PostgreSQL (a schema
        in its own test database)."""
        return f"{connection.settings_dict['NAME']}_{self.schema}"[:64]

    def children(self) -> Children:
        if connection.vendor == "mysql":
            from outbox_bench import mariadb

            database = mariadb.child_database(self.mariadb_database())
            return Children(self.steps, {mariadb.MYSQL_ENV: json.dumps(database)})
        return Children(self.steps, {PG_ENV: pg_conninfo(self.schema)})

    def window_seconds(self, observer: ServerObserver) -> float:
        """The drain's seconds, read from its own record (``window_sql``)."""
        return observer.number(self.window_sql)

    def pickups_ms(self, observer: ServerObserver) -> list[float]:
        """Each started job's wait from its enqueue to its start (``pickups_sql``)."""
        return [float(row[0]) for row in observer.rows(self.pickups_sql)]

    def start_workers(self, children: Children, processes: int, threads: int, drain: bool) -> None:
        """Start workers for a ``processes x threads`` shape; ``drain``: ones that leave
        once no job is left."""
        raise NotImplementedError

    def drain(self, jobs: int, processes: int, threads: int) -> PeerDrain:
        with self.place() as observer, self.children() as children:
            children.run("setup")
            wal_before = observer.wal()
            enqueued = children.run("enqueue", str(jobs))
            commits_before, own_before = observer.commits(), observer.statements
            self.start_workers(children, processes, threads, drain=True)
            if self.window:
                timeout = 120 + jobs / 20  # far slower than any peer: a stuck run
                done = wait_for(lambda: observer.value(self.done_sql), jobs, children, timeout)
                clocked = Clocked(max(self.window_seconds(observer), 1e-6), done, done)
            else:
                clocked = clock_drain(lambda: observer.value(self.done_sql), jobs, children)
            children.wait(60)  # they leave once the queue is empty
            commits_after, own_after = observer.commits(), observer.statements
            commits = _grown(commits_before, commits_after, less=own_after - own_before)
            wal = _grown(wal_before, observer.wal())
        return drained(self, jobs, processes, threads, enqueued, clocked,
                       transactions=commits, wal=wal,
                       timed=self.window or None)  # fmt: skip

    def latency(self, jobs: int, gap: float) -> PeerLatency:
        with self.place() as observer, self.children() as children:
            children.run("setup")
            self.start_workers(children, 1, 1, drain=False)
            children.run("enqueue", "1")  # once it has run, the worker is up and idle
            # Finished, not only started: a worker whose job vanished mid-run may fail.
            wait_for(lambda: observer.value(self.done_sql), 1, children, 60)
            observer.execute(self.clear_sql)
            children.run("enqueue-paced", str(jobs), str(gap))
            wait_for(lambda: observer.value(self.started_sql), jobs, children, 60)
            waits = self.pickups_ms(observer)
        return latency_figures(self.name, waits)

    def idle(self, workers: int, seconds: float, settle: float | None = None) -> PeerIdle:
        with self.place() as observer, self.children() as children:
            children.run("setup")
            self.start_workers(children, workers, 1, drain=False)
            time.sleep(IDLE_SETTLE_SECONDS if settle is None else settle)
            before, own = observer.commits(), observer.statements
            time.sleep(seconds)
            commits = _grown(before, observer.commits(), less=observer.statements - own)
        if commits is None:
            raise PeerError(f"{self.name}: {connection.vendor} does not count its transactions")
        return PeerIdle(self.name, workers, seconds, commits / workers / seconds, "transactions")


def _grown(before: int | None, after: int | None, less: int = 0) -> int | None:
    """How much a server's counter grew, less this process's own share (None: the server
    does not count it)."""
    if before is None or after is None:
        return None
    return max(0, after - before - less)


def pg_conninfo(schema: str) -> str:
    """A connection string to Django's database with ``schema`` first on the search path."""
    from psycopg.conninfo import make_conninfo

    from django_outbox.wake.postgres import plain_params

    params = plain_params(connection.alias)
    options = f"{params.pop('options', '') or ''} -c search_path={schema}".strip()
    return make_conninfo("", **params, options=options)


class Observer:
    """A connection of this process's to PostgreSQL that counts its own statements, so
    they can be taken out of what the server counted."""

    def __init__(self) -> None:
        import psycopg

        from django_outbox.wake.postgres import plain_params

        self.db = psycopg.connect(**plain_params(connection.alias), autocommit=True)
        self.statements = 0

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        self.statements += 1
        return list(self.db.execute(sql).fetchall())

    def value(self, sql: str) -> int:
        self.statements += 1
        row = self.db.execute(sql).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def number(self, sql: str) -> float:
        self.statements += 1
        row = self.db.execute(sql).fetchone()
        if not row or row[0] is None:
            raise PeerError(f"no figure from {sql!r}")
        return float(row[0])

    def execute(self, sql: str) -> None:
        self.statements += 1
        self.db.execute(sql)

    def commits(self) -> int:
        self.execute("SELECT pg_stat_clear_snapshot()")
        return self.value(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )

    def wal(self) -> int:
        return self.value("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")

    def close(self) -> None:
        self.db.close()


@contextmanager
def pg_schema(name: str) -> Iterator[Observer]:
    """A schema of the peer's own for the run, dropped after it; yields an observer."""
    observer = Observer()
    try:
        observer.db.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        observer.db.execute(f"CREATE SCHEMA {name}")
        # As the peer's processes see it: its triggers name their tables unqualified.
        observer.db.execute(f"SET search_path TO {name}")
        yield observer
    finally:
        observer.db.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        observer.close()
