"""Turning stored jobs into ``django.tasks.TaskResult`` objects, and task paths into tasks."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from django_outbox.compat import Task, TaskError, TaskResult
from django_outbox.exceptions import TaskNotFound
from django_outbox.lib.resultids import result_id
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
        token=job.token,
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
    token: int,
    status: JobStatus,
    args: list[Any],
    kwargs: dict[str, Any],
    errors: list[dict[str, str]],
    worker_ids: list[str],
    enqueued_at: datetime | None,
    started_at: datetime | None,
    last_attempted_at: datetime | None,
    finished_at: datetime | None,
    return_value: Any = None,
) -> TaskResult:
    """The TaskResult of a stored job (primary key ``job_id``, its ``token``): its arguments
    decoded from JSON, as they are read from the database."""
    values: dict[str, Any] = {
        "task": task,
        "id": result_id(job_id, token),
        "status": status.task_status,
        "args": args,
        "kwargs": kwargs,
        "backend": task.backend,
        "errors": task_errors(errors),
        "worker_ids": list(worker_ids),
        "enqueued_at": enqueued_at,
        "started_at": started_at,
        "last_attempted_at": last_attempted_at,
        "finished_at": finished_at,
    }
    if _RESULT_FIELDS != _SET_HERE:  # a Django whose TaskResult has changed: its own way
        made: TaskResult = TaskResult(**values)
        object.__setattr__(made, "_return_value", return_value)
        return made
    # TaskResult.__init__ would run the arguments through normalize_json again: decoded
    # from JSON, they are JSON's types already, and for quick jobs that second pass cost
    # the worker more than the rest of the result.
    result: TaskResult = object.__new__(TaskResult)
    for name, value in values.items():
        object.__setattr__(result, name, value)
    object.__setattr__(result, "_return_value", return_value)
    return result


#: The fields build_result sets (with the times a job has): all of TaskResult's.
_SET_HERE = frozenset(
    {"task", "id", "status", "args", "kwargs", "backend", "errors", "worker_ids"}
    | {"enqueued_at", "started_at", "last_attempted_at", "finished_at", "_return_value"}
)
_RESULT_FIELDS = frozenset(f.name for f in fields(TaskResult))


def task_errors(errors: list[dict[str, str]]) -> list[TaskError]:
    """A job's stored errors as ``TaskResult.errors``."""
    return [
        TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
        for e in errors
    ]
