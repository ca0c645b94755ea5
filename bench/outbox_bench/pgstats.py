"""What PostgreSQL says about the work a benchmark did: WAL written, transactions committed.

Both are None on another database."""

from __future__ import annotations

from django.db import connection


def wal_position() -> int | None:
    """Bytes of WAL written by the server so far (``pg_current_wal_lsn()``)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        row = cursor.fetchone()
    return int(row[0]) if row else None


def commits() -> int | None:
    """Transactions committed in this database so far."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else None
