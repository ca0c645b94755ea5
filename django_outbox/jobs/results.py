"""Turning stored jobs into ``django.tasks.TaskResult`` objects, and task paths into tasks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.tasks import Task, TaskResult
from django.tasks.base import TaskError
from django.utils.module_loading import import_string

from django_outbox.exceptions import TaskNotFound
from django_outbox.models import Job, JobStatus


def resolve_task(path: str) -> Task:
    """The task defined at ``path``, or TaskNotFound with the reason."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise TaskNotFound(f"Task {path!r} could not be imported: {exc}") from exc
    if not isinstance(found, Task):
        raise TaskNotFound(
            f"{path!r} is a {type(found).__name__}, not a task: decorate it with @task."
        )
    return found


def to_task_result(job: Job, task: Task | None = None) -> TaskResult:
    if task is None:
        task = resolve_task(job.task_path)
    if task.queue_name != job.queue or task.priority != job.priority:
        task = replace(task, queue_name=job.queue, priority=job.priority)
    return build_result(
        task=task,
        job_id=job.pk,
        status=JobStatus(job.status),
        args=job.args,
        kwargs=job.kwargs,
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        last_attempted_at=job.last_attempted_at,
        finished_at=job.finished_at,
        errors=job.errors,
        worker_ids=job.worker_ids,
        return_value=job.return_value,
    )


def build_result(
    *,
    task: Task,
    job_id: int,
    status: JobStatus,
    args: list[Any],
    kwargs: dict[str, Any],
    errors: list[dict[str, str]],
    worker_ids: list[str],
    return_value: Any = None,
    **times: Any,
) -> TaskResult:
    result: TaskResult = TaskResult(
        task=task,
        id=str(job_id),
        status=status.task_status,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=task_errors(errors),
        worker_ids=list(worker_ids),
        **times,
    )
    object.__setattr__(result, "_return_value", return_value)
    return result


def task_errors(errors: list[dict[str, str]]) -> list[TaskError]:
    """A job's stored errors as ``TaskResult.errors``."""
    return [
        TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
        for e in errors
    ]
