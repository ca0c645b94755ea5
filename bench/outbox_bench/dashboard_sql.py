"""The few expressions of the dashboard's loader that the databases spell differently.

The loader writes its rows with ``INSERT … SELECT`` over a series of numbers ``n``; the
statements are the same on every database but for these. PostgreSQL's spelling is the one
the loader was written in; SQLite and MariaDB write the same rows with their own.
"""

from __future__ import annotations

from typing import Any

from django.core.management import CommandError


class Spelling:
    """SQLite's spelling, and what the others share with it."""

    #: A true boolean literal.
    true = "1"
    #: What makes a CASE of JSON literals JSON (nothing where JSON is text).
    json = ""

    def series(self, count: int) -> str:
        """Rows n = 1 … count."""
        return (
            "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s "
            f"WHERE n < {count}) SELECT n FROM s)"
        )

    def hour(self, column: str) -> str:
        """The start of the hour of ``column``."""
        return f"strftime('%Y-%m-%d %H:00:00', {column})"

    def ago(self, seconds: str) -> str:
        """The time (UTC) that many seconds before now."""
        # "-N seconds", or "N seconds" for a time ahead (a negative number of seconds ago).
        return f"strftime('%Y-%m-%d %H:%M:%f', 'now', (-({seconds})) || ' seconds')"

    def quotient(self, dividend: str, divisor: str) -> str:
        """Whole-number division of two whole numbers."""
        return f"({dividend}) / ({divisor})"

    def concat(self, *parts: str) -> str:
        """Text joined end to end."""
        return " || ".join(parts)

    def text(self, value: str) -> str:
        """A string literal of ``value``, byte for byte (backslashes included)."""
        return "'" + value.replace("'", "''") + "'"

    def analyze(self, tables: list[str]) -> str:
        """Fresh planner statistics for ``tables``, as a long-running site has them."""
        return "ANALYZE"


class PostgreSQL(Spelling):
    true = "true"
    #: A CASE of JSON literals is text to PostgreSQL until cast.
    json = "::jsonb"

    def series(self, count: int) -> str:
        return f"generate_series(1::bigint, {count}) AS n"

    def hour(self, column: str) -> str:
        return f"date_trunc('hour', {column})"

    def ago(self, seconds: str) -> str:
        return f"now() - make_interval(secs => {seconds})"

    def analyze(self, tables: list[str]) -> str:
        # VACUUM too: it sets the visibility map that index-only scans read.
        return f"VACUUM ANALYZE {', '.join(tables)}"


class MariaDB(Spelling):
    """MariaDB 10.6+: its sequence tables for the series, UTC_TIMESTAMP for now."""

    def __init__(self, sql_mode: set[str]) -> None:
        #: Whether a backslash in a string literal is an escape (it is unless the server's
        #: sql_mode says NO_BACKSLASH_ESCAPES).
        self.backslash_escapes = "NO_BACKSLASH_ESCAPES" not in sql_mode

    def series(self, count: int) -> str:
        # seq_1_to_N is a table of the Sequence engine. A recursive CTE would stop at
        # max_recursive_iterations (1,000 by default). SIGNED: an unsigned n would make
        # "n … - 7200" an out-of-range error rather than a negative number.
        return f"(SELECT CAST(seq AS SIGNED) AS n FROM seq_1_to_{count}) AS s"

    def hour(self, column: str) -> str:
        return f"DATE_FORMAT({column}, '%Y-%m-%d %H:00:00')"

    def ago(self, seconds: str) -> str:
        # UTC, as Django stores datetimes in MariaDB's DATETIME columns (NOW() would be in
        # the session's time zone).
        return f"UTC_TIMESTAMP(6) - INTERVAL ({seconds}) SECOND"

    def quotient(self, dividend: str, divisor: str) -> str:
        return f"({dividend}) DIV ({divisor})"  # "/" is exact, decimal division

    def concat(self, *parts: str) -> str:
        # || is OR to MariaDB (unless sql_mode says PIPES_AS_CONCAT).
        return f"CONCAT({', '.join(parts)})"

    def text(self, value: str) -> str:
        if self.backslash_escapes:
            value = value.replace("\\", "\\\\")
        return super().text(value)

    def analyze(self, tables: list[str]) -> str:
        # InnoDB's persistent statistics, which information_schema's TABLE_ROWS (the
        # admin's row estimate) reports.
        return f"ANALYZE TABLE {', '.join(tables)}"


def spelling(connection: Any) -> Spelling:
    """The spelling for ``connection``'s database."""
    if connection.vendor == "postgresql":
        return PostgreSQL()
    if connection.vendor == "mysql":
        if not connection.mysql_is_mariadb:
            raise CommandError(
                "outbox_bench dashboard writes its rows with MariaDB's sequence tables: "
                "MariaDB, PostgreSQL or SQLite, not MySQL"
            )
        with connection.cursor() as cursor:  # this session's (Django's sql_mode is the server's)
            cursor.execute("SELECT @@SESSION.sql_mode")
            (modes,) = cursor.fetchone()
        return MariaDB(set(modes.split(",")))
    return Spelling()
