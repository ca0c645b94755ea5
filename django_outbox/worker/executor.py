"""Runs one claimed job in a pool thread and classifies how it ended. No SQL here."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from inspect import iscoroutinefunction
from traceback import format_exception, format_exception_only
from typing import Any

from django.core.signals import setting_changed
from django.db import connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver

from django_outbox import telemetry
from django_outbox.compat import (
    Task,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from django_outbox.exceptions import Cancelled, PermanentFailure, RateLimited, RetryAt
from django_outbox.jobs import ratekeys, sidewrites, steps
from django_outbox.jobs.jsonvalues import storable_problem
from django_outbox.jobs.observers import heard
from django_outbox.jobs.results import build_result, resolve_task, task_as_enqueued, task_errors
from django_outbox.jobs.types import ClaimedJob, Outcome
from django_outbox.lib.resultids import result_id
from django_outbox.models import JobStatus
from django_outbox.task import OutboxTask
from django_outbox.worker import cancellation


@lru_cache(maxsize=4096)
def cached_task(path: str) -> Task:
    return resolve_task(path)


@lru_cache(maxsize=4096)
def _runner(path: str) -> Callable[..., Any]:
    """What runs the task at ``path``: its function itself when ``Task.call`` would only
    call it (a plain function, ``call`` not overridden), which spares each run ``call``'s
    look at whether the function is a coroutine; else the task's ``call``."""
    task = cached_task(path)
    if type(task).call is Task.call and not iscoroutinefunction(task.func):
        return task.func
    return task.call


def error_record(exc: BaseException, frames: bool = True) -> dict[str, str]:
    """What a run that raised ``exc`` stores. Without ``frames`` (a task's RetryAt, which
    says itself what happened and when to run again), the one line a traceback ends with,
    not the frames of the worker it went through."""
    kind = type(exc)
    text = format_exception(exc) if frames else format_exception_only(exc)
    return {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        # NUL cannot be stored in PostgreSQL's jsonb: show it, do not store it.
        "traceback": "".join(text).replace("\x00", "\\x00"),
    }


def claimed_job_result(
    task: Task,
    job: ClaimedJob,
    status: JobStatus = JobStatus.RUNNING,
    outcome: Outcome | None = None,
) -> Any:
    """The TaskResult of a claimed job: running, or as ``outcome`` left it."""
    return build_result(
        task=task_as_enqueued(task, job.backend, job.queue, job.priority, job.run_after),
        job_id=job.id,
        token=job.token,
        status=status,
        args=job.args,
        kwargs=job.kwargs,
        errors=outcome.errors if outcome else job.errors,
        worker_ids=job.worker_ids,
        return_value=outcome.return_value if outcome else None,
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        last_attempted_at=job.last_attempted_at,
        finished_at=outcome.finished_at if outcome else None,
    )


#: Per thread: whether it ever opened a database connection (most quick jobs do not).
_opened = threading.local()


@receiver(connection_created)
def _note_connection(**kwargs: Any) -> None:
    _opened.any = True


def tidy_connections() -> None:
    """Keep this thread's database connections between jobs, unless one is broken.

    Unlike a request, a job thread lives as long as its worker: opening a new connection
    for every job (what CONN_MAX_AGE = 0 means for requests) would cost more than most
    jobs. A connection that saw an error and no longer answers, or that a job left
    outside autocommit, is closed so the next job starts clean.
    """
    if not getattr(_opened, "any", False):
        return  # nothing to tidy, and looking costs a quick job more than its run
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close()
        elif conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


def execute(job: ClaimedJob, tidy: bool = True) -> Outcome:
    """Run ``job``; every exception, SystemExit and KeyboardInterrupt included, fails the
    job and never the worker. The outcome carries the TaskResult sent with task_started,
    for the worker to finish and send with task_finished once the outcome is stored.

    ``tidy``: close this thread's broken connections afterwards (a worker thread's; not
    in a test, whose connection holds the test's transaction)."""
    flag = cancellation.flag_for(job.id)
    result = None
    measuring = telemetry.measuring()
    began = time.perf_counter() if measuring else 0.0
    with sidewrites.collecting() as writes:
        try:
            task = cached_task(job.task_path)
            if task.takes_context or heard(task_started):
                result = claimed_job_result(task, job)
                task_started.send(backend_class(result.task), task_result=result)
            with telemetry.run_span(
                job.task_path,
                job.queue,
                result.id if result is not None else result_id(job.id, job.token),
                job.attempts,
                job.trace_context,
            ):
                outcome = _run(task, job, flag, result)
                telemetry.run_failed(outcome.error)
        except BaseException as exc:
            outcome = _raised(job, flag, exc)
        finally:
            cancellation.forget(job.id, flag)
            if tidy:
                tidy_connections()
    outcome.result = result
    outcome.writes = writes
    if measuring:
        _measure(job, began)
    return outcome


