"""MariaDB (and MySQL) for the benchmarks' plain-driver parts: the raw-SQL ceiling, which
talks to the server with MySQLdb (mysqlclient, Django's own MySQL driver), not through
Django: the connection keywords Django would use (what PostgreSQL's side has in
``django_outbox.wake.postgres.plain_params``), in READ COMMITTED.
"""

from __future__ import annotations

from typing import Any

from django.db import connections


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
