"""The database seam: what differs between the databases django_outbox runs on.

``dialect(using)`` gives the dialect of a connection alias: one object per database, with
the SQL spelled its way (capability flags come as the statements that need them move in).
Code outside this package asks the dialect, never the connection's vendor: a test holds
the list of modules not moved here yet (see docs/architecture.md).
"""

from __future__ import annotations

import re

from django.db import NotSupportedError, connections

from django_outbox.db.base import Dialect
from django_outbox.db.postgresql import PostgreSQL
from django_outbox.db.sqlite import SQLite

__all__ = ["Dialect", "dialect", "named", "statement_name"]

_DIALECTS: dict[str, Dialect] = {d.vendor: d for d in (PostgreSQL(), SQLite())}


def dialect(using: str) -> Dialect:
    """The dialect of the database at connection alias ``using``."""
    vendor = connections[using].vendor
    found = _DIALECTS.get(vendor)
    if found is None:
        raise NotSupportedError(
            f"django_outbox runs on PostgreSQL and SQLite; the database {using!r} is {vendor}."
        )
    return found


_NAME = re.compile(r"^/\* outbox:([a-z-]+) \*/ ")


def named(name: str, sql: str) -> str:
    """``sql`` headed by its name as a comment, ``/* outbox:claim */ UPDATE …``: the name
    shows in the database's own views (``pg_stat_statements``, ``pg_stat_activity``, the
    slow-query log), and tests count statements by it."""
    return f"/* outbox:{name} */ {sql}"


def statement_name(sql: str) -> str | None:
    """The name ``named()`` gave ``sql``, or None."""
    found = _NAME.match(sql)
    return found.group(1) if found else None
