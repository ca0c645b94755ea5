"""Tasks the tests enqueue. Module level, as django.tasks requires."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.utils import timezone

from django_outbox.compat import TaskContext, task
from django_outbox.exceptions import RateLimited, RetryAt
from django_outbox.jobs import sidewrites
from django_outbox.lib.resultids import parse_result_id
from tests.models import Execution, Once


@task()
def noop() -> None:
    return None


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task()
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(max_attempts=3, backoff_base=0.01, backoff_cap=0.02)
def always_fails(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True, max_attempts=4, backoff_base=0.01, backoff_cap=0.02)
def fails_then_succeeds(context: TaskContext, failures: int) -> int:
    if context.attempt <= failures:
        raise ConnectionError(f"attempt {context.attempt} fails")
    return context.attempt


@task(takes_context=True)
def report_attempt(context: TaskContext) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(max_attempts=1)
def raises_system_exit() -> None:
    raise SystemExit(3)


@task(max_attempts=1)
def raises_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


@task(max_attempts=1)
def returns_object() -> object:
    return object()


@task(max_attempts=1)
def returns_nul() -> str:
    return "PostgreSQL's jsonb cannot hold \x00"


@task(max_attempts=1)
def record_once(key: str) -> str:
    Once.objects.create(key=key)
    return key


@task(takes_context=True, queue_name="slow", max_attempts=5)
def record_run(context: TaskContext, key: str, seconds: float = 0.0) -> str:
    """Record the start of this run, sleep, record its end."""
    execution = Execution.objects.create(
        job_id=parse_result_id(context.task_result.id).pk,
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
        key=key,
        started=timezone.now(),
    )
    time.sleep(seconds)
    execution.finished = timezone.now()
    # Its end must be on record even when the database blips (the chaos run cuts
    # connections): try again for up to 30 s before giving up.
    for tries in range(60):
        try:
            execution.save(update_fields=["finished"])
            break
        except DatabaseError:
            connection.close()
            if tries == 59:
                raise
            time.sleep(0.5)
    return key


@task(timeout=0.2, max_attempts=1)
def overruns(seconds: float) -> None:
    time.sleep(seconds)


@task(takes_context=True, timeout=0.2, max_attempts=1)
def stops_when_told(context: TaskContext, seconds: float) -> str:
    """Works in small steps for up to ``seconds``, stopping early once cancelled; records
    in its Execution row's key whether it was told to stop."""
    execution = Execution.objects.create(
        job_id=parse_result_id(context.task_result.id).pk,
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
        started=timezone.now(),
    )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not context.cancelled():
        time.sleep(0.01)
    execution.key = "told to stop" if context.cancelled() else "ran to the end"
    execution.finished = timezone.now()
    execution.save(update_fields=["key", "finished"])
    return execution.key


@task(takes_context=True, max_attempts=1)
def held_back_once(context: TaskContext) -> str:
    """Holds itself back 0.3 s on its first run (RateLimited), then succeeds."""
    _, first_time = Once.objects.get_or_create(key=f"held-{context.task_result.id}")
    if first_time:
        raise RateLimited(timezone.now() + timedelta(seconds=0.3), "over my own limit")
    return "sent"


@task(queue_name="emails")
def email(to: str) -> str:
    return to


@task(takes_context=True, timeout=0.2, max_attempts=2, backoff_base=0.01, backoff_cap=0.02)
def overruns_first_time(context: TaskContext) -> int:
    """The first attempt runs far over its timeout; the second is quick."""
    execution = Execution.objects.create(
        job_id=parse_result_id(context.task_result.id).pk,
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
        key="overrun",
        started=timezone.now(),
    )
    if context.attempt == 1:
        time.sleep(1.5)
    execution.finished = timezone.now()
    execution.save(update_fields=["finished"])
    return context.attempt


@task(unique_key="rebuild-search-index")
def rebuild_index() -> None:
    return None


def _report_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    return f"report-{args[0]}" if args else None


@task(unique_key=_report_key)
def build_report(*args: Any) -> None:
    return None


