"""Wake-up benchmarks: pickup latency of an idle worker, and what idle workers cost.

Workers run in threads of this process, so each wake mode can be set for both sides (the
enqueueing code and the worker) with override_settings; each counts its own statements.
Pickup measured this way is ``outbox_bench latency --in-process``; ``latency`` itself
measures runworker processes as a user starts them (``latency.py``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.test.utils import override_settings

from django_outbox.models import Job
from django_outbox.wake import redis_configured
from django_outbox.worker import Worker
from django_outbox.worker.process import start_in_thread
from outbox_bench import pgstats
from outbox_bench.peers.base import percentiles
from outbox_bench.workerside.outbox_bench_enqueue import result_pk


@dataclass(frozen=True, slots=True)
class LatencyFigures:
    mode: str
    jobs: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class IdleFigures:
    mode: str
    workers: int
    seconds: float
    statements_per_worker_s: float
    #: The database's own count (PostgreSQL's pg_stat_database), per worker.
    commits_per_worker_s: float | None


def available_modes() -> list[str]:
    modes = ["poll"]
    if connection.vendor == "postgresql":
        modes.append("postgres")
    alias = getattr(settings, "OUTBOX", {}).get("REDIS_ALIAS", "default")
    if redis_configured(alias):
        modes.append("redis")
    return modes


class _Background:
    """Workers running in threads, stopped together."""

    def __init__(self, count: int, queue: str, settle: float = 1.0) -> None:
        self.settle = settle
        self.workers = [Worker(queues=[queue], concurrency=2) for _ in range(count)]
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> _Background:
        self.threads = [start_in_thread(worker) for worker in self.workers]
        for worker in self.workers:
            worker.ready.wait(15)
        time.sleep(self.settle)  # let them settle into their idle wait
        return self

    def __exit__(self, *exc: Any) -> None:
        for worker in self.workers:
            worker.request_stop("benchmark done")
        for thread in self.threads:
            thread.join(30)


def _outbox(mode: str) -> dict[str, Any]:
    return {**getattr(settings, "OUTBOX", {}), "WAKE": mode}


def latency(
    mode: str, jobs: int = 200, gap: float = 0.05, queue: str = "default"
) -> LatencyFigures:
    from outbox_bench.tasks import noop

    bench_jobs = Job.objects.filter(task_path=noop.module_path)
    bench_jobs.delete()
    with override_settings(OUTBOX=_outbox(mode)), _Background(1, queue):
        task = noop.using(queue_name=queue)
        ids = []
        for _ in range(jobs):
            ids.append(result_pk(task.enqueue().id))
            time.sleep(gap)
        deadline = time.monotonic() + 30
        while bench_jobs.filter(started_at__isnull=True).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    waits = sorted(
        (started - enqueued).total_seconds() * 1000
        for enqueued, started in bench_jobs.filter(pk__in=ids).values_list(
            "enqueued_at", "started_at"
        )
        if started is not None
    )
    bench_jobs.delete()
    return LatencyFigures(mode, len(waits), *percentiles(waits))


def idle(mode: str, workers: int = 4, seconds: float = 30.0, queue: str = "default") -> IdleFigures:
    # PostgreSQL publishes a backend's counters up to 10 s after it goes idle: settle past
    # that, or the workers' start-up statements land in the measured window.
    settle = 11.0 if connection.vendor == "postgresql" else 1.0
    background = _Background(workers, queue, settle)
    with override_settings(OUTBOX=_outbox(mode)), background:
        before = [_statements(w) for w in background.workers]
        commits_before = pgstats.commits()
        time.sleep(seconds)
        after = [_statements(w) for w in background.workers]
        commits_after = pgstats.commits()
    per_worker = (sum(after) - sum(before)) / workers / seconds
    commits = None
    if commits_before is not None and commits_after is not None:
        # Less the two statements of the first reading, which the database counts too.
        commits = (commits_after - commits_before - 2) / workers / seconds
    return IdleFigures(mode, workers, seconds, per_worker, commits)


def _statements(worker: Worker) -> int:
    """What a worker sent: on its own connection, and on its listener's (postgres)."""
    return worker.stats.statements + worker.waker.statements
