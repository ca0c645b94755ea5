"""Pausing and resuming queues: ``pause("emails")``, ``resume("emails")``, ``paused()``.

A paused queue keeps taking jobs (enqueueing works as ever) and workers claim none of
them: each worker reads which of its queues are paused at most once a second, before it
claims (worker/pauses.py), so within a second of ``pause()`` no new job of the queue
starts; jobs already running finish. ``resume()`` signals the queue's idle workers on
commit, through the usual wake-up channel, so its jobs start at once, not at the next poll.

The state is one row per queue (``QueueState``) in the database the jobs are in: a queue
without a row, or whose row has no ``paused_at``, runs. A queue is paused by name, for
every TASKS alias whose jobs share that database.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import router
from django.utils import timezone

from django_outbox.db.routing import jobs_of
from django_outbox.models import QueueState
from django_outbox.wake import notify

__all__ = ["MAX_NAME_LENGTH", "check_name", "pause", "paused", "resume"]

#: A queue's name is at most this long (``Job.queue``, ``QueueState.name``).
MAX_NAME_LENGTH = QueueState._meta.get_field("name").max_length or 100


def check_name(name: object) -> str:
    """``name`` if it can name a queue; a TypeError or ValueError saying why not."""
    if not isinstance(name, str):
        raise TypeError(f"A queue's name is a str, not {type(name).__name__} ({name!r}).")
    if not name.strip():
        raise ValueError("A queue's name must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(
            f"A queue's name is at most {MAX_NAME_LENGTH} characters; "
            f"{name[:20]!r}… has {len(name)}."
        )
    return name


def pause(name: str, *, backend: str | None = None) -> bool:
    """Pause the queue ``name``: workers claim none of its jobs from within a second on.

    Jobs already running finish; enqueueing into the queue goes on. ``backend``: the TASKS
    alias whose database holds the queue (default: the router's choice, as for any job).
    Returns whether the queue was running (False: it was paused already)."""
    check_name(name)
    with _database_of(backend) as using:
        _state, created = QueueState.objects.using(using).get_or_create(
            name=name, defaults={"paused_at": timezone.now()}
        )
        if created:
            return True
        changed = (
            QueueState.objects.using(using)
            .filter(name=name, paused_at__isnull=True)
            .update(paused_at=timezone.now())
        )
        return bool(changed)


def resume(name: str, *, backend: str | None = None) -> bool:
    """Resume the queue ``name``: its idle workers are signalled once the transaction
    commits and claim its due jobs at once.

    ``backend`` as for ``pause()``. Returns whether the queue was paused (False: it ran)."""
    check_name(name)
    with _database_of(backend) as using:
        changed = (
            QueueState.objects.using(using)
            .filter(name=name, paused_at__isnull=False)
            .update(paused_at=None)
        )
        if changed:
            # The queue's row stays (paused_at NULL: it runs), for the admin to list.
            notify.notify_on_commit([(name, timezone.now())], using=using)
        return bool(changed)


def paused(
    names: Iterable[str] | None = None, *, backend: str | None = None
) -> dict[str, datetime]:
    """The paused queues, each with the time it was paused: of ``names`` only, when given
    (one query either way; none for an empty ``names``)."""
    wanted = None if names is None else [check_name(name) for name in names]
    if wanted is not None and not wanted:
        return {}
    with _database_of(backend) as using:
        rows = QueueState.objects.using(using).filter(paused_at__isnull=False)
        if wanted is not None:
            rows = rows.filter(name__in=wanted)
        return {name: at for name, at in rows.values_list("name", "paused_at") if at is not None}


@contextmanager
def _database_of(backend: str | None) -> Iterator[str]:
    """The database the queue states of ``backend`` (a TASKS alias) are in."""
    if backend is None:
        yield router.db_for_write(QueueState)
        return
    if not isinstance(backend, str):
        raise TypeError(f"backend is a TASKS alias (a str), not {type(backend).__name__}.")
    aliases = getattr(settings, "TASKS", {})
    if backend not in aliases:
        raise ValueError(
            f"No TASKS alias {backend!r}; the aliases are: {', '.join(map(repr, aliases))}."
        )
    with jobs_of(backend):
        yield router.db_for_write(QueueState)
