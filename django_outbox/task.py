"""``OutboxTask``: Django's ``Task`` with the per-task options a job queue needs.

``@task(max_attempts=5, timeout=30, backoff_base=2, backoff_cap=600, unique_key=...)``
reaches this class because Django passes unknown ``@task`` keywords to the backend's
``task_class``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_outbox.compat import Task


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxTask(Task):
    #: Runs allowed, the first included; None: ``OUTBOX["DEFAULT_MAX_ATTEMPTS"]``.
    max_attempts: int | None = None
    #: Seconds a run may take before it is failed (and retried per max_attempts).
    timeout: float | None = None
    #: Full-jitter backoff between attempts; None: the OUTBOX defaults.
    backoff_base: float | None = None
    backoff_cap: float | None = None
    #: While a job with this key is queued or running, enqueueing another returns that job
    #: instead. A string, or a function of (args, kwargs) returning one (None: not unique).
    unique_key: str | Callable[[tuple[Any, ...], dict[str, Any]], str | None] | None = None

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | timedelta | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        backoff_base: float | None = None,
        backoff_cap: float | None = None,
        unique_key: str | None = None,
    ) -> OutboxTask:
        """A copy with other defaults; ``run_after`` may be a delay from now."""
        if isinstance(run_after, timedelta):
            run_after = timezone.now() + run_after
        changes: dict[str, Any] = {
            name: value
            for name, value in {
                "priority": priority,
                "queue_name": queue_name,
                "run_after": run_after,
                "backend": backend,
                "max_attempts": max_attempts,
                "timeout": timeout,
                "backoff_base": backoff_base,
                "backoff_cap": backoff_cap,
                "unique_key": unique_key,
            }.items()
            if value is not None
        }
        return replace(self, **changes)

    def unique_key_for(self, args: Any, kwargs: dict[str, Any]) -> str | None:
        """This call's unique key; None: the job is not unique. A key function's bad
        answer raises InvalidTaskArguments."""
        key = self.unique_key
        if not callable(key):
            return key
        from django_outbox.exceptions import InvalidTaskArguments

        found = key(tuple(args), dict(kwargs))
        problem = None if found is None else unique_key_problem(found)
        if problem:
            raise InvalidTaskArguments(f"The unique key function of {self.module_path}: {problem}")
        return found


#: Keys django_outbox writes itself (webhook deliveries, schedules) start with this.
RESERVED_PREFIX = "outbox."


def unique_key_problem(key: object) -> str | None:
    """What is wrong with a unique key: it must be a non-empty string of at most 255
    characters, not one of django_outbox's own."""
    if not isinstance(key, str) or not key.strip():
        return f"a unique key must be a non-empty string, not {key!r}."
    if len(key) > 255:
        return f"a unique key is at most 255 characters; this one has {len(key)}."
    if key.startswith(RESERVED_PREFIX):
        return (
            f"unique keys starting with {RESERVED_PREFIX!r} are django_outbox's own "
            f"(webhook deliveries, schedules): {key!r}."
        )
    return None
