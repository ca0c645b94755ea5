"""Running an operation again when the database undid it for a deadlock (or, where it has
them, a serialization failure, as PostgreSQL raises for a row another transaction moved to
another partition): the remedy the database itself asks for. Also when a statement named a
partition of the job table that is gone since this process learnt its layout
(``Dialect.relearn_layout``): the next run builds it for the table as it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import Error as DatabaseErrors

from django_outbox.db import dialect

T = TypeVar("T")


def again_after_deadlocks(
    alias: str,
    operation: Callable[[], T],
    tries: int,
    on_again: Callable[[BaseException], None] | None = None,
) -> T:
    """``operation()``, run up to ``tries`` times while the database at ``alias`` undoes it
    for a deadlock; ``on_again`` is told of each such error before the next run. Any other
    error, or the last run's, is raised."""
    for run in range(1, tries + 1):
        try:
            return operation()
        except DatabaseErrors as exc:
            sql = dialect(alias)
            if run == tries or not (sql.deadlock(exc) or sql.relearn_layout(alias, exc)):
                raise
            if on_again is not None:
                on_again(exc)
    raise AssertionError("unreachable")
