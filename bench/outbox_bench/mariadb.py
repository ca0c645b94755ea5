"""MariaDB (and MySQL) for the benchmarks' plain-driver parts: the raw-SQL ceiling and the
peers, which talk to the server with MySQLdb (mysqlclient, Django's own MySQL driver), not
through Django.

What PostgreSQL's side has in ``django_outbox.wake.postgres.plain_params`` and
``peers.database.Observer``, for MariaDB: the connection keywords Django would use, a
connection of this process's that counts its own statements, and a database of a peer's
own for the run (MariaDB's schemas are databases).

MariaDB counts transactions and redo-log bytes for the whole server only (per database,
only with ``performance_schema`` or ``userstat`` on, which a default server has off), so
an observer here has neither: other work on the same server would be counted with the
benchmark's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

#: Environment of a peer's child processes on MariaDB: their Django ``DATABASES`` entry, as
#: JSON (the peer's own database in ``NAME``).
MYSQL_ENV = "OUTBOX_BENCH_PEER_MYSQL"


def plain_params(using: str = "default") -> dict[str, Any]:
    """``MySQLdb.connect()`` keywords for the database ``using``, as Django builds them,
    less Django's own converters and client flags."""
    params = dict(connections[using].get_connection_params())
    for django_only in ("conv", "client_flag"):
        params.pop(django_only, None)
    return params


def connect(params: dict[str, Any], *, autocommit: bool) -> Any:
    """A MySQLdb connection in READ COMMITTED, the isolation django_outbox asks for."""
    import MySQLdb

    db = MySQLdb.connect(**params, autocommit=autocommit)
    db.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return db


def wait_for_purge(deleted: int, using: str = "default") -> float:
    """Wait until InnoDB's purge has caught up (its history list is empty) after an
    earlier phase deleted up to ``deleted`` rows; the seconds waited. MariaDB's
    counterpart of the ``VACUUM`` a PostgreSQL round starts with: deleted rows are purged
    in the background, and a drain started before that ends shares the server's CPU with
    it. Gives up after a second plus one for each 10,000 rows (purge takes about a
    quarter of that here; other work on the server can keep the list from emptying) and
    says so on stderr."""
    timeout = 1.0 + deleted / 10_000
    started = time.monotonic()
    with connections[using].cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT `count` FROM information_schema.INNODB_METRICS"
                " WHERE name = 'trx_rseg_history_len'"
            )
            row = cursor.fetchone()
            waited = time.monotonic() - started
            if row is None or int(row[0]) == 0:
                return waited
            if waited > timeout:
                print(
                    f"InnoDB's purge still has {row[0]} transactions to go after "
                    f"{timeout:.0f} s: measuring anyway",
                    file=sys.stderr,
                )
                return waited
            time.sleep(0.5)


def child_database(database: str, using: str = "default") -> dict[str, Any]:
    """A Django ``DATABASES`` entry for a peer's processes: this server and user, the
    database ``database``."""
    settings = connections[using].settings_dict
    return {
        "ENGINE": "django.db.backends.mysql",
        "NAME": database,
        **{key: settings[key] for key in ("USER", "PASSWORD", "HOST", "PORT")},
        "OPTIONS": dict(settings.get("OPTIONS", {})),
    }


class Observer:
    """This process's connection to MariaDB, counting its own statements (the interface of
    ``peers.database.Observer``; no transaction or WAL counts: see the module's docstring)."""

    def __init__(self, database: str | None = None) -> None:
        params = plain_params()
        params.pop("database", None)
        if database is not None:
            params["database"] = database
        self.db = connect(params, autocommit=True)
        self.statements = 0

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        self.statements += 1
        cursor = self.db.cursor()
        cursor.execute(sql)
        return list(cursor.fetchall())

    def value(self, sql: str) -> int:
        rows = self.rows(sql)
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    def number(self, sql: str) -> float:
        from outbox_bench.peers.base import PeerError

        rows = self.rows(sql)
        if not rows or rows[0][0] is None:
            raise PeerError(f"no figure from {sql!r}")
        return float(rows[0][0])

    def execute(self, sql: str) -> None:
        self.rows(sql)

    def commits(self) -> int | None:
        return None

    def wal(self) -> int | None:
        return None

    def close(self) -> None:
        self.db.close()


@contextmanager
def own_database(name: str) -> Iterator[Observer]:
    """A database of the peer's own for the run, dropped after it; yields an observer
    connected to it."""
    setup = Observer()
    try:
        setup.execute(f"DROP DATABASE IF EXISTS {name}")
        setup.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        observer = Observer(name)
        try:
            yield observer
        finally:
            observer.close()
    finally:
        setup.execute(f"DROP DATABASE IF EXISTS {name}")
        setup.close()
