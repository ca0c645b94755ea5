"""Turning stored jobs into ``django.tasks.TaskResult`` objects, and task paths into tasks."""

from __future__ import annotations

from dataclasses import dataclass, fields
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


def task_as_enqueued(
    task: Task, backend: str, queue: str, priority: int, run_after: datetime | None
) -> Task:
    """``task`` as a job was enqueued with it: through ``backend`` (a TASKS alias), on
    ``queue``, at ``priority``, to run after ``run_after``: what ``enqueue()`` returned,
    and what a result read back says. A stored job was validated when it was enqueued, so
    the copy is not validated again (``dataclasses.replace`` would: a queue removed from
    QUEUES since would then make its result unreadable)."""
    if (
        task.backend == backend
        and task.queue_name == queue
        and task.priority == priority
        and task.run_after == run_after
    ):
        return task
    if run_after is None:
        key = (id(task), backend, queue, priority)
        found = _as_enqueued.get(key)
        if found is not None and found[0] is task:
            return found[1]
    copy = object.__new__(type(task))
    for name in _task_fields(type(task)):
        object.__setattr__(copy, name, getattr(task, name))
    object.__setattr__(copy, "backend", backend)
    object.__setattr__(copy, "queue_name", queue)
    object.__setattr__(copy, "priority", priority)
    object.__setattr__(copy, "run_after", run_after)
    if run_after is None:
        if len(_as_enqueued) >= _AS_ENQUEUED_MAX:
            _as_enqueued.clear()
        _as_enqueued[key] = (task, copy)
    return copy


#: (id of a task, backend, queue, priority) -> (that task, its copy as enqueued there):
#: most jobs of a task are enqueued alike, and a run may need its copy for each job.
_as_enqueued: dict[tuple[int, str, str, int], tuple[Task, Task]] = {}
_AS_ENQUEUED_MAX = 4096


def _task_fields(kind: type[Task]) -> tuple[str, ...]:
    found = _fields_of.get(kind)
    if found is None:
        found = _fields_of[kind] = tuple(f.name for f in fields(kind))
    return found


_fields_of: dict[type[Task], tuple[str, ...]] = {}


def to_task_result(job: Job, task: Task | None = None) -> TaskResult:
    """The TaskResult of ``job``, whose task is ``task`` (None: the one at its path), as
    the job was enqueued: its backend, queue, priority and ``run_after``."""
    if task is None:
        task = resolve_task(job.task_path)
    task = task_as_enqueued(task, job.backend, job.queue, job.priority, job.run_after)
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
    values = (
        task,
        result_id(job_id, token),
        status.task_status,
        args,
        kwargs,
        task.backend,
        task_errors(errors) if errors else [],
        list(worker_ids),
        enqueued_at,
        started_at,
        last_attempted_at,
        finished_at,
        return_value,
        progress,
    )
    if _RESULT_FIELDS != _SET_HERE:  # a Django whose TaskResult has changed: its own way
        named = dict(zip(_ORDER, values, strict=True))
        del named["_return_value"]
        made: TaskResult = OutboxTaskResult(**named)
        object.__setattr__(made, "_return_value", return_value)
        return made
    # TaskResult.__init__ would run the arguments through normalize_json again: decoded
    # from JSON, they are JSON's types already, and for quick jobs that second pass cost
    # the worker more than the rest of the result. Its fields are slots: their descriptors
    # set them past the frozen dataclass's __setattr__.
    result: TaskResult = _new(OutboxTaskResult)
    for set_field, value in zip(_SETTERS, values, strict=True):
        set_field(result, value)
    return result


#: The order of build_result's values.
_ORDER = (
    *("task", "id", "status", "args", "kwargs", "backend", "errors", "worker_ids"),
    *("enqueued_at", "started_at", "last_attempted_at", "finished_at", "_return_value"),
    "progress",
)
_new = object.__new__


def _slot_setter(name: str) -> Any:
    for klass in OutboxTaskResult.__mro__:
        descriptor = klass.__dict__.get(name)
        if descriptor is not None and hasattr(descriptor, "__set__"):
            return descriptor.__set__
    return lambda result, value: object.__setattr__(result, name, value)


_SETTERS = [_slot_setter(name) for name in _ORDER]


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
