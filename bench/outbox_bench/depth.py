"""The depth benchmark: the drain at several queue depths, so that a cost per job that
grows with the work shows as a falling rate.

For each size (say 10,000, 100,000 and 1,000,000 queued jobs) it enqueues the jobs with
``enqueue_many`` and times ``runworker --burst`` processes emptying the queue, as ``drain``
does: on PostgreSQL the empty table is vacuumed and analysed before the enqueue, so each
round starts from clean pages (on MariaDB and MySQL each timed phase waits for InnoDB to
purge the rows the phase before it deleted, for the same reason), and the drain meets
statistics taken on an empty table, as a queue that fills after a quiet spell does
(nothing vacuums between the enqueue and the end of the drain: CI's server runs without
autovacuum). Beside it, in the same round, the
same size through the two ceilings: a plain insert of rows of the same columns (``COPY``
on PostgreSQL, a multi-row ``INSERT`` elsewhere) for the enqueue, and the raw-SQL queue
(``ceiling``) for the drain. Rounds interleave ours and the ceilings; the figures are
medians.

``finished`` keeps that many finished jobs in the table through every round (retention on,
a week of history): written once, as plain rows, before the first round.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models import Model
from django.db.models.fields import AutoFieldMixin

import django_outbox
from django_outbox.models import Job, JobStatus
from outbox_bench import ceiling
from outbox_bench.drain import drain

#: Rows per statement of the plain multi-row INSERT (MariaDB, SQLite).
PLAIN_ROWS = 1000
#: Jobs per enqueue_many call, as drain enqueues them.
ENQUEUE_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class DepthFigures:
    jobs: int
    rounds: int
    #: Medians over the rounds.
    enqueue_per_s: float
    plain_insert_per_s: float
    drain_per_s: float
    statements_per_job: float | None
    transactions_per_job: float | None
    wal_bytes_per_job: float | None
    worker_cpu_us_per_job: float | None
    #: The raw-SQL queue's drain of the same number of jobs (None where it does not run).
    ceiling_per_s: float | None
    #: What the plain insert was: "COPY" or "multi-row INSERT".
    plain_insert: str


def run(
    *,
    sizes: list[int],
    rounds: int,
    processes: int,
    concurrency: int,
    queue: str,
    finished: int = 0,
    worker_dir: Path | None = None,
    with_ceiling: bool = True,
    logging: str = "project",
) -> list[DepthFigures]:
    """Each size's figures, from the smallest up."""
    from outbox_bench.tasks import noop

    history = Job.objects.filter(task_path=f"{noop.module_path}_history")
    if finished:
        keep_finished(finished)
    try:
        return [
            _one_size(
                jobs, rounds, processes, concurrency, queue, worker_dir, with_ceiling, logging
            )
            for jobs in sorted(sizes)
        ]
    finally:
        history.delete()


def _one_size(
    jobs: int,
    rounds: int,
    processes: int,
    concurrency: int,
    queue: str,
    worker_dir: Path | None,
    with_ceiling: bool,
    logging: str,
) -> DepthFigures:
    enqueues, plains, drains, ceilings = [], [], [], []
    runs = []
    for _ in range(rounds):
        enqueues.append(enqueue_rate(jobs, queue))
        plains.append(plain_insert_rate(jobs, queue))
        ran = drain(
            jobs=jobs,
            processes=processes,
            concurrency=concurrency,
            batch_size=None,
            queue=queue,
            worker_dir=worker_dir,
            logging=logging,
        )
        runs.append(ran)
        drains.append(ran.drain_per_s)
        if with_ceiling and ceiling.available():
            ceilings.append(ceiling.drain(jobs, processes, concurrency).per_s)
    return DepthFigures(
        jobs=jobs,
        rounds=rounds,
        enqueue_per_s=statistics.median(enqueues),
        plain_insert_per_s=statistics.median(plains),
        drain_per_s=statistics.median(drains),
        statements_per_job=_median([r.statements_per_job for r in runs]),
        transactions_per_job=_median([r.transactions_per_job for r in runs]),
        wal_bytes_per_job=_median([r.wal_bytes_per_job for r in runs]),
        worker_cpu_us_per_job=_median([r.worker_cpu_us_per_job for r in runs]),
        ceiling_per_s=statistics.median(ceilings) if ceilings else None,
        plain_insert="COPY" if connection.vendor == "postgresql" else "multi-row INSERT",
    )


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def enqueue_rate(jobs: int, queue: str) -> float:
    """``enqueue_many`` of ``jobs`` no-op jobs in one transaction, in calls of
    ENQUEUE_CHUNK; jobs/s. The jobs are deleted after."""
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)
    bench_jobs = Job.objects.filter(task_path=noop.module_path)
    bench_jobs.delete()
    _settle(jobs)
    started = time.perf_counter()
    with transaction.atomic():
        for first in range(0, jobs, ENQUEUE_CHUNK):
            django_outbox.enqueue_many(task, [((), {})] * min(ENQUEUE_CHUNK, jobs - first))
    rate = jobs / (time.perf_counter() - started)
    bench_jobs.delete()
    return rate


