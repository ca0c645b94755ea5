"""The drain benchmark: enqueue N no-op jobs, then time workers emptying the queue.

The workers are ``runworker`` processes started as a user starts them: ``python manage.py
runworker --burst --processes P --concurrency T`` in a fresh interpreter, with the
project's settings (the benchmark's own settings module, ``DEBUG`` off), from this checkout
or another one (``worker_dir``). With ``forked``, they are forked from this process after
the enqueue instead (the form the figures up to 2026-12-03 were measured with).

Either way the drain is timed from the jobs' own record: from the first job's start
(``started_at``, stamped when it was claimed) to the last one's finish (``finished_at``),
so the workers' start-up (the interpreter, Django, the imports) is left out, as it is for
the raw-SQL ceiling and the peers. The wall time from starting the workers to their exit is
reported beside it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Min, Q

import django_outbox
from django_outbox.models import Job, JobStatus
from django_outbox.worker.loop import MAX_ADAPTIVE_BATCH, default_batch_size
from django_outbox.worker.process import WorkerOptions, run
from outbox_bench import pgstats
from outbox_bench.mariadb import wait_for_purge

#: Jobs enqueued one at a time to measure single enqueues (then deleted).
SINGLE_ENQUEUES = 1000
#: Jobs per enqueue_many call when filling the queue.
ENQUEUE_CHUNK = 5000
#: Jobs drained, untimed, in the same shape before the measured drain: a run's first drain
#: also paid for cold caches (the database's pages and plans, the workers' first imports),
#: 20 % slower than the next ones, which the ceiling, measured second, did not.
WARM_UP_JOBS = 1000
#: Smaller drains (smoke runs, the test suite) skip the warm-up: their figures mean little,
#: and a warm-up through runworker costs a start of Django.
WARM_UP_FROM_JOBS = 2000
#: What a worker logs when it stops: "worker <id> stopped: … ; <n> statements (…)".
_STOPPED = re.compile(r"worker \S+ stopped: .*?; ([\d,]+) statements")


class DrainError(RuntimeError):
    """The workers failed, did not finish in time, or ran none of the jobs."""


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
    #: From the first job's start to the last one's finish, as the job table records them.
    drain_seconds: float
    drain_per_s: float
    #: Statements the workers sent (claims, completions, heartbeats, registration), as they
    #: report them when they stop; None when runworker's log does not say.
    statements: int | None
    statements_per_job: float | None
    succeeded: int
    #: PostgreSQL only: WAL written from the bulk enqueue to the end of the drain, and
    #: transactions committed during the drain, per job.
    wal_bytes_per_job: float | None
    transactions_per_job: float | None
    #: The largest worker process's peak resident memory.
    peak_rss_mb: float
    #: "runworker" (processes started as a user starts them) or "forked".
    workers: str = "runworker"
    #: From starting the workers to their exit (start-up and the last empty claims included).
    wall_seconds: float = 0.0
    #: CPU time of the worker processes (every thread; runworker's start-up included), per job.
    worker_cpu_us_per_job: float | None = None
    #: The directory whose manage.py started the workers (runworker only).
    worker_dir: str | None = None

    def rows(self) -> list[tuple[str, str]]:
        workers = (
            f"runworker processes from {self.worker_dir}"
            if self.workers == "runworker"
            else "forked from this process (--forked)"
        )
        statements = "-" if self.statements is None else f"{self.statements:,}"
        per_job = "-" if self.statements_per_job is None else f"{self.statements_per_job:.3f}"
        cpu = self.worker_cpu_us_per_job
        cpu_of = (
            "all worker processes and threads, start-up included"
            if self.workers == "runworker"
            else "all worker threads, from each worker's start"
        )
        return [
            ("database", self.database),
            ("shape", f"{self.processes} processes x {self.concurrency} threads"),
            ("workers", workers),
            ("batch size", self.batch_label),
            ("jobs", f"{self.jobs:,}"),
            ("enqueue, one at a time", f"{self.single_enqueue_per_s:,.0f} jobs/s"),
            ("enqueue, enqueue_many", f"{self.bulk_enqueue_per_s:,.0f} jobs/s"),
            (
                "drain",
                f"{self.drain_per_s:,.0f} jobs/s ({self.drain_seconds:.2f} s from the first "
                f"job's start to the last one's finish; {self.wall_seconds:.2f} s from "
                "starting the workers to their exit)",
            ),
            ("worker statements", statements),
            ("statements per job", per_job),
            (
                "transactions per job",
                "-" if self.transactions_per_job is None else f"{self.transactions_per_job:.3f}",
            ),
            (
                "WAL per job (enqueue + run)",
                "-" if self.wal_bytes_per_job is None else f"{self.wal_bytes_per_job:,.0f} bytes",
            ),
            (
                "worker CPU per job",
                "-" if cpu is None else f"{cpu:,.0f} us ({cpu_of})",
            ),
            ("worker peak RSS", f"{self.peak_rss_mb:.0f} MB (the largest process)"),
            ("succeeded", f"{self.succeeded:,} of {self.jobs:,}"),
        ]


def default_worker_dir() -> Path:
    """The checkout whose manage.py starts the workers unless told otherwise: the one this
    benchmark was started with, else the one django_outbox was imported from, else the
    current directory."""
    candidates = []
    if Path(sys.argv[0]).name == "manage.py":
        candidates.append(Path(sys.argv[0]).resolve().parent)
    candidates += [Path(django_outbox.__file__).resolve().parent.parent, Path.cwd()]
    for candidate in candidates:
        if (candidate / "manage.py").is_file():
            return candidate
    raise DrainError(
        "found no manage.py to start runworker with (here, or beside django_outbox): "
        "name the project's directory with --worker-dir"
    )


def check_worker_dir(text: str) -> Path:
    """``--worker-dir``: a directory with a manage.py, or ValueError saying why not."""
    directory = Path(text).expanduser().resolve()
    if not directory.is_dir():
        raise ValueError(f"{directory} is not a directory")
    if not (directory / "manage.py").is_file():
        raise ValueError(f"{directory} has no manage.py (a checkout of this project)")
    return directory


#: What ``--logging`` may say: the project's LOGGING, Django's default logging (a project
#: without LOGGING), or every logger at INFO to the console (the demo project's
#: ``DJANGO_LOGGING`` switch).
LOGGING_CHOICES = ("project", "default", "info")


def worker_environment(logging: str = "project") -> dict[str, str]:
    """The workers' environment: this process's (its settings module, DATABASE_URL …), with
    ``DEBUG`` off as in production (the demo project's ``DJANGO_DEBUG`` switch), and the
    logging ``logging`` names (LOGGING_CHOICES)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise DrainError(
            "runworker takes its settings from DJANGO_SETTINGS_MODULE, and it is not set "
            "(settings.configure() was used): set it, or measure --forked workers"
        )
    env = os.environ | {"DJANGO_DEBUG": "0", "PYTHONUNBUFFERED": "1"}
    if logging != "project":
        env["DJANGO_LOGGING"] = logging
    return env


def worker_package(worker_dir: Path) -> str:
    """Where the workers started from ``worker_dir`` import django_outbox from (Python puts a
    script's directory first on its path, as ``-c`` puts the current one)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import django_outbox; print(django_outbox.__file__)"],
        cwd=worker_dir,
        env=worker_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        raise DrainError(f"cannot import django_outbox in {worker_dir}:\n{probe.stderr[-2000:]}")
    return str(Path(probe.stdout.strip()).parent)


@dataclass(frozen=True, slots=True)
class Ran:
    """What the workers' processes did: for the figures."""

    wall_seconds: float
    statements: int | None
    cpu_seconds: float | None
    peak_rss_kb: int


def run_runworker(
    options: WorkerOptions,
    processes: int,
    worker_dir: Path,
    timeout: float,
    env: dict[str, str] | None = None,
) -> Ran:
    """``python manage.py runworker --burst …`` in ``worker_dir``, until it exits; ``env``:
    its environment (by default ``worker_environment()``)."""
    argv = [sys.executable, "manage.py", "runworker", "--burst", "--queues", *options.queues]
    argv += ["--processes", str(processes), "--concurrency", str(options.concurrency)]
    if options.batch_size:
        argv += ["--batch-size", str(options.batch_size)]
    env = env or worker_environment()
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        process = subprocess.Popen(
            argv,
            cwd=worker_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopped whole if it must be
        )
        try:
            waited = _wait(process.pid, started + timeout)
        except BaseException:
            _kill(process)
            raise
        wall = time.perf_counter() - started
        if waited is None:
            _kill(process)
        log.seek(0)
        output = log.read().decode(errors="replace")
    command = f"{' '.join(argv[1:])} (in {worker_dir})"
    if waited is None:
        raise DrainError(f"{command} did not exit within {timeout:.0f} s:\n{output[-3000:]}")
    status, usage = waited
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise DrainError(f"{command} exited with status {process.returncode}:\n{output[-3000:]}")
    counts = [int(n.replace(",", "")) for n in _STOPPED.findall(output)]  # "1,234"
    return Ran(
        wall_seconds=wall,
        # Every worker process says how many it sent when it stops; when not all of them
        # did (a log level above INFO), the count is unknown.
        statements=sum(counts) if len(counts) == processes else None,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        # The process and the children it waited for (its workers, under --processes).
        peak_rss_kb=usage.ru_maxrss,
    )


def _wait(pid: int, deadline: float) -> tuple[int, Any] | None:
    """Wait for ``pid`` to exit: its wait status and resource usage (its own and its reaped
    children's: their CPU time added up, the largest peak RSS); None at the deadline."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage
        if time.perf_counter() > deadline:
            return None
        time.sleep(0.02)


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(10)


def run_forked(options: WorkerOptions, processes: int) -> Ran:
    """Workers forked from this process (the supervisor's children), or, with one process,
    the worker on this process's main thread."""
    reports: Any = multiprocessing.get_context("fork").Queue()
    started = time.perf_counter()
    run(options, processes=processes, report=reports)
    wall = time.perf_counter() - started
    stats = [reports.get(timeout=10) for _ in range(processes)]
    return Ran(
        wall_seconds=wall,
        statements=sum(s["statements"] for s in stats),
        cpu_seconds=sum(s["cpu_seconds"] for s in stats),
        peak_rss_kb=max(s["peak_rss_kb"] for s in stats),
    )


def drain(
    *,
    jobs: int,
    processes: int,
    concurrency: int,
    batch_size: int | None,
    queue: str,
    forked: bool = False,
    worker_dir: Path | None = None,
    warm_up: bool = True,
    vacuum: bool = True,
    logging: str = "project",
) -> DrainFigures:
    """Enqueue ``jobs`` no-op jobs and time ``processes`` x ``concurrency`` workers running
    them all. ``warm_up``: first drain WARM_UP_JOBS jobs the same way, untimed (from
    WARM_UP_FROM_JOBS jobs on). ``vacuum``: on PostgreSQL, ``VACUUM ANALYZE`` the table
    first; on MariaDB and MySQL, wait for InnoDB's purge (False: as a user's worker meets
    it, autovacuum or purge having run when it ran).
    ``logging``: the runworker processes' logging (LOGGING_CHOICES)."""
    from outbox_bench.tasks import noop

    if not forked and worker_dir is None:
        worker_dir = default_worker_dir()
    bench_jobs = Job.objects.filter(task_path=noop.module_path)
    bench_jobs.delete()
    try:
        return _drain(
            bench_jobs, jobs, processes, concurrency, batch_size, queue, forked, worker_dir,
            warm_up, vacuum, logging,
        )  # fmt: skip
    finally:
        bench_jobs.delete()  # its jobs go, whether the drain worked or not


def _drain(
    bench_jobs: Any,
    jobs: int,
    processes: int,
    concurrency: int,
    batch_size: int | None,
    queue: str,
    forked: bool,
    worker_dir: Path | None,
    warm_up: bool,
    vacuum: bool = True,
    logging: str = "project",
) -> DrainFigures:
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)

    singles = min(SINGLE_ENQUEUES, jobs)
    started = time.perf_counter()
    for _ in range(singles):
        task.enqueue()
    single_rate = singles / (time.perf_counter() - started)
    bench_jobs.delete()

    options = WorkerOptions(
        queues=[queue], concurrency=concurrency, batch_size=batch_size, burst=True
    )

    def run_workers(count: int) -> Ran:
        if forked:
            return run_forked(options, processes)
        assert worker_dir is not None
        # Far longer than any drain takes: a stuck run, not a slow one.
        return run_runworker(
            options, processes, worker_dir, timeout=120 + count / 100,
            env=worker_environment(logging),
        )  # fmt: skip

    if warm_up and jobs >= WARM_UP_FROM_JOBS:
        django_outbox.enqueue_many(task, [((), {})] * WARM_UP_JOBS)
        run_workers(WARM_UP_JOBS)
        bench_jobs.delete()

    if vacuum and connection.vendor == "postgresql":
        # Dead rows from earlier runs would slow this one: start every run from clean pages.
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    elif vacuum and connection.vendor == "mysql":
        wait_for_purge(jobs)  # the same on InnoDB: earlier runs' deleted rows purged first

    wal_before = pgstats.wal_position()
    started = time.perf_counter()
    # In calls of ENQUEUE_CHUNK: one call of all the jobs would build every result object at
    # once, and a forked 1 x T drain runs its worker in this process, whose peak RSS it reports.
    for first in range(0, jobs, ENQUEUE_CHUNK):
        django_outbox.enqueue_many(task, [((), {})] * min(ENQUEUE_CHUNK, jobs - first))
    bulk_rate = jobs / (time.perf_counter() - started)
    commits_before = pgstats.commits()
    ran = run_workers(jobs)
    commits_after, wal_after = pgstats.commits(), pgstats.wal_position()

    record = bench_jobs.aggregate(
        first=Min("started_at"),
        last=Max("finished_at"),
        succeeded=Count("id", filter=Q(status=JobStatus.SUCCEEDED)),
    )
    succeeded = record["succeeded"]
    if not succeeded or record["first"] is None or record["last"] is None:
        where = "forked" if forked else f"runworker (from {worker_dir})"
        raise DrainError(
            f"the {where} workers ran none of the {jobs:,} jobs: do they use this database "
            f"({connection.settings_dict['NAME']}) and the queue {queue!r}?"
        )
    seconds = max((record["last"] - record["first"]).total_seconds(), 1e-6)
    statements = ran.statements
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
        drain_per_s=succeeded / seconds,
        statements=statements,
        statements_per_job=None if statements is None else statements / jobs,
        succeeded=succeeded,
        wal_bytes_per_job=per_job(wal_before, wal_after, jobs),
        # Less the two reads of the counter themselves.
        transactions_per_job=per_job(commits_before, commits_after, jobs, less=2),
        peak_rss_mb=ran.peak_rss_kb / 1024,
        workers="forked" if forked else "runworker",
        wall_seconds=ran.wall_seconds,
        worker_cpu_us_per_job=None
        if ran.cpu_seconds is None
        else ran.cpu_seconds * 1_000_000 / jobs,
        worker_dir=None if worker_dir is None else str(worker_dir),
    )


def per_job(before: int | None, after: int | None, jobs: int, less: int = 0) -> float | None:
    if before is None or after is None:
        return None
    return max(0, after - before - less) / jobs
