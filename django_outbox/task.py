"""``OutboxTask``: Django's ``Task`` with the per-task options a job queue needs.

``@task(max_attempts=5, timeout=30, backoff_base=2, backoff_cap=600)`` reaches this class
because Django passes unknown ``@task`` keywords to the backend's ``task_class``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.tasks import Task
from django.utils import timezone


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxTask(Task):
    #: Runs allowed, the first included; None: ``OUTBOX["DEFAULT_MAX_ATTEMPTS"]``.
    max_attempts: int | None = None
    #: Seconds a run may take before it is failed (and retried per max_attempts).
    timeout: float | None = None
    #: Full-jitter backoff between attempts; None: the OUTBOX defaults.
    backoff_base: float | None = None
    backoff_cap: float | None = None

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
            }.items()
            if value is not None
        }
        return replace(self, **changes)
