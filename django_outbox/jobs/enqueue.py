"""Insert jobs inside the caller's transaction: a rollback leaves no job behind."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import router, transaction
from django.tasks import Task, TaskResult
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json

from django_outbox import conf
from django_outbox.exceptions import InvalidTaskArguments
from django_outbox.jobs.jsonvalues import storable_problem
from django_outbox.jobs.results import to_task_result
from django_outbox.models import Job
from django_outbox.task import OutboxTask
from django_outbox.wake.notify import notify_on_commit

#: Rows per INSERT statement in a bulk enqueue.
CHUNK_SIZE = 1000


def json_arguments(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as they will be stored and passed to the task, or InvalidTaskArguments.

    Tuples become lists, as they would after any JSON round trip; everything else that
    JSON cannot hold exactly (datetimes, sets, objects, NaN) is refused here, at enqueue,
    rather than failing later in a worker.
    """
    try:
        normal_args: list[Any] = normalize_json(list(args))  # type: ignore[assignment]
        normal_kwargs: dict[str, Any] = normalize_json(dict(kwargs))  # type: ignore[assignment]
        problem = storable_problem([normal_args, normal_kwargs])
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    if problem is not None:
        raise InvalidTaskArguments(
            f"Arguments to task {task.module_path!r} must be JSON-serialisable "
            f"(str, int, float, bool, None, lists and dicts of them): {problem}"
        )
    if _has_non_string_key(normal_kwargs) or _has_non_string_key(normal_args):
        raise InvalidTaskArguments(
            f"Arguments to task {task.module_path!r} use a dict key that is not a string; "
            "JSON would turn it into one, so the task would not get what was sent."
        )
    return normal_args, normal_kwargs


def _has_non_string_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            not isinstance(key, str) or _has_non_string_key(item) for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_has_non_string_key(item) for item in value)
    return False


def build_job(
    task: Task, args: Sequence[Any], kwargs: dict[str, Any], now: datetime | None = None
) -> Job:
    settings = conf.get()
    now = now or timezone.now()
    normal_args, normal_kwargs = json_arguments(task, args, kwargs)
    options = task if isinstance(task, OutboxTask) else None
    return Job(
        backend=task.backend,
        queue=task.queue_name,
        task_path=task.module_path,
        args=normal_args,
        kwargs=normal_kwargs,
        priority=task.priority,
        run_at=task.run_after or now,
        enqueued_at=now,
        max_attempts=(options and options.max_attempts) or settings.DEFAULT_MAX_ATTEMPTS,
        timeout=options.timeout if options else None,
        backoff_base=(options and options.backoff_base) or settings.BACKOFF_BASE,
        backoff_cap=(options and options.backoff_cap) or settings.BACKOFF_CAP,
    )


def enqueue(task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
    job = build_job(task, args, kwargs)
    job.save(force_insert=True)
    notify_on_commit([(job.queue, job.run_at)], using=router.db_for_write(Job))
    result = to_task_result(job, task)
    task_enqueued.send(type(task.get_backend()), task_result=result)
    return result


def enqueue_many(
    task: Task, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]
) -> list[TaskResult]:
    """Enqueue one job per ``(args, kwargs)``: one INSERT per 1,000 rows, all or none."""
    now = timezone.now()
    jobs = []
    for position, call in enumerate(calls):
        try:
            args, kwargs = call
        except (TypeError, ValueError):
            raise InvalidTaskArguments(
                f"enqueue_many takes (args, kwargs) pairs; item {position} is {call!r}."
            ) from None
        jobs.append(build_job(task, args, kwargs, now))
    using = router.db_for_write(Job)
    with transaction.atomic(using=using):
        Job.objects.bulk_create(jobs, batch_size=CHUNK_SIZE)
        notify_on_commit([(job.queue, job.run_at) for job in jobs], using=using)
    backend_class = type(task.get_backend())
    results = [to_task_result(job, task) for job in jobs]
    for result in results:
        task_enqueued.send(backend_class, task_result=result)
    return results
