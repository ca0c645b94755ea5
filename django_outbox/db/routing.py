"""Which database a TASKS alias keeps its jobs in.

``TASKS[alias]["OPTIONS"]["DATABASE"]`` names it; without the option, Django's router picks,
as for any model. django_outbox's models follow the alias being served through a database
router (``django_outbox.routers.JobsRouter``), so that every statement about jobs — the
engine's, the ORM's, a task's ``get_result()`` — goes to the same database:

- a worker serves one alias: ``serving(alias)`` for the whole process (its threads too);
- an enqueue, a result lookup or a webhook send names its alias: ``jobs_of(alias)`` for
  that call (a context variable: other threads and requests are not affected).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings

#: The app whose models follow the alias served.
APP_LABEL = "django_outbox"

#: The database of this call's alias, in a 1-tuple: (None,) is "the router's choice", said
#: by the call (a worker's process-wide alias does not apply then).
_current: ContextVar[tuple[str | None] | None] = ContextVar("django_outbox_database", default=None)
#: The database of the alias this process serves (a worker's), for every thread.
_served: list[str | None] = [None]


def database_of(alias: str) -> str | None:
    """The database ``TASKS[alias]`` names for its jobs, or None: the router's choice."""
    params: Any = getattr(settings, "TASKS", {}).get(alias, {})
    options = params.get("OPTIONS", {}) if isinstance(params, dict) else {}
    database = options.get("DATABASE") if isinstance(options, dict) else None
    return database if isinstance(database, str) else None


def named_databases() -> dict[str, str]:
    """Each TASKS alias that names a database, and that database."""
    found = {alias: database_of(alias) for alias in getattr(settings, "TASKS", {})}
    return {alias: database for alias, database in found.items() if database}


def current() -> str | None:
    """The database of the alias in hand (this call's, else this process's), or None."""
    said = _current.get()
    return said[0] if said is not None else _served[0]


@contextmanager
def jobs_of(alias: str) -> Iterator[None]:
    """django_outbox's models go to ``TASKS[alias]``'s database inside the block."""
    token = _current.set((database_of(alias),))
    try:
        yield
    finally:
        _current.reset(token)


@contextmanager
def serving(alias: str) -> Iterator[None]:
    """This process serves ``TASKS[alias]``: its models go to that alias's database, in
    every thread, until the block ends."""
    before = _served[0]
    _served[0] = database_of(alias)
    try:
        yield
    finally:
        _served[0] = before


class JobsRouter:
    """Sends django_outbox's models to the database of the TASKS alias in hand; leaves
    every other model, and django_outbox's when no alias names a database, to the routers
    after it."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return current() if model._meta.app_label == APP_LABEL else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        # django_outbox's tables go in every database an alias names (and, through the
        # routers after this one, wherever they would go anyway).
        if app_label == APP_LABEL and db in named_databases().values():
            return True
        return None
