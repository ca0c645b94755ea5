"""The ``django.tasks`` backend: ``TASKS = {"default": {"BACKEND":
"django_outbox.backend.OutboxBackend"}}``.

Django builds the backend when a module defines its first ``@task``, often before the app
registry is ready, so this module must not import models at import time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_outbox import conf
from django_outbox.compat import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
)
from django_outbox.lib import text
from django_outbox.task import (
    SEQUENCE_ON_FAILURE,
    OutboxTask,
    limit_key_problem,
    unique_key_problem,
)

#: The longest timeout or backoff a task may ask for: a year, in seconds.
MAX_SECONDS = 366 * 24 * 3600.0


class OutboxBackend(BaseTaskBackend):
    task_class = OutboxTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.queues = self._served_queues()

    def _served_queues(self) -> set[str]:
        """The QUEUES setting's, and the webhooks' queue when this backend runs the
        deliveries: they run as jobs on their own queue, served by default. Asked again
        at each validation too: a backend built while OUTBOX was invalid (system check
        E001 says what is wrong) must not refuse deliveries once it is right."""
        try:
            webhooks = conf.get().WEBHOOKS
        except ImproperlyConfigured:
            return set(self.queues)
        if self.queues and self.alias == webhooks.BACKEND:
            return {*self.queues, webhooks.QUEUE}
        return set(self.queues)

    def validate_task(self, task: Task) -> None:
        # Django's own checks compare these with numbers and dates: a wrong type would
        # fail there with a TypeError that names neither.
        if isinstance(task.priority, bool) or not isinstance(task.priority, int):
            raise InvalidTask(
                f"priority must be a whole number between {TASK_MIN_PRIORITY} and "
                f"{TASK_MAX_PRIORITY}, not {task.priority!r}."
            )
        if task.run_after is not None and not isinstance(task.run_after, datetime):
            raise InvalidTask(f"run_after must be an aware datetime, not {task.run_after!r}.")
        if self.queues and task.queue_name not in self.queues:
            self.queues = self._served_queues()
        if self.queues and task.queue_name not in self.queues:
            # Django's own message names neither the backend nor the queues it has.
            raise InvalidTask(
                f"Queue {task.queue_name!r} is not one of TASKS[{self.alias!r}]['QUEUES']: "
                f"{', '.join(sorted(self.queues))}. Add it there, or use one of those."
            )
        super().validate_task(task)
        if not isinstance(task, OutboxTask):
            return
        if task.max_attempts is not None and (
            isinstance(task.max_attempts, bool)
            or not isinstance(task.max_attempts, int)
            or task.max_attempts < 1
        ):
            raise InvalidTask(
                f"max_attempts must be a whole number of at least 1, not {task.max_attempts!r}."
            )
        for name in ("timeout", "backoff_base", "backoff_cap"):
            value = getattr(task, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= MAX_SECONDS
            ):
                raise InvalidTask(
                    f"{name} must be a number of seconds above 0 and at most "
                    f"{text.number(MAX_SECONDS)} (a year), not {value!r}."
                )
        if (
            task.backoff_base is not None
            and task.backoff_cap is not None
            and task.backoff_cap < task.backoff_base
        ):
            raise InvalidTask("backoff_cap must not be below backoff_base.")
        key = task.unique_key
        if key is not None and not callable(key):
            problem = unique_key_problem(key)
            if problem:
                raise InvalidTask(problem[0].upper() + problem[1:])
        _validate_limit_keys(task)

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        from django_outbox.db.routing import jobs_of
        from django_outbox.jobs import enqueue

        self.validate_task(task)
        with jobs_of(self.alias):
            return enqueue.enqueue(task, args, kwargs)

    def enqueue_many(
        self, task: Task, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]
    ) -> list[TaskResult]:
        from django_outbox.db.routing import jobs_of
        from django_outbox.jobs import enqueue

        self.validate_task(task)
        with jobs_of(self.alias):
            return enqueue.enqueue_many(task, calls)

    def get_result(self, result_id: str) -> TaskResult:
        from django_outbox.db.routing import jobs_of
        from django_outbox.jobs.results import to_task_result
        from django_outbox.lib.resultids import parse_result_id
        from django_outbox.models import Job

        try:
            pk, token = parse_result_id(result_id)
        except ValueError as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        # The token tells the job apart from one that was given the same primary key
        # after this one's enqueue rolled back.
        with jobs_of(self.alias):
            job = Job.objects.filter(pk=pk, token=token, backend=self.alias).first()
        if job is None:
            raise TaskResultDoesNotExist(
                f"No job has the result id {result_id!r}: its enqueue rolled back, or the "
                "job was deleted since."
            )
        return to_task_result(job)

    @property
    def settings(self) -> conf.OutboxSettings:
        return conf.get()


def _validate_limit_keys(task: OutboxTask) -> None:
    """A task's concurrency and sequence options, or InvalidTask saying what is wrong."""
    if task.concurrency_key is not None and task.sequence_key is not None:
        raise InvalidTask(
            "A task takes a concurrency_key or a sequence_key, not both: a sequence already "
            "runs one job of its key at a time."
        )
    for name in ("concurrency_key", "sequence_key"):
        key = getattr(task, name)
        if key is not None and not callable(key):
            problem = limit_key_problem(key)
            if problem:
                raise InvalidTask(f"{name}: {problem}")
    limit = task.concurrency_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidTask(
            f"concurrency_limit must be a whole number from 1 to {MAX_LIMIT:,}, not {limit!r}."
        )
    _validate_rate_key(task)
    if task.sequence_on_failure not in SEQUENCE_ON_FAILURE:
        raise InvalidTask(
            f"sequence_on_failure must be one of {', '.join(map(repr, SEQUENCE_ON_FAILURE))}, "
            f"not {task.sequence_on_failure!r}."
        )


#: The highest concurrency_limit (a key with more turns is hardly a limit).
MAX_LIMIT = 10_000


def _validate_rate_key(task: OutboxTask) -> None:
    """A task's per-key rate limit, or InvalidTask saying what is wrong."""
    key, rate, burst = task.rate_key, task.rate_limit, task.rate_burst
    if (key is None) != (rate is None):
        raise InvalidTask(
            "rate_key and rate_limit go together: the key says whose jobs share a limit, the "
            "limit how many of them may run a second."
        )
    if key is not None and not callable(key):
        problem = limit_key_problem(key)
        if problem:
            raise InvalidTask(f"rate_key: {problem}")
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= conf.MAX_RATE
    ):
        raise InvalidTask(
            f"rate_limit must be a number of runs per second above 0 and at most "
            f"{text.number(conf.MAX_RATE)}, not {rate!r}."
        )
    if burst is not None and (
        rate is None or isinstance(burst, bool) or not isinstance(burst, int) or burst < 1
    ):
        raise InvalidTask(
            f"rate_burst must be a whole number of at least 1, with a rate_limit, not {burst!r}."
        )