def plain_insert_rate(jobs: int, queue: str) -> float:
    """The same rows (one job's every column) put in by the leanest plain statement, in
    one transaction: ``COPY`` on PostgreSQL, multi-row ``INSERT``s elsewhere; jobs/s,
    its commit included (as a writer's is)."""
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)
    bench_jobs = Job.objects.filter(task_path=noop.module_path)
    bench_jobs.delete()
    django_outbox.enqueue_many(task, [((), {})])
    columns = plain_columns(Job)
    (row,) = stored_rows(Job, columns, "task_path = %s", [noop.module_path])
    bench_jobs.delete()
    _settle(jobs)
    with transaction.atomic():
        seconds = plain_insert(Job, columns, [row] * jobs)
        committing = time.perf_counter()
    rate = jobs / (seconds + time.perf_counter() - committing)  # the commit is the work's too
    bench_jobs.delete()
    return rate


def plain_columns(model: type[Model]) -> list[str]:
    """The columns of ``model`` a plain insert writes: all but an automatic primary key."""
    return [
        str(f.column)
        for f in model._meta.concrete_fields
        if not (f.primary_key and isinstance(f, AutoFieldMixin))
    ]


def stored_rows(
    model: type[Model], columns: list[str], where: str, params: list[Any]
) -> list[list[Any]]:
    """The rows of ``model`` matching ``where``, as the database has them (``columns``, in
    primary key order): what a plain insert writes again."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    table, key = quote(model._meta.db_table), quote(str(model._meta.pk.column))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {names} FROM {table} WHERE {where} ORDER BY {key}", params)
        return [list(row) for row in cursor.fetchall()]


def plain_insert(model: type[Model], columns: list[str], rows: list[list[Any]]) -> float:
    """Put ``rows`` (values of ``columns``) into ``model``'s table by the leanest plain
    statement, in the current transaction: ``COPY`` on PostgreSQL, multi-row ``INSERT``s of
    PLAIN_ROWS rows elsewhere; the seconds it took."""
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    table = quote(model._meta.db_table)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            raw: Any = cursor.cursor  # psycopg's own cursor: COPY
            with raw.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            most = connection.features.max_query_params
            per = min(PLAIN_ROWS, most // len(columns)) if most else PLAIN_ROWS
            placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
            for first in range(0, len(rows), per):
                chunk = rows[first : first + per]
                values = ", ".join([placeholders] * len(chunk))
                cursor.execute(
                    f"INSERT INTO {table} ({names}) VALUES {values}",
                    [value for row in chunk for value in row],
                )
    return time.perf_counter() - started


def _settle(jobs: int) -> None:
    """On MariaDB and MySQL, wait for InnoDB to purge the rows an earlier phase deleted,
    so that no phase is timed beside the clean-up of the one before."""
    if connection.vendor == "mysql":
        from outbox_bench.mariadb import wait_for_purge

        wait_for_purge(jobs)


def keep_finished(count: int) -> None:
    """Write ``count`` finished (succeeded) jobs of a task no worker runs, finished over
    the last seven days: a table with retention on and a week of history."""
    from outbox_bench.tasks import noop

    path = f"{noop.module_path}_history"
    Job.objects.filter(task_path=path).delete()
    now = datetime.now(UTC)
    template = Job(task_path=path, status=JobStatus.SUCCEEDED, attempts=1, worker_ids=["h"])
    template.started_at = template.last_attempted_at = template.finished_at = now
    if connection.vendor == "postgresql":
        # One statement: the template's row copied count times, each finished a little
        # earlier (a bulk_create of millions would take longer than the benchmark).
        template.save()
        columns = [str(f.column) for f in Job._meta.concrete_fields if not f.primary_key]
        spread = {"enqueued_at", "run_at", "started_at", "last_attempted_at", "finished_at"}
        values = [
            f"{c} - make_interval(secs => (g %% 604800))" if c in spread else c for c in columns
        ]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO django_outbox_job ({', '.join(columns)}) "
                f"SELECT {', '.join(values)} FROM django_outbox_job, generate_series(2, %s) g "
                "WHERE id = %s",
                [count, template.pk],
            )
        return
    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    rows = []
    for n in range(count):
        job = Job(**{f.attname: getattr(template, f.attname) for f in fields})
        at = now - timedelta(seconds=n % 604800)
        job.enqueued_at = job.run_at = job.started_at = job.last_attempted_at = at
        job.finished_at = at
        rows.append(job)
        if len(rows) == ENQUEUE_CHUNK:
            Job.objects.bulk_create(rows)
            rows = []
    if rows:
        Job.objects.bulk_create(rows)
