"""The drain benchmark: enqueue N no-op jobs, then time workers emptying the queue."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection

import django_outbox
from django_outbox.bench import pgstats
from django_outbox.models import Job, JobStatus
from django_outbox.worker.loop import MAX_ADAPTIVE_BATCH, default_batch_size
from django_outbox.worker.process import WorkerOptions, run

#: Jobs enqueued one at a time to measure single enqueues (then deleted).
SINGLE_ENQUEUES = 1000
#: Jobs per enqueue_many call when filling the queue.
ENQUEUE_CHUNK = 5000
#: Jobs drained, untimed, in the same shape before the measured drain: a run's first drain
#: also paid for cold caches (the database's pages and plans, the workers' first imports),
#: 20 % slower than the next ones, which the ceiling, measured second, did not.
WARM_UP_JOBS = 1000


@dataclass(frozen=True, slots=True)
class DrainFigures:
    database: str
    jobs: int
    processes: int
    concurrency: int
    batch_size: int
    #: How the batch size was chosen, for the table.
    batch_label: str
    single_enqueue_per_s: float
    bulk_enqueue_per_s: float
    drain_seconds: float
    drain_per_s: float
    statements: int
    statements_per_job: float
    succeeded: int
    #: PostgreSQL only: WAL written from the bulk enqueue to the end of the drain, and
    #: transactions committed during the drain, per job.
    wal_bytes_per_job: float | None
    transactions_per_job: float | None
    #: The largest worker process's peak resident memory.
    peak_rss_mb: float

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("database", self.database),
            ("shape", f"{self.processes} processes x {self.concurrency} threads"),
            ("batch size", self.batch_label),
            ("jobs", f"{self.jobs:,}"),
            ("enqueue, one at a time", f"{self.single_enqueue_per_s:,.0f} jobs/s"),
            ("enqueue, enqueue_many", f"{self.bulk_enqueue_per_s:,.0f} jobs/s"),
            ("drain", f"{self.drain_per_s:,.0f} jobs/s ({self.drain_seconds:.2f} s)"),
            ("worker statements", f"{self.statements:,}"),
            ("statements per job", f"{self.statements_per_job:.3f}"),
            (
                "transactions per job",
                "-" if self.transactions_per_job is None else f"{self.transactions_per_job:.3f}",
            ),
            (
                "WAL per job (enqueue + run)",
                "-" if self.wal_bytes_per_job is None else f"{self.wal_bytes_per_job:,.0f} bytes",
            ),
            ("worker peak RSS", f"{self.peak_rss_mb:.0f} MB (the largest process)"),
            ("succeeded", f"{self.succeeded:,} of {self.jobs:,}"),
        ]


def drain(
    *, jobs: int, processes: int, concurrency: int, batch_size: int | None, queue: str
) -> DrainFigures:
    from django_outbox.bench.tasks import noop

    task = noop.using(queue_name=queue)
    bench_jobs = Job.objects.filter(task_path=noop.module_path)
    bench_jobs.delete()

    singles = min(SINGLE_ENQUEUES, jobs)
    started = time.perf_counter()
    for _ in range(singles):
        task.enqueue()
    single_rate = singles / (time.perf_counter() - started)
    bench_jobs.delete()

    options = WorkerOptions(
        queues=[queue], concurrency=concurrency, batch_size=batch_size, burst=True
    )
    django_outbox.enqueue_many(task, [((), {})] * min(WARM_UP_JOBS, jobs))
    reports: Any = multiprocessing.get_context("fork").Queue()
    run(options, processes=processes, report=reports)
    for _ in range(processes):
        reports.get(timeout=10)
    bench_jobs.delete()

    if connection.vendor == "postgresql":
        # Dead rows from earlier runs would slow this one: start every run from clean pages.
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")

    wal_before = pgstats.wal_position()
    started = time.perf_counter()
    # In calls of ENQUEUE_CHUNK: one call of all the jobs would build every result object at
    # once, and a 1 x T drain runs its worker in this process, whose peak RSS it reports.
    for first in range(0, jobs, ENQUEUE_CHUNK):
        django_outbox.enqueue_many(task, [((), {})] * min(ENQUEUE_CHUNK, jobs - first))
    bulk_rate = jobs / (time.perf_counter() - started)
    commits_before = pgstats.commits()

    started = time.perf_counter()
    run(options, processes=processes, report=reports)
    seconds = time.perf_counter() - started
    stats = [reports.get(timeout=10) for _ in range(processes)]
    commits_after, wal_after = pgstats.commits(), pgstats.wal_position()

    statements = sum(s["statements"] for s in stats)
    succeeded = bench_jobs.filter(status=JobStatus.SUCCEEDED).count()
    bench_jobs.delete()
    return DrainFigures(
        database=connection.vendor,
        jobs=jobs,
        processes=processes,
        concurrency=concurrency,
        batch_size=batch_size or default_batch_size(concurrency),
        batch_label=str(batch_size)
        if batch_size
        else f"{default_batch_size(concurrency)}, more for quick jobs (up to {MAX_ADAPTIVE_BATCH})",
        single_enqueue_per_s=single_rate,
        bulk_enqueue_per_s=bulk_rate,
        drain_seconds=seconds,
        drain_per_s=jobs / seconds,
        statements=statements,
        statements_per_job=statements / jobs,
        succeeded=succeeded,
        wal_bytes_per_job=per_job(wal_before, wal_after, jobs),
        # Less the two reads of the counter themselves.
        transactions_per_job=per_job(commits_before, commits_after, jobs, less=2),
        peak_rss_mb=max(s["peak_rss_kb"] for s in stats) / 1024,
    )


def per_job(before: int | None, after: int | None, jobs: int, less: int = 0) -> float | None:
    if before is None or after is None:
        return None
    return max(0, after - before - less) / jobs
