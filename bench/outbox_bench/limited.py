"""``outbox_bench limited``: a queue with a global concurrency limit, drained by several
``runworker`` processes started as a user starts them (``runworkers.py``).

The limit reaches the workers through ``OUTBOX["QUEUES"][queue]["concurrency"]``. Jobs
sleep ``job_seconds`` and record when they started and ended (in the worker, with
``time.time()``), so the figures are the runs themselves: the drain from the first enqueue
to the last run's end, its rate against the limit's ideal (``limit / job_seconds`` jobs a
second), the most runs under way at once (never more than the limit, or the limit
leaked), and the gaps between a run's end and the start of the run that took its place.
With a backlog waiting, a freed place should be taken within milliseconds; a place that
waits for a worker's stalled check shows as a gap of up to 30 s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

from django_outbox.models import Job, JobStatus
from outbox_bench.latency import SLOW_MS, ranked
from outbox_bench.runworkers import PROJECT_DIR, Enqueuer, Runworkers, import_bench_tasks

#: What the drain rate is held against: this share of the limit's ideal rate.
TARGET_RATIO = 0.9


@dataclass(frozen=True, slots=True)
class LimitedFigures:
    database: str
    queue: str
    limit: int
    workers: int
    concurrency: int
    jobs: int
    job_seconds: float
    #: The OUTBOX["WAKE"] the workers were given; None: the project's own.
    wake: str | None
    ran: int
    not_run: int
    #: From the first enqueue to the end of the last run.
    drain_seconds: float
    #: jobs x job_seconds / limit: the drain at the limit, with no gap between runs.
    ideal_seconds: float
    drain_per_s: float
    target_per_s: float
    ratio: float
    #: The most runs under way at one moment (by the runs' own start and end times).
    max_running: int
    #: From a run's end to the start of the run that took its place, over every place
    #: freed while jobs were waiting.
    gaps: int
    gap_p50_ms: float
    gap_p99_ms: float
    gap_max_ms: float
    slow_gaps: int
    deadline_seconds: float
    worker_pids: list[int] = field(default_factory=list)
    worker_wakes: list[str | None] = field(default_factory=list)
    worker_exit_codes: list[int | None] = field(default_factory=list)
    worker_dir: str = ""
    worker_argv: list[str] = field(default_factory=list)
    #: The checkout whose code enqueued the jobs (and sent their wake-ups).
    enqueuer_dir: str = ""


def default_deadline(jobs: int, job_seconds: float, limit: int) -> float:
    """Room for every freed place to wait for a 30 s stalled check, and a minute more."""
    return math.ceil(jobs / limit) * (job_seconds + 30) + 60


def most_running(runs: list[tuple[float, float]]) -> int:
    """The most runs under way at one moment (an end before a start at the same instant)."""
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def handover_gaps(runs: list[tuple[float, float]], limit: int) -> list[float]:
    """Seconds from each run's end to the start of the run that took its place: the runs
    after the first ``limit`` started in the order places were freed."""
    starts = sorted(start for start, _ in runs)
    ends = sorted(end for _, end in runs)
    return [starts[limit + i] - ends[i] for i in range(len(runs) - limit)]


def limited(
    *,
    limit: int = 1,
    workers: int = 3,
    concurrency: int = 4,
    jobs: int = 12,
    job_seconds: float = 0.3,
    queue: str = "reports",
    wake: str | None = None,
    settle: float = 2.0,
    deadline: float | None = None,
    worker_dir: Path = PROJECT_DIR,
    enqueuer_dir: Path | None = None,
) -> LimitedFigures:
    task = import_bench_tasks().sleep_and_stamp
    ours = Job.objects.filter(task_path=task.module_path)
    ours.delete()
    if deadline is None:
        deadline = default_deadline(jobs, job_seconds, limit)
    processes = Runworkers(
        workers,
        concurrency,
        queue,
        wake=wake,
        queue_limits={queue: {"concurrency": limit}},
        worker_dir=worker_dir,
        settle=settle,
    )
    # All at once, one autocommit enqueue after the other, from a process of the site.
    config = {
        "task": "sleep_and_stamp",
        "args": [job_seconds],
        "queue": queue,
        "jobs": jobs,
        "gap_ms": 0,
        "burst": jobs,
        "enqueue": "autocommit",
    }
    with processes, Enqueuer(processes, config, enqueuer_dir) as enqueuer:
        sent = enqueuer.go(timeout=jobs + 60)
        began = float(sent["began"])
        active = ours.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
        until = time.monotonic() + deadline
        while active.exists() and time.monotonic() < until:
            processes.check_alive()
            time.sleep(0.1)
        values = ours.filter(status=JobStatus.SUCCEEDED).values_list("return_value", flat=True)
        runs = [
            (float(value[0]), float(value[1]))
            for value in values
            if isinstance(value, list) and len(value) == 2
        ]
    ours.delete()
    ideal = jobs * job_seconds / limit
    drain = max(end for _, end in runs) - began if runs else math.nan
    rate = len(runs) / drain if runs else 0.0
    target = limit / job_seconds
    gaps = sorted(gap * 1000 for gap in handover_gaps(runs, limit))
    p50, _, p99, worst = ranked(gaps)
    started = processes.started()
    return LimitedFigures(
        database=connection.vendor,
        queue=queue,
        limit=limit,
        workers=workers,
        concurrency=concurrency,
        jobs=jobs,
        job_seconds=job_seconds,
        wake=wake,
        ran=len(runs),
        not_run=jobs - len(runs),
        drain_seconds=drain,
        ideal_seconds=ideal,
        drain_per_s=rate,
        target_per_s=target,
        ratio=rate / target,
        max_running=most_running(runs),
        gaps=len(gaps),
        gap_p50_ms=p50,
        gap_p99_ms=p99,
        gap_max_ms=worst,
        slow_gaps=sum(1 for gap in gaps if gap > SLOW_MS),
        deadline_seconds=deadline,
        worker_pids=[s.pid for s in started],
        worker_wakes=[s.wake for s in started],
        worker_exit_codes=[s.exit_code for s in started],
        worker_dir=started[0].cwd if started else "",
        worker_argv=started[0].argv[1:] if started else [],
        enqueuer_dir=str(enqueuer.directory),
    )
