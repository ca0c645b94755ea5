"""``outbox_bench latency``: pickup as a user sees it, from ``runworker`` processes.

For each pattern: start ``runworker`` processes the way a user does (``runworkers.py``: a
fresh ``python manage.py runworker --concurrency N``, the project's settings, the wake mode
through ``OUTBOX["WAKE"]``), and wait until they have started and settled into their idle
wait. Then a process of the same site (``workerside/outbox_bench_enqueue.py``, started from
the same checkout with the same settings, so the wake-up sender is that checkout's too)
enqueues jobs on a schedule (one every ``gap_ms``, or bursts of ``burst`` jobs ``gap_ms``
apart), each with ``task.enqueue()`` in its own autocommit or in its own
``transaction.atomic()``, and stays up, as a web process does. A job's pickup is the time it
started, as the job itself recorded it in the worker (``time.time()``, its return value),
minus the moment its ``enqueue()`` returned in the enqueuing process (for ``atomic``: the
moment the block committed): wall clocks of one machine. Jobs not run ``deadline`` seconds
after the last enqueue are counted as not run.

The raw-SQL ceiling (``--ceiling``, PostgreSQL) is ``pickup_ceiling.py`` in a process of its
own, measured in the same pattern, its jobs enqueued from this process: INSERT and NOTIFY
in one statement, LISTEN, claim with one UPDATE … SKIP LOCKED … RETURNING, mark done.

The measurement this benchmark made before (workers on threads of this process, pickup
from ``enqueued_at`` to the claim's ``started_at``) is ``wakeups.latency``, kept for
``--in-process``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.db import connection

from django_outbox.models import Job, JobStatus
from outbox_bench import ceiling
from outbox_bench.peers.base import percentiles
from outbox_bench.runworkers import PROJECT_DIR, Enqueuer, Runworkers, import_bench_tasks
from outbox_bench.workerside.outbox_bench_enqueue import schedule

#: How each job is enqueued: ``task.enqueue()`` in autocommit, or in its own atomic block.
ENQUEUE_MODES = ("autocommit", "atomic")
#: A pickup over this is a job that waited for something other than its wake-up: the
#: worker's stalled check (every 30 s by default), or its poll.
SLOW_MS = 1000.0
#: How often the benchmark looks whether every job has run.
DONE_POLL_SECONDS = 0.1
#: The pickup ceiling's table and NOTIFY channel (created for the run, dropped after it).
CEILING_TABLE = "outbox_bench_pickup_ceiling"


@dataclass(frozen=True, slots=True)
class Pattern:
    """One row of the benchmark: how workers run, and how jobs arrive."""

    wake: str
    workers: int
    concurrency: int
    jobs: int
    gap_ms: int
    burst: int
    enqueue: str

    def arrivals(self) -> str:
        if self.burst == 1:
            return f"1 job every {self.gap_ms} ms"
        return f"bursts of {self.burst} every {self.gap_ms} ms"

    @property
    def shape(self) -> str:
        return f"{self.workers}x{self.concurrency}"

    def label(self, system: str = "django_outbox") -> str:
        who = self.wake if system == "django_outbox" else system
        return f"{who} {self.shape} {self.enqueue}"


@dataclass(frozen=True, slots=True)
class PickupFigures:
    #: The row's name (its wake mode or system, shape and enqueue): the chart's label.
    mode: str
    system: str
    wake: str
    workers: int
    concurrency: int
    jobs: int
    gap_ms: int
    burst: int
    enqueue: str
    #: Jobs that ran (their start recorded) by the deadline, and those that did not.
    ran: int
    not_run: int
    #: Jobs picked up more than SLOW_MS after their enqueue returned.
    over_1s: int
    #: Over the jobs that ran; NaN when none did.
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    #: Seconds the enqueueing took, and the deadline after it.
    enqueue_seconds: float
    deadline_seconds: float
    #: The runworker processes: their pids, what wake-ups each said it uses, how each
    #: exited after SIGTERM, and the checkout whose manage.py started them.
    worker_pids: list[int] = field(default_factory=list)
    worker_wakes: list[str | None] = field(default_factory=list)
    worker_exit_codes: list[int | None] = field(default_factory=list)
    worker_dir: str = ""
    worker_argv: list[str] = field(default_factory=list)
    #: The checkout whose code enqueued the jobs (and sent their wake-ups).
    enqueuer_dir: str = ""


def ranked(waits: list[float]) -> tuple[float, float, float, float]:
    """p50, p95, p99 and max of ``waits``; NaN for none."""
    if not waits:
        return (math.nan,) * 4
    if len(waits) == 1:
        return (waits[0],) * 4
    return percentiles(waits)


def figures(
    pattern: Pattern,
    system: str,
    sent: list[tuple[int, float]],
    ran_at: dict[int, float],
    enqueue_seconds: float,
    deadline: float,
) -> PickupFigures:
    waits = sorted((ran_at[key] - at) * 1000 for key, at in sent if key in ran_at)
    p50, p95, p99, worst = ranked(waits)
    return PickupFigures(
        mode=pattern.label(system),
        system=system,
        wake=pattern.wake if system == "django_outbox" else "notify",
        workers=pattern.workers,
        concurrency=pattern.concurrency,
        jobs=pattern.jobs,
        gap_ms=pattern.gap_ms,
        burst=pattern.burst,
        enqueue=pattern.enqueue,
        ran=len(waits),
        not_run=pattern.jobs - len(waits),
        over_1s=sum(1 for wait in waits if wait > SLOW_MS),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=worst,
        enqueue_seconds=enqueue_seconds,
        deadline_seconds=deadline,
    )


def measure(
    pattern: Pattern,
    *,
    queue: str = "default",
    settle: float = 2.0,
    deadline: float = 60.0,
    worker_dir: Path = PROJECT_DIR,
    enqueuer_dir: Path | None = None,
) -> PickupFigures:
    """Pickup of ``pattern``'s jobs by freshly started, idle runworker processes."""
    task = import_bench_tasks().stamp
    ours = Job.objects.filter(task_path=task.module_path)
    ours.delete()
    workers = Runworkers(
        pattern.workers, pattern.concurrency, queue, wake=pattern.wake, worker_dir=worker_dir,
        settle=settle,
    )  # fmt: skip
    config = {
        "task": "stamp",
        "queue": queue,
        "jobs": pattern.jobs,
        "gap_ms": pattern.gap_ms,
        "burst": pattern.burst,
        "enqueue": pattern.enqueue,
    }
    with workers, Enqueuer(workers, config, enqueuer_dir) as enqueuer:
        sent = enqueuer.go(timeout=pattern.jobs * (pattern.gap_ms / 1000 + 1) + 60)
        keys = [key for key, _ in sent["sent"]]
        active = ours.filter(pk__in=keys, status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
        until = time.monotonic() + deadline
        while active.exists() and time.monotonic() < until:
            workers.check_alive()
            time.sleep(DONE_POLL_SECONDS)
        rows = ours.filter(pk__in=keys, status=JobStatus.SUCCEEDED).values_list(
            "pk", "return_value"
        )
        ran_at = {pk: float(value) for pk, value in rows if isinstance(value, int | float)}
    ours.delete()
    pairs = [(int(key), float(at)) for key, at in sent["sent"]]
    result = figures(pattern, "django_outbox", pairs, ran_at, sent["seconds"], deadline)
    started = workers.started()
    return replace(
        result,
        worker_pids=[s.pid for s in started],
        worker_wakes=[s.wake for s in started],
        worker_exit_codes=[s.exit_code for s in started],
        worker_dir=started[0].cwd if started else "",
        worker_argv=started[0].argv[1:] if started else [],
        enqueuer_dir=str(enqueuer.directory),
    )


# -- the raw-SQL ceiling -------------------------------------------------------------


def _ceiling_sql() -> dict[str, str]:
    create = ceiling._CREATE.replace(ceiling.TABLE, CEILING_TABLE)
    return {
        "create": f"{create}\nALTER TABLE {CEILING_TABLE} ADD COLUMN ran_at double precision;",
        "claim": ceiling._CLAIM.replace(ceiling.TABLE, CEILING_TABLE),
        "complete": (
            f"UPDATE {CEILING_TABLE} AS job SET status = 'succeeded', lease_until = NULL, "
            "ran_at = done.at FROM unnest(%s::bigint[], %s::float8[]) AS done(id, at) "
            "WHERE job.id = done.id"
        ),
        # One statement, so one autocommit transaction: the row and its NOTIFY commit together.
        "enqueue": (
            f"WITH job AS (INSERT INTO {CEILING_TABLE} (queue) VALUES ('default') RETURNING id) "
            f"SELECT id, pg_notify('{CEILING_TABLE}', '') FROM job"
        ),
    }


def measure_ceiling(pattern: Pattern, *, deadline: float = 60.0) -> PickupFigures:
    """The same pattern against the raw-SQL pickup ceiling (PostgreSQL only)."""
    import psycopg

    from django_outbox.wake.postgres import plain_params

    if connection.vendor != "postgresql":
        raise RuntimeError("the raw-SQL ceiling is measured on PostgreSQL only")
    params = plain_params(connection.alias)
    sql = _ceiling_sql()
    threads = pattern.workers * pattern.concurrency
    with psycopg.connect(**params, autocommit=True) as db, tempfile.TemporaryFile() as log:
        db.execute(sql["create"])
        child = subprocess.Popen(
            [sys.executable, "-m", "outbox_bench.pickup_ceiling"],
            cwd=PROJECT_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            config = {"params": params, "threads": threads, "channel": CEILING_TABLE} | sql
            child.stdin.write((json.dumps(config) + "\n").encode())
            child.stdin.flush()
            if child.stdout.readline().strip() != b"ready":
                log.seek(0)
                raise RuntimeError(f"the pickup ceiling did not start:\n{log.read().decode()}")

            def autocommit() -> int:
                row = db.execute(sql["enqueue"]).fetchone()
                return int(row[0]) if row else 0

            def atomic() -> int:
                with db.transaction():
                    row = db.execute(sql["enqueue"]).fetchone()
                return int(row[0]) if row else 0

            sent, seconds = schedule(
                pattern.jobs,
                pattern.gap_ms,
                pattern.burst,
                atomic if pattern.enqueue == "atomic" else autocommit,
            )
            waiting = f"SELECT count(*) FROM {CEILING_TABLE} WHERE ran_at IS NULL"
            until = time.monotonic() + deadline
            while db.execute(waiting).fetchone() != (0,) and time.monotonic() < until:
                time.sleep(DONE_POLL_SECONDS)
            rows = db.execute(f"SELECT id, ran_at FROM {CEILING_TABLE} WHERE ran_at IS NOT NULL")
            ran_at = {int(key): float(at) for key, at in rows.fetchall()}
        finally:
            child.stdin.close()
            try:
                child.wait(15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            db.execute(f"DROP TABLE IF EXISTS {CEILING_TABLE}")
    result = figures(pattern, "raw-SQL ceiling", sent, ran_at, seconds, deadline)
    return replace(result, worker_argv=["-m", "outbox_bench.pickup_ceiling"])
