"""Asking a running job to stop: the flag its task reads through ``context.cancelled()``.

Python cannot stop a thread, so cancelling a running job is a request: the worker learns of
it at its next heartbeat and sets the job's flag; the task checks it where stopping is safe
and returns or raises. A run that raises after the request ends the job as cancelled, never
retried; a run that returns normally has done its work and succeeded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from django_outbox.compat import TaskContext
from django_outbox.exceptions import Cancelled

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
    """Django's TaskContext, plus whether someone asked this run to stop."""

    cancel_flag: Flag = field(default_factory=Flag, repr=False)

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
