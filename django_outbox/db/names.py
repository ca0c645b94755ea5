"""Statement names: a comment heading each statement the engine writes."""

from __future__ import annotations

import re

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
