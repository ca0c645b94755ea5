"""django_outbox: transactional background jobs for Django, on the database you have."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_outbox.compat import Task, TaskResult

__all__ = ["cancel", "enqueue_many", "pause", "resume"]


def enqueue_many(
    task: Task, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]
) -> list[TaskResult]:
    """Enqueue ``task`` once per ``(args, kwargs)`` pair, in the caller's transaction.

    One INSERT per 1,000 rows; either every job is stored or none is.
    """
    from django_outbox.backend import OutboxBackend

    backend = task.get_backend()
    if not isinstance(backend, OutboxBackend):
        raise TypeError(
            f"enqueue_many needs a task on an OutboxBackend; {task.module_path!r} uses "
            f"{type(backend).__name__} (TASKS[{task.backend!r}])."
        )
    return backend.enqueue_many(task, calls)


def cancel(job: TaskResult | int | str) -> str:
    """Cancel a job, given its TaskResult, its result id (``TaskResult.id``) or its primary
    key (an int, as the admin shows it).

    A queued job is cancelled and never runs: returns "cancelled". A running job is asked to
    stop (its task sees ``context.cancelled()`` after the worker's next heartbeat): returns
    "requested". A finished job is left as it is: returns its status.
    """
    from django_outbox.db.routing import jobs_of
    from django_outbox.jobs.operations import cancel_job

    backend = getattr(job, "backend", None)
    if isinstance(backend, str):  # a TaskResult names its alias, and so its database
        with jobs_of(backend):
            return cancel_job(job)
    return cancel_job(job)


def pause(name: str, *, backend: str | None = None) -> bool:
    """Pause the queue ``name``: workers claim none of its jobs from within a second on,
    until it is resumed; jobs running finish, and enqueueing into it goes on. Returns
    whether it was running. ``backend``: the TASKS alias whose database holds it (see
    docs/queues.md)."""
    from django_outbox import queues

    return queues.pause(name, backend=backend)


def resume(name: str, *, backend: str | None = None) -> bool:
    """Resume the queue ``name``: its idle workers are signalled on commit and claim its
    due jobs at once. Returns whether it was paused."""
    from django_outbox import queues

    return queues.resume(name, backend=backend)