@task(takes_context=True, max_attempts=3)
def stops_when_cancelled(context: TaskContext, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        context.raise_if_cancelled()  # type: ignore[attr-defined]
        time.sleep(0.02)
    return "ran to the end"


@task(takes_context=True)
def finishes_anyway(context: TaskContext, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not context.cancelled():  # type: ignore[attr-defined]
        time.sleep(0.02)
    return f"saw the request: {context.cancelled()}; finished my work"  # type: ignore[attr-defined]


class UnprintableError(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message for you")


@task(max_attempts=1)
def raises_unprintable() -> None:
    raise UnprintableError


@task(max_attempts=3, backoff_base=0.01, backoff_cap=0.02)
def returns_datetime() -> object:
    now = timezone.now()
    Execution.objects.create(job_id=0, attempt=0, worker="", key="returns_datetime", started=now)
    return now


@task()
def countdown(n: int) -> int:
    """Enqueues itself with n - 1 until 0: a chain of n + 1 jobs, one after the other."""
    if n > 0:
        countdown.enqueue(n - 1)
    return n


#: The keys of each batch ``write_executions`` wrote, appended once its transaction is over.
deferred_batches: list[list[str]] = []


def write_executions(items: list[tuple[int, int, str]]) -> Callable[[], None]:
    """A sidewrites writer: one Execution row per (job id, attempt, key), in one statement."""
    Execution.objects.bulk_create(
        Execution(
            job_id=job_id, attempt=attempt, worker="deferred", key=key, started=timezone.now()
        )
        for job_id, attempt, key in items
    )
    keys = [key for _, _, key in items]
    return lambda: deferred_batches.append(keys)


@task(takes_context=True, max_attempts=2, backoff_base=0.01, backoff_cap=0.02)
def records_with_its_outcome(context: TaskContext, key: str, then: str = "return") -> str:
    """Defers an Execution row to be written with the job's outcome (or writes it itself,
    outside a worker), then returns, raises RetryAt (``then="retry"``) or fails
    (``then="fail"``). ``then="duplicate"`` defers a row the database refuses (an Execution
    row for this run exists already)."""
    job_id = parse_result_id(context.task_result.id).pk
    item = (job_id, context.attempt, key)
    if then == "duplicate":
        write_executions([item])
    if not sidewrites.defer(write_executions, item):
        write_executions([item])
    if then == "retry" and context.attempt == 1:
        raise RetryAt(timezone.now(), "once more")
    if then == "fail":
        raise ValueError("failed after recording")
    return key


# -- workflows ------------------------------------------------------------------------


@task()
def double(x: int) -> int:
    return 2 * x


@task()
def total(values: list[int], plus: int = 0) -> int:
    return sum(values) + plus


@task(max_attempts=1)
def fails_for_good(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def upstream_seen(context: TaskContext, label: str) -> dict[str, Any]:
    """What a workflow step sees of the steps it waits for."""
    return {"label": label, "upstream": list(context.upstream_results)}  # type: ignore[attr-defined]


@task(takes_context=True)
def reports_progress(context: TaskContext, items: int) -> int:
    for done in range(1, items + 1):
        context.progress(done, items, f"item {done}")  # type: ignore[attr-defined]
    return items


@task(takes_context=True)
def reports_progress_then_waits(context: TaskContext, seconds: float) -> str:
    context.progress(3, 10, "three of ten")  # type: ignore[attr-defined]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not context.cancelled():  # type: ignore[attr-defined]
        time.sleep(0.02)
    return "stopped" if context.cancelled() else "done"  # type: ignore[attr-defined]


@task(takes_context=True)
def adds_to_its_batch(context: TaskContext, count: int) -> int:
    from django_outbox import workflows

    workflows.add_to_batch(context, *(workflows.step(double, n) for n in range(count)))
    return count


@task(takes_context=True)
def reports_inside_a_transaction(context: TaskContext) -> str:
    from django.db import transaction

    with transaction.atomic():
        context.progress(1, 2, "inside")  # type: ignore[attr-defined]
    return "done"


def _record(context: TaskContext, key: str, seconds: float) -> None:
    """Record this run (its start and end) as ``key``."""
    execution = Execution.objects.create(
        job_id=parse_result_id(context.task_result.id).pk,
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
        key=key,
        started=timezone.now(),
    )
    time.sleep(seconds)
    execution.finished = timezone.now()
    execution.save(update_fields=["finished"])


def _customer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return f"customer-{args[0]}"


@task(takes_context=True, concurrency_key=_customer, concurrency_limit=2, max_attempts=1)
def per_customer(context: TaskContext, customer: int, n: int, seconds: float = 0.0) -> int:
    """At most two runs per customer at once."""
    _record(context, f"{customer}:{n}", seconds)
    return n


def _order(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return f"order-{args[0]}"


@task(
    takes_context=True,
    sequence_key=_order,
    max_attempts=3,
    backoff_base=0.01,
    backoff_cap=0.05,
)
def in_sequence(
    context: TaskContext, order: int, n: int, failures: int = 0, seconds: float = 0.0
) -> int:
    """The steps of an order, one at a time, in order; the first ``failures`` runs fail."""
    _record(context, f"{order}:{n}", seconds)
    if context.attempt <= failures:
        raise RuntimeError(f"step {n} of order {order} failed (attempt {context.attempt})")
    return n


@task(takes_context=True, sequence_key=_order, sequence_on_failure="continue", max_attempts=1)
def in_sequence_going_on(context: TaskContext, order: int, n: int, fail: bool = False) -> int:
    """A sequence that goes on past a job that failed for good."""
    _record(context, f"{order}:{n}", 0.0)
    if fail:
        raise RuntimeError(f"step {n} of order {order} failed")
    return n


def _tenant(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return f"tenant-{args[0]}"


@task(takes_context=True, rate_key=_tenant, rate_limit=5, rate_burst=1, max_attempts=1)
def per_tenant(context: TaskContext, tenant: int, n: int) -> int:
    """At most five runs a second per tenant."""
    _record(context, f"{tenant}:{n}", 0.0)
    return n


@task(takes_context=True, sequence_key=_order, max_attempts=5, backoff_base=0.01, backoff_cap=0.05)
def in_sequence_slow_first(context: TaskContext, order: int, n: int, seconds: float) -> int:
    """A step of ``in_sequence``'s orders (the same key) whose first run takes ``seconds``
    (long enough to kill its worker during it) and whose later runs take none."""
    _record(context, f"{order}:{n}", seconds if context.attempt == 1 else 0.0)
    return n


def _as_run(context: TaskContext) -> dict[str, Any]:
    """What a run's context says of the job: its result as the task sees it."""
    result = context.task_result
    run_after = result.task.run_after
    return {
        "id": result.id,
        "backend": result.backend,
        "task_backend": result.task.backend,
        "queue_name": result.task.queue_name,
        "priority": result.task.priority,
        "run_after": run_after.isoformat() if run_after is not None else None,
    }


@task(takes_context=True)
def reports_its_result(context: TaskContext, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return _as_run(context)


@task(takes_context=True)
async def reports_its_result_async(context: TaskContext, *args: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return _as_run(context)


@task(takes_context=True, unique_key="the-one-report")
def reports_its_result_once(context: TaskContext) -> dict[str, Any]:
    return _as_run(context)
