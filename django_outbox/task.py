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

#: A function of a call's (args, kwargs) giving its key (None: no key for this call).
KeyFunction = Callable[[tuple[Any, ...], dict[str, Any]], str | None]


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
    unique_key: str | KeyFunction | None = None
    #: At most ``concurrency_limit`` jobs with the same key queued or running at once,
    #: across every worker; the others are held, in order, without blocking other keys.
    #: A string, or a function of (args, kwargs) returning one (None: no key).
    concurrency_key: str | KeyFunction | None = None
    concurrency_limit: int = 1
    #: Jobs with the same key run one at a time, in the order they were enqueued.
    sequence_key: str | KeyFunction | None = None
    #: "hold": a job of the sequence that fails for good holds the sequence until it is
    #: retried or skipped; "continue": the sequence goes on without it.
    sequence_on_failure: str = "hold"
    #: At most ``rate_limit`` runs a second of the jobs with the same key (after a quiet
    #: spell, ``rate_burst`` at once; default one second's worth), across every worker. A
    #: run over it goes back to the queue for its turn, not counted as an attempt.
    rate_key: str | KeyFunction | None = None
    rate_limit: float | None = None
    rate_burst: int | None = None

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
        concurrency_key: str | KeyFunction | None = None,
        concurrency_limit: int | None = None,
        sequence_key: str | KeyFunction | None = None,
        sequence_on_failure: str | None = None,
        rate_key: str | KeyFunction | None = None,
        rate_limit: float | None = None,
        rate_burst: int | None = None,
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
                "concurrency_key": concurrency_key,
                "concurrency_limit": concurrency_limit,
                "sequence_key": sequence_key,
                "sequence_on_failure": sequence_on_failure,
                "rate_key": rate_key,
                "rate_limit": rate_limit,
                "rate_burst": rate_burst,
            }.items()
            if value is not None
        }
        return replace(self, **changes)

    def unique_key_for(self, args: Any, kwargs: dict[str, Any]) -> str | None:
        """This call's unique key; None: the job is not unique. A key function's bad
        answer raises InvalidTaskArguments."""
        return self._key_for("unique key", self.unique_key, args, kwargs, unique_key_problem)

    def limit_key_for(self, args: Any, kwargs: dict[str, Any]) -> str | None:
        """This call's concurrency or sequence key as the job stores it
        ("concurrency:<key>", "sequence:<key>"); None: it has neither."""
        if self.sequence_key is not None:
            found = self._key_for(
                "sequence key", self.sequence_key, args, kwargs, limit_key_problem
            )
            return None if found is None else f"{SEQUENCE_PREFIX}{found}"
        if self.concurrency_key is not None:
            found = self._key_for(
                "concurrency key", self.concurrency_key, args, kwargs, limit_key_problem
            )
            return None if found is None else f"{CONCURRENCY_PREFIX}{found}"
        return None

    def rate_key_for(self, args: Any, kwargs: dict[str, Any]) -> str | None:
        """This call's rate limit key; None: no rate limit holds it back."""
        if self.rate_key is None or self.rate_limit is None:
            return None
        return self._key_for("rate key", self.rate_key, args, kwargs, limit_key_problem)

    def _key_for(
        self,
        what: str,
        key: str | KeyFunction | None,
        args: Any,
        kwargs: dict[str, Any],
        problem_of: Callable[[object], str | None],
    ) -> str | None:
        if not callable(key):
            return key
        from django_outbox.exceptions import InvalidTaskArguments

        found = key(tuple(args), dict(kwargs))
        problem = None if found is None else problem_of(found)
        if problem:
            raise InvalidTaskArguments(f"The {what} function of {self.module_path}: {problem}")
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


#: How a job stores its concurrency or sequence key (``Job.limit_key``): after its kind.
CONCURRENCY_PREFIX = "concurrency:"
SEQUENCE_PREFIX = "sequence:"
#: The longest concurrency or sequence key: stored after its kind, in 255 characters.
MAX_LIMIT_KEY = 255 - len(CONCURRENCY_PREFIX)

#: What ``sequence_on_failure`` may be.
SEQUENCE_ON_FAILURE = ("hold", "continue")


def limit_key_problem(key: object) -> str | None:
    """What is wrong with a concurrency or sequence key: it must be a non-empty string of
    at most MAX_LIMIT_KEY characters."""
    if not isinstance(key, str) or not key.strip():
        return f"a key must be a non-empty string, not {key!r}."
    if len(key) > MAX_LIMIT_KEY:
        return f"a key is at most {MAX_LIMIT_KEY} characters; this one has {len(key)}."
    return None
