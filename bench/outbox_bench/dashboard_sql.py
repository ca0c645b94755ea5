"""The few expressions of the dashboard's loader that the databases spell differently.

The loader writes its rows with ``INSERT … SELECT`` over a series of numbers ``n``; the
statements are the same on every database but for these. PostgreSQL's spelling is the one
the loader was written in; SQLite writes the same rows with its own.
"""

from __future__ import annotations

from typing import Any


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
        return f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ({seconds}) || ' seconds')"

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


def spelling(connection: Any) -> Spelling:
    """The spelling for ``connection``'s database."""
    if connection.vendor == "postgresql":
        return PostgreSQL()
    return Spelling()
