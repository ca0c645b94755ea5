"""What a running job may know of the jobs queued behind it on its worker.

A task whose runs each need rows from the database (a webhook delivery loads its
delivery, message and endpoint) can load them for the jobs waiting behind it in the same
query, so those runs find theirs at hand and no run waits for others to gather.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django_outbox.jobs.types import ClaimedJob

_thread = threading.local()


def serve(behind: Callable[[int], list[ClaimedJob]]) -> None:
    """Called by each of a worker's job threads: ``behind(n)`` gives up to ``n`` jobs behind
    the one the thread runs (started since by other threads, or not started yet), in the
    order they started or will start."""
    _thread.waiting = behind


def upcoming(task_path: str, limit: int) -> list[ClaimedJob]:
    """Jobs of ``task_path`` behind the running one on this worker, next first, among the
    next ``limit``; none outside a worker's job thread."""
    waiting = getattr(_thread, "waiting", None)
    if waiting is None:
        return []
    return [job for job in waiting(limit) if job.task_path == task_path]
