"""The jobs the benchmarks run: they do nothing, so what is measured is the queue."""

from __future__ import annotations

from typing import Any

from django_outbox.compat import task
from outbox_bench.workerside.outbox_bench_enqueue import result_pk


@task()
def noop() -> None:
    return None


#: The row the retry-storm jobs contend for (created and dropped by the benchmark).
STORM_TABLE = "outbox_bench_storm"


class Contended(Exception):
    """Another job holds the row: try again later."""


def _hold_the_row(job_id: int, hold_ms: float) -> None:
    """Take the one row if nobody holds it, keep it ``hold_ms``, let it go; else Contended."""
    import time

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {STORM_TABLE} SET holder = %s WHERE id = 1 AND holder IS NULL", [job_id]
        )
        if cursor.rowcount != 1:
            raise Contended(f"job {job_id}: the row is held")
        time.sleep(hold_ms / 1000)
        cursor.execute(
            f"UPDATE {STORM_TABLE} SET holder = NULL WHERE id = 1 AND holder = %s", [job_id]
        )


@task(takes_context=True, max_attempts=1000, backoff_base=0.01, backoff_cap=1.0)  # type: ignore[call-overload]
def contend_with_jitter(context: Any, hold_ms: float) -> None:
    """Retries on conflict with the engine's full-jitter backoff."""
    _hold_the_row(result_pk(context.task_result.id), hold_ms)


@task(takes_context=True, max_attempts=1000)  # type: ignore[call-overload]
def contend_on_a_ladder(context: Any, hold_ms: float) -> None:
    """Retries on conflict after exactly 10 ms x 2^(n-1), capped at 1 s: no jitter."""
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox.exceptions import RetryAt

    try:
        _hold_the_row(result_pk(context.task_result.id), hold_ms)
    except Contended as exc:
        delay = min(1.0, 0.01 * 2 ** (context.attempt - 1))
        raise RetryAt(timezone.now() + timedelta(seconds=delay), str(exc)) from exc


def _first_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return str(args[0])


@task(concurrency_key=_first_argument)  # type: ignore[call-overload]
def keyed_noop(key: str) -> None:
    """A no-op whose first argument is its concurrency key (limit 1)."""
    return None


@task()
def unkeyed_noop(key: str) -> None:
    """The same no-op without a key: what ``keyed_noop`` is compared with."""
    return None
