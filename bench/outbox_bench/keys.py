"""The keys benchmark: what concurrency keys cost, through ``runworker`` processes.

1. **Drain**: N no-op jobs over K keys with ``concurrency_limit=1``, against the same jobs
   without keys, in interleaved rounds, each drained by ``runworker --burst`` processes
   started as a user starts them, the jobs enqueued from this process. Figures come from
   the job rows (first start to last finish) and the statements the workers report.
2. **Claims behind a busy key**: the claim of M other jobs, batch by batch, with and
   without ``stuck`` jobs held behind one busy key: statements and time per claim. The
   held jobs are out of the claim index, so they should cost nothing.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from django.db import connection
from django.db.models import Count, Max, Min, Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_outbox
from django_outbox.jobs.claim import claim
from django_outbox.models import Job, JobStatus, LimitKey
from django_outbox.worker.process import WorkerOptions
from outbox_bench.drain import DrainError, default_worker_dir, run_runworker


@dataclass(frozen=True, slots=True)
class Drain:
    shape: str
    jobs: int
    keys: int
    rounds: int
    enqueue_seconds: float
    drain_per_s: float
    statements_per_job: float | None


@dataclass(frozen=True, slots=True)
class Claims:
    #: "none", "held" (behind one busy key) or "finished" (the same rows, ended: what a
    #: table that size costs a claim anyway).
    rows: str
    stuck: int
    claims: int
    statements_per_claim: float
    ms_per_claim: float


def _clear() -> None:
    from outbox_bench.tasks import keyed_noop, unkeyed_noop

    Job.objects.filter(task_path__in=[keyed_noop.module_path, unkeyed_noop.module_path]).delete()
    LimitKey.objects.filter(key__startswith="concurrency:bench-").delete()
    if connection.vendor == "postgresql":
        # Every round starts from clean pages: the dead rows of earlier rounds, with
        # autovacuum behind, slow the unkeyed drain most (and flatter the ratio).
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}, {LimitKey._meta.db_table}")


def _drain_round(
    shape: str, jobs: int, keys: int, options: WorkerOptions, processes: int, worker_dir: Path
) -> tuple[float, float, int | None]:
    """(enqueue seconds, drain seconds, statements) of one round."""
    from outbox_bench.tasks import keyed_noop, unkeyed_noop

    _clear()
    task = (keyed_noop if shape == "keyed" else unkeyed_noop).using(queue_name=options.queues[0])
    started = time.perf_counter()
    django_outbox.enqueue_many(task, [((f"bench-{n % keys}",), {}) for n in range(jobs)])
    enqueue_seconds = time.perf_counter() - started
    ran = run_runworker(options, processes, worker_dir, timeout=180 + jobs / 100)
    record = Job.objects.filter(task_path=task.module_path).aggregate(
        first=Min("started_at"),
        last=Max("finished_at"),
        succeeded=Count("id", filter=Q(status=JobStatus.SUCCEEDED)),
    )
    if record["succeeded"] != jobs or record["first"] is None:
        raise DrainError(
            f"the {shape} round ran {record['succeeded']:,} of its {jobs:,} jobs: do the "
            f"workers use this database ({connection.settings_dict['NAME']})?"
        )
    seconds = max((record["last"] - record["first"]).total_seconds(), 1e-6)
    _clear()
    return enqueue_seconds, seconds, ran.statements


def drain(
    *,
    jobs: int,
    keys: int,
    rounds: int,
    processes: int,
    concurrency: int,
    queue: str = "default",
    worker_dir: Path | None = None,
) -> list[Drain]:
    """``rounds`` interleaved rounds of the keyed and the unkeyed drain; their medians."""
    options = WorkerOptions(queues=[queue], concurrency=concurrency, burst=True)
    directory = worker_dir or default_worker_dir()
    shapes = ["unkeyed", "keyed"]
    seen: dict[str, list[tuple[float, float, int | None]]] = {shape: [] for shape in shapes}
    try:
        for number in range(rounds):
            for shape in shapes if number % 2 == 0 else list(reversed(shapes)):
                seen[shape].append(_drain_round(shape, jobs, keys, options, processes, directory))
    finally:
        _clear()
    found = []
    for shape, runs in seen.items():
        statements = [s / jobs for _, _, s in runs if s is not None]
        found.append(
            Drain(
                shape=shape,
                jobs=jobs,
                keys=keys if shape == "keyed" else 0,
                rounds=len(runs),
                enqueue_seconds=statistics.median(e for e, _, _ in runs),
                drain_per_s=statistics.median(jobs / d for _, d, _ in runs),
                statements_per_job=statistics.median(statements) if statements else None,
            )
        )
    return found


def _claims_round(rows: str, stuck: int, others: int, batch: int, queue: str) -> Claims:
    """Claim ``others`` plain jobs ``batch`` at a time, with ``stuck`` jobs held behind one
    busy key (enqueued first, so they are older and would come first in a queue's order),
    the same rows finished, or none."""
    from outbox_bench.tasks import keyed_noop, unkeyed_noop

    _clear()
    if rows != "none":
        busy = keyed_noop.using(queue_name=queue)
        django_outbox.enqueue_many(busy, [(("bench-busy",), {})] * (stuck + 1))
        # The one whose turn it is runs (a long job, say): the rest wait behind it.
        Job.objects.filter(task_path=busy.module_path, status=JobStatus.QUEUED).update(
            status=JobStatus.RUNNING
        )
        if rows == "finished":
            Job.objects.filter(task_path=busy.module_path).update(
                status=JobStatus.SUCCEEDED, finished_at=timezone.now()
            )
    plain = unkeyed_noop.using(queue_name=queue)
    django_outbox.enqueue_many(plain, [(("other",), {})] * others)
    statements = claims = 0
    seconds = 0.0
    while True:
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            got = claim("bench-claimer", [queue], batch, 300)
            seconds += time.perf_counter() - began
        if not got:
            break
        claims += 1
        statements += len(queries)
    _clear()
    return Claims(
        rows,
        stuck if rows != "none" else 0,
        claims,
        statements / max(claims, 1),
        seconds * 1000 / max(claims, 1),
    )


def claims_behind_a_busy_key(
    *, stuck: int, others: int, batch: int, rounds: int, queue: str = "default"
) -> list[Claims]:
    """Interleaved rounds without other rows, with ``stuck`` held jobs, and with as many
    finished ones; the medians of each."""
    kinds = ["none", "held", "finished"]
    seen: dict[str, list[Claims]] = {kind: [] for kind in kinds}
    try:
        for number in range(rounds):
            for kind in kinds if number % 2 == 0 else list(reversed(kinds)):
                seen[kind].append(_claims_round(kind, stuck, others, batch, queue))
    finally:
        _clear()
    return [
        Claims(
            rows=kind,
            stuck=runs[0].stuck,
            claims=runs[0].claims,
            statements_per_claim=statistics.median(r.statements_per_claim for r in runs),
            ms_per_claim=statistics.median(r.ms_per_claim for r in runs),
        )
        for kind, runs in seen.items()
    ]
