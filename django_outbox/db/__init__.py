"""The database seam: what differs between the databases django_outbox runs on.

``dialect(using)`` gives the dialect of a connection alias: one object per database, with
the SQL spelled its way (capability flags come as the statements that need them move in).
Code outside this package asks the dialect, never the connection's vendor: a test holds
the list of modules not moved here yet (see docs/architecture.md).
"""

from __future__ import annotations

from django.db import NotSupportedError, connections

from django_outbox.db.base import Dialect
from django_outbox.db.mysql import MariaDB, MySQL
from django_outbox.db.names import named, statement_name
from django_outbox.db.postgresql import PostgreSQL
from django_outbox.db.sqlite import SQLite

__all__ = ["Dialect", "dialect", "named", "statement_name"]

#: One per family: MariaDB and MySQL share Django's vendor, "mysql".
_DIALECTS: dict[str, Dialect] = {
    "postgresql": PostgreSQL(),
    "sqlite": SQLite(),
    "mariadb": MariaDB(),
    "mysql": MySQL(),
}


def dialect(using: str) -> Dialect:
    """The dialect of the database at connection alias ``using``."""
    connection = connections[using]
    family = connection.vendor
    if family == "mysql" and getattr(connection, "mysql_is_mariadb", False):
        family = "mariadb"
    found = _DIALECTS.get(family)
    if found is None:
        raise NotSupportedError(
            f"django_outbox runs on PostgreSQL, MariaDB, MySQL and SQLite; the database "
            f"{using!r} is {family}."
        )
    return found
