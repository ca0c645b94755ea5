"""Statements as the database sees them: the names of those a test captured
(``django_outbox.db.named``), and every statement each thread of this test process runs
while a block runs (a worker on threads of the process opens connections of its own)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from django.db import connections
from django.db.backends.signals import connection_created

from django_outbox.db import statement_name


class Statement(NamedTuple):
    #: The name of the thread that ran it (a worker's job threads: ``outbox-job-N``).
    thread: str
    sql: str


@contextmanager
def statements_in_every_thread() -> Iterator[list[Statement]]:
    """Each statement, in the order they ran, until the block ends."""
    seen: list[Statement] = []
    lock = threading.Lock()

    def wrapper(execute: Any, sql: str, *args: Any) -> Any:
        with lock:
            seen.append(Statement(threading.current_thread().name, sql))
        return execute(sql, *args)

    wrapped: list[Any] = []

    def wrap(connection: Any, **kwargs: Any) -> None:
        if wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(wrapper)
            wrapped.append(connection)

    def on_connect(sender: object, connection: Any, **kwargs: Any) -> None:
        wrap(connection)

    connection_created.connect(on_connect, weak=False)
    for connection in connections.all(initialized_only=True):
        wrap(connection)
    try:
        yield seen
    finally:
        connection_created.disconnect(on_connect)
        for connection in wrapped:
            if wrapper in connection.execute_wrappers:
                connection.execute_wrappers.remove(wrapper)


def job_threads_reading(table: str, statements: list[Statement]) -> list[str]:
    """The SELECTs (counts aside) that a worker's job threads ran on ``table``."""
    reads = re.compile(rf'^SELECT (?!COUNT\().*? FROM "?{table}"?[ )]', re.S)
    return [s.sql for s in statements if s.thread.startswith("outbox-job-") and reads.match(s.sql)]


def names(queries: Any) -> list[str | None]:
    """Each captured statement's name, in order (None: a statement the ORM wrote)."""
    captured = getattr(queries, "captured_queries", queries)
    return [statement_name(query["sql"]) for query in captured]


def _returns_rows() -> bool:
    from django_outbox.db import dialect

    return dialect("default").update_returning


def one_claim() -> list[str | None]:
    """The statements of one claim, by name: one UPDATE … RETURNING; where UPDATE returns
    nothing (MariaDB), the locking SELECT and one UPDATE of its ids, in a transaction (a
    savepoint and its release, None: the test runs in a transaction)."""
    return ["claim"] if _returns_rows() else [None, "claim", "claim-mark", None]


def update_returning(name: str) -> list[str | None]:
    """The statements of the UPDATE … RETURNING named ``name``: itself; where UPDATE returns
    nothing, a savepoint, the locking read, the UPDATE, the read back and the release."""
    return [name] if _returns_rows() else [None, None, name, None, None]


def plan_of(sql: str) -> str:
    """PostgreSQL's plan of ``sql`` (a statement a test captured), without running it."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    return plan
