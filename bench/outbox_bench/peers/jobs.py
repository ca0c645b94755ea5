"""The django-tasks-db peer's job: a ``django.tasks`` task that does nothing.

A module of its own, so the peer's processes import no django_outbox task options."""

from __future__ import annotations

from django_outbox.compat import task


@task()
def noop() -> None:
    return None
