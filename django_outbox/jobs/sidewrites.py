"""Rows a run writes with its job's outcome, in the outcome's own transaction.

A task that records something about its run (a webhook delivery logs its attempt) hands
the write to the worker rather than making it itself: the run's thread is free for the
next job at once, the records of many runs go in one statement per writer, and a record
and its job's outcome commit together, so neither is ever seen without the other.

Outside a worker (a task called directly, or run by another backend) nothing collects the
writes: ``defer`` says so, and the task writes at once, itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django_outbox.jobs.types import Outcome, Writer

_running = threading.local()


@contextmanager
def collecting() -> Iterator[list[tuple[Writer, Any]]]:
    """Collect the writes ``defer`` is given on this thread while the block runs (one
    job's run)."""
    writes: list[tuple[Writer, Any]] = []
    outer = getattr(_running, "writes", None)
    _running.writes = writes
    try:
        yield writes
    finally:
        _running.writes = outer


def defer(writer: Writer, item: Any) -> bool:
    """Have ``writer`` write ``item`` with the running job's outcome. False when no worker
    collects this thread's writes: the caller must write ``item`` itself."""
    writes = getattr(_running, "writes", None)
    if writes is None:
        return False
    writes.append((writer, item))
    return True


def write(outcomes: Iterable[Outcome]) -> list[Callable[[], None]]:
    """Make the outcomes' deferred writes: one call per writer, its items in run order.
    Returns what the writers want done once the transaction is over."""
    batches: dict[Writer, list[Any]] = {}
    for outcome in outcomes:
        for writer, item in outcome.writes:
            batches.setdefault(writer, []).append(item)
    then = [writer(items) for writer, items in batches.items()]
    return [after for after in then if after is not None]
