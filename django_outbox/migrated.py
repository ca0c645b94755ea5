"""Refusing to start on a database that lacks django_outbox's tables.

Without this, ``runworker`` before ``migrate`` retried "no such table" forever, backing off,
never saying what to do. The commands that need the tables call ``require_migrated()``
first: an unapplied migration of django_outbox stops them with the command to run.
"""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DatabaseError, connections, router
from django.db.migrations.executor import MigrationExecutor

APP = "django_outbox"


def unapplied(using: str) -> list[str]:
    """django_outbox's migrations (and those they depend on) not applied on ``using``."""
    executor = MigrationExecutor(connections[using])
    targets = executor.loader.graph.leaf_nodes(APP)
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, _ in executor.migration_plan(targets)
    ]


def require_migrated(command: str) -> None:
    """Raise CommandError, saying to run ``migrate``, if a database django_outbox writes to
    lacks any of its migrations. A database that cannot be reached is not judged here: the
    command's own handling of an unreachable database (the worker waits for it) applies."""
    from django_outbox.models import Attempt, Job

    for using in dict.fromkeys(router.db_for_write(model) for model in (Job, Attempt)):
        try:
            missing = unapplied(using)
        except DatabaseError:
            continue
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            where = "" if using == "default" else f" --database {using}"
            raise CommandError(
                f"{command}: the database {using!r} lacks django_outbox's tables or some of "
                f"their migrations ({len(missing)} not applied: {shown}). "
                f"Run `python manage.py migrate{where}`, then `{command}` again."
            )
