"""Asking a running job to stop: the flag its task reads through ``context.cancelled()``.

Python cannot stop a thread, so cancelling a running job is a request: the worker learns of
it at its next heartbeat and sets the job's flag; the task checks it where stopping is safe
and returns or raises. A run that raises after the request ends the job as cancelled, never
retried; a run that returns normally has done its work and succeeded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django_outbox.compat import TaskContext
from django_outbox.exceptions import Cancelled
from django_outbox.jobs import progress as job_progress
from django_outbox.lib.resultids import parse_result_id

#: A progress report this soon after the last one written is skipped (one that reaches its
#: total never is): a task may report in a tight loop without a write per item.
PROGRESS_EVERY_SECONDS = 0.5

_lock = threading.Lock()
_flags: dict[int, Flag] = {}


class Flag:
    """A run's stop request: set by the worker's main thread, read by the task's thread.
    Nobody waits on it, so it is a plain attribute, not a ``threading.Event`` (whose lock
    and condition cost a quick job more than its own run)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxTaskContext(TaskContext):  # type: ignore[misc]
    """Django's TaskContext, plus whether someone asked this run to stop, the results of
    the workflow steps it waited for, and a way to report progress."""

    cancel_flag: Flag = field(default_factory=Flag, repr=False)
    #: A workflow step's: the results of the steps it waits for, in the order it named
    #: them (None for one that did not succeed); empty for a job outside a workflow.
    upstream_results: list[Any] = field(default_factory=list)
    #: When progress was last written (monotonic).
    _progress_state: list[Any] = field(default_factory=lambda: [0.0], repr=False)

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Say how far this run has come: ``done`` of ``total``, with a short note. The
        job's result (``get_result()``), its workflow and the admin show it. A report within
        half a second of the last one written is skipped, unless it reaches the total."""
        report = job_progress.checked(done, total, note)
        state = self._progress_state
        now = time.monotonic()
        finished = report.total is not None and report.done >= report.total
        if now - state[0] < PROGRESS_EVERY_SECONDS and not finished:
            return
        state[0] = now
        job_id, _token = parse_result_id(self.task_result.id)
        job_progress.record(job_id, report)

    def cancelled(self) -> bool:
        """True once cancellation was requested (seen at the worker's next heartbeat)."""
        return self.cancel_flag.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise Cancelled when cancellation was requested: the job ends as cancelled."""
        if self.cancel_flag.is_set():
            raise Cancelled("the job was asked to stop, and stopped")


def flag_for(job_id: int) -> Flag:
    """The flag of a run starting now (until ``forget``)."""
    with _lock:
        flag = _flags[job_id] = Flag()
        return flag


def forget(job_id: int, flag: Flag) -> None:
    """Drop the flag of a run that ended (not that of a later run of the same job)."""
    with _lock:
        if _flags.get(job_id) is flag:
            del _flags[job_id]


def request(job_id: int) -> None:
    """Set the flag of a run of this process, if one is running."""
    with _lock:
        flag = _flags.get(job_id)
    if flag is not None:
        flag.set()
