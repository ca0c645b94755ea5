"""Turning stored jobs into ``django.tasks.TaskResult`` objects, and task paths into tasks."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from django_outbox.compat import Task, TaskError, TaskResult
from django_outbox.exceptions import TaskNotFound
from django_outbox.jobs.progress import Progress
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


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxTaskResult(TaskResult):  # type: ignore[misc]
    """Django's TaskResult, plus what the task last said of its progress (None: nothing)."""

    progress: Progress | None = None

    def refresh(self) -> None:
        """Reload what changes as the job runs, progress included."""
        self._take(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        self._take(await self.task.get_backend().aget_result(self.id))

    def _take(self, fresh: TaskResult) -> None:
        for name in _REFRESHED:
            object.__setattr__(self, name, getattr(fresh, name, None))


#: What a refresh reloads: what changes as a job runs.
_REFRESHED = (
    "status",
    "enqueued_at",
    "started_at",
    "finished_at",
    "last_attempted_at",
    "errors",
    "worker_ids",
    "_return_value",
    "progress",
)


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
        progress=Progress.from_stored(job.progress),
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
    progress: Progress | None = None,
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
        made: TaskResult = OutboxTaskResult(**values, progress=progress)
        object.__setattr__(made, "_return_value", return_value)
        return made
    # TaskResult.__init__ would run the arguments through normalize_json again: decoded
    # from JSON, they are JSON's types already, and for quick jobs that second pass cost
    # the worker more than the rest of the result.
    result: TaskResult = object.__new__(OutboxTaskResult)
    for name, value in values.items():
        object.__setattr__(result, name, value)
    object.__setattr__(result, "_return_value", return_value)
    object.__setattr__(result, "progress", progress)
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