def _run(task: Task, job: ClaimedJob, flag: Any, result: Any) -> Outcome:
    try:
        args = job.args
        upstream: list[Any] = []
        # Only a step that waits for others, and takes their results as an argument or
        # can read them in its context, reads them.
        if job.receives is not None and (job.receives or task.takes_context):
            given = steps.inputs(job.id, job.receives)
            args, upstream = given.arguments(job.args), given.results
        kwargs = job.kwargs
        if isinstance(task, OutboxTask) and task.rate_key is not None:
            kwargs = ratekeys.wait_for_turn(task, job.args, kwargs, job.attempts)
        if task.takes_context:
            context = cancellation.OutboxTaskContext(
                task_result=result, cancel_flag=flag, upstream_results=upstream
            )
            value = _runner(job.task_path)(context, *args, **kwargs)
        else:
            value = _runner(job.task_path)(*args, **kwargs)
    except BaseException as exc:
        return _raised(job, flag, exc)
    return _returned(job, flag, value)


def _measure(job: ClaimedJob, began: float) -> None:
    """The run's time, and for a first attempt how long the job waited past its due time
    (or its enqueue, when it was due at once) before a worker took it."""
    pickup = None
    if job.attempts == 1:
        due = max(job.run_at, job.enqueued_at)
        pickup = (job.last_attempted_at - due).total_seconds()
    telemetry.run_timed(job.task_path, job.queue, pickup, time.perf_counter() - began)


def _returned(job: ClaimedJob, flag: Any, value: Any) -> Outcome:
    try:
        stored = json_return_value(job, value)
    except TypeError as exc:
        if flag.is_set():  # cancelled, or timed out, meanwhile: that is what it was
            return Outcome(job, succeeded=False, error=error_record(exc), cancelled=True)
        # The task ran to its end: a retry would repeat its work to return the same.
        return Outcome(job, succeeded=False, error=error_record(exc), final=True)
    return Outcome(job, succeeded=True, return_value=stored)


def _raised(job: ClaimedJob, flag: Any, exc: BaseException) -> Outcome:
    if flag.is_set() or isinstance(exc, Cancelled):
        return Outcome(job, succeeded=False, error=error_record(exc), cancelled=True)
    if isinstance(exc, RateLimited):
        return Outcome(job, succeeded=False, held_until=exc.at, new_kwargs=exc.kwargs)
    if isinstance(exc, RetryAt):
        return Outcome(job, succeeded=False, error=error_record(exc, frames=False), retry_at=exc.at)
    if isinstance(exc, PermanentFailure):
        return Outcome(job, succeeded=False, error=error_record(exc), final=True)
    return Outcome(job, succeeded=False, error=error_record(exc))


def finished_result(task: Task, outcome: Outcome, status: JobStatus) -> Any:
    """The TaskResult to send with task_finished: the run's own, from task_started, brought
    up to date (as ``TaskResult.refresh()`` does), or a new one for a run that had none."""
    result = outcome.result
    if result is None:
        return claimed_job_result(task, outcome.job, status, outcome)
    update = object.__setattr__
    update(result, "status", status.task_status)
    update(result, "errors", task_errors(outcome.errors))
    update(result, "finished_at", outcome.finished_at)
    update(result, "_return_value", outcome.return_value)
    return result


def send_finished(outcome: Outcome, status: JobStatus) -> None:
    """Send task_finished for a run whose outcome is stored and final (``status``). A task
    path that no longer imports has no TaskResult to send: the job row says it all."""
    failed = status.task_status == TaskResultStatus.FAILED
    if not heard(task_finished, logging.ERROR if failed else logging.INFO):
        return
    try:
        task = cached_task(outcome.job.task_path)
    except Exception:
        return
    result = finished_result(task, outcome, status)
    task_finished.send(backend_class(result.task), task_result=result)


def backend_class(task: Task) -> type:
    """The class of ``task``'s backend, which the task signals name as their sender."""
    found = _backend_classes.get(task.backend)
    if found is None:
        found = _backend_classes[task.backend] = type(task.get_backend())
    return found


#: TASKS alias -> its backend's class (looking the backend up costs more than a no-op job).
_backend_classes: dict[str, type] = {}


@receiver(setting_changed)
def _forget_backend_classes(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _backend_classes.clear()


def json_return_value(job: ClaimedJob, value: Any) -> Any:
    if value is None:  # most tasks return nothing: nothing to check
        return None
    try:
        value = normalize_json(value)
        problem = storable_problem(value)
    except (TypeError, ValueError) as exc:
        problem = str(exc)
    except RecursionError:
        problem = "it is nested too deeply, or contains itself"
    if problem is not None:
        raise TypeError(
            f"Task {job.task_path!r} returned a value JSON cannot hold ({problem}); "
            "return str, int, float, bool, None, or lists and dicts of them."
        )
    return value
