"""The worker loop: claim → run → complete, plus heartbeats, rescue and a clean stop.

The loop owns one database connection (the main thread's) and calls named operations
from ``django_outbox.jobs``; it holds no SQL of its own. Jobs run on the pool's threads.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import Error as DatabaseErrors
from django.db import connections, router
from django.tasks.signals import task_finished
from django.utils.crypto import get_random_string

from django_outbox import conf
from django_outbox.exceptions import JobTimeout
from django_outbox.jobs import claim, complete, leases
from django_outbox.jobs.complete import Outcome
from django_outbox.models import Job, JobStatus
from django_outbox.worker.executor import cached_task, claimed_job_result, error_record
from django_outbox.worker.pool import Pool

logger = logging.getLogger("django_outbox.worker")

#: Longest the loop waits for outcomes before it looks at its timers again.
TICK_SECONDS = 0.1
#: Longest a finished run waits to be written with others in one statement.
FLUSH_LINGER_SECONDS = 0.02


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    rescued: int = 0
    statements: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        return self.succeeded + self.retried + self.failed

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "seconds": round(time.monotonic() - self.started, 3)
        }


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{get_random_string(6)}"


class Worker:
    def __init__(
        self,
        *,
        queues: list[str],
        concurrency: int = 4,
        batch_size: int | None = None,
        burst: bool = False,
        shutdown_timeout: float = 30.0,
        parent_pid: int | None = None,
        backend: str = "default",
    ) -> None:
        if not queues:
            raise ValueError("A worker needs at least one queue.")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}.")
        if shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must not be negative, not {shutdown_timeout}.")
        self.settings = conf.get()
        self.id = new_worker_id()
        self.queues = list(queues)
        self.backend = backend
        self.concurrency = concurrency
        self.batch_size = batch_size or 4 * concurrency
        self.burst = burst
        self.shutdown_timeout = shutdown_timeout
        self.parent_pid = parent_pid
        self.stats = WorkerStats()
        self.pool = Pool(concurrency)
        self._stop = threading.Event()
        self._unflushed: list[Outcome] = []
        self._unflushed_since = 0.0
        self._next_claim = 0.0
        self._next_heartbeat = 0.0
        self._leases_renewed_at = time.monotonic()
        self._db_ok_after = 0.0
        self._db_failures = 0

    # -- control ---------------------------------------------------------------------

    def request_stop(self, reason: str = "asked to stop") -> None:
        if not self._stop.is_set():
            logger.info(
                "worker %s: %s; finishing %d running jobs", self.id, reason, self.pool.running
            )
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> WorkerStats:
        """Work until asked to stop (or, with ``burst``, until nothing is due)."""
        alias = router.db_for_write(Job)
        with connections[alias].execute_wrapper(self._count_statement):
            self._db(
                lambda: leases.register_worker(self.id, self.queues, self.concurrency, os.getpid())
            )
            logger.info(
                "worker %s started: queues %s, %d threads, batches of %d, %s database",
                self.id,
                ",".join(self.queues),
                self.concurrency,
                self.batch_size,
                connections[alias].vendor,
            )
            try:
                self._loop()
            finally:
                self._shutdown()
        return self.stats

    # -- the loop --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._maintain()
            claimed = self._refill()
            if self.pool.in_flight or self._unflushed:
                self._collect(TICK_SECONDS if not claimed else 0.0)
                continue
            if claimed:
                continue
            if self.burst:
                # Look once more, whatever the poll timer says, before leaving.
                self._next_claim = 0.0
                if self._refill():
                    continue
                logger.info("worker %s: nothing is due; leaving (burst)", self.id)
                return
            now = time.monotonic()
            self._stop.wait(max(0.0, min(self._next_claim, self._next_heartbeat) - now))

    def _refill(self) -> int:
        """Claim up to the room left in the batch, when there is room and it is time."""
        # Threads still stuck in timed-out jobs are busy too: count them as in flight.
        in_flight = self.pool.in_flight + self.pool.stuck
        if self.pool.stuck >= self.concurrency:
            return 0
        if in_flight >= self.batch_size or in_flight > self.concurrency:
            return 0
        now = time.monotonic()
        if now < self._next_claim:
            return 0
        want = self.batch_size - in_flight
        jobs = self._db(
            lambda: claim.claim(
                self.id, self.queues, want, self.settings.LEASE_SECONDS, self.backend
            )
        )
        if jobs is None:  # the database is unreachable: try again when _db allows
            self._next_claim = max(now + self.settings.POLL_INTERVAL, self._db_ok_after)
            return 0
        for job in jobs:
            self.pool.submit(job)
        self.stats.claimed += len(jobs)
        # A short batch means the queues ran dry: look again at the next poll.
        self._next_claim = now if len(jobs) == want else now + self.settings.POLL_INTERVAL
        return len(jobs)

    def _collect(self, timeout: float) -> None:
        """Gather finished runs; write them once enough have gathered or waited long enough.

        Lingering up to FLUSH_LINGER_SECONDS lets one UPDATE carry many outcomes even when
        jobs finish one by one; results become visible that much later, never lost.
        """
        now = time.monotonic()
        if self._unflushed and now >= self._db_ok_after:
            linger_left = self._unflushed_since + FLUSH_LINGER_SECONDS - now
            timeout = max(0.0, min(timeout, linger_left))
        elif self._unflushed:  # the database is away: wait, do not spin
            timeout = max(timeout, min(TICK_SECONDS, self._db_ok_after - now))
        ready = self.pool.outcomes(timeout) + self._time_out_overdue()
        if ready and not self._unflushed:
            self._unflushed_since = time.monotonic()
        self._unflushed.extend(ready)
        if self._unflushed and (
            not self.pool.in_flight
            or self._stop.is_set()
            or len(self._unflushed) >= max(1, self.batch_size // 2)
            or time.monotonic() - self._unflushed_since >= FLUSH_LINGER_SECONDS
        ):
            self._flush()

    def _time_out_overdue(self) -> list[Outcome]:
        late = []
        for job, ran in self.pool.overdue(time.monotonic()):
            logger.error(
                "worker %s: job %s (%s) ran %.3g s, over its %.3g s timeout; failing it "
                "(its thread cannot be stopped and runs on)",
                self.id,
                job.id,
                job.task_path,
                ran,
                job.timeout,
            )
            self.pool.abandon(job.id)
            try:
                raise JobTimeout(f"{job.task_path} ran over its {job.timeout:g} s timeout.")
            except JobTimeout as exc:
                late.append(Outcome(job, succeeded=False, error=error_record(exc)))
        if late and self.pool.stuck >= self.concurrency:
            # No thread is left to run what waits here: let other workers have it.
            waiting = self.pool.cancel_waiting()
            released = self._db(lambda: leases.release(self.id, waiting)) or 0
            self.stats.released += released
            logger.error(
                "worker %s: all %d threads are stuck in timed-out jobs; put %d waiting jobs "
                "back and claiming nothing until a thread comes free",
                self.id,
                self.concurrency,
                released,
            )
        return late

    def _flush(self) -> None:
        batch, self._unflushed = self._unflushed, []
        if time.monotonic() - self._leases_renewed_at > self.settings.LEASE_SECONDS / 2:
            # Heartbeats have failed for a while (the database was away): some leases may
            # have run out and their jobs been taken back. Write only what is still ours.
            held = self._db(lambda: leases.still_held(self.id, [o.job.id for o in batch]))
            if held is None:
                self._unflushed = batch + self._unflushed
                return
            self._drop_lost([o for o in batch if o.job.id not in held], len(batch))
            batch = [o for o in batch if o.job.id in held]
        stored = self._db(lambda: complete.complete(self.id, batch))
        if stored is None:
            self._unflushed = batch + self._unflushed  # keep them for the next try
            return
        if stored < len(batch):
            logger.warning(
                "worker %s: %d of %d results were not stored: their leases ran out just now",
                self.id,
                len(batch) - stored,
                len(batch),
            )
        for outcome in batch:
            self._record(outcome)

    def _drop_lost(self, lost: list[Outcome], of: int) -> None:
        if not lost:
            return
        self.stats.lost += len(lost)
        logger.warning(
            "worker %s: %d of %d results came after their lease ran out and were dropped; "
            "those jobs were taken back and run again (jobs %s)",
            self.id,
            len(lost),
            of,
            ", ".join(str(o.job.id) for o in lost[:10]),
        )

    def _record(self, outcome: Outcome) -> None:
        job = outcome.job
        if outcome.succeeded:
            self.stats.succeeded += 1
            status = JobStatus.SUCCEEDED
        elif outcome.will_retry:
            self.stats.retried += 1
            logger.warning(
                "job %s (%s) failed attempt %d of %d; will retry: %s",
                job.id,
                job.task_path,
                job.attempts,
                job.max_attempts,
                _last_line(outcome),
            )
            return
        else:
            self.stats.failed += 1
            status = JobStatus.FAILED
        try:
            task = cached_task(job.task_path)
        except Exception:
            return  # nothing to build a TaskResult from; the job row says it all
        result = claimed_job_result(task, job, status, outcome)
        task_finished.send(type(task.get_backend()), task_result=result)

    def _maintain(self) -> None:
        now = time.monotonic()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.request_stop("the supervising process is gone")
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.settings.HEARTBEAT_SECONDS
        if self._db(lambda: leases.heartbeat(self.id, self.settings.LEASE_SECONDS)) is not None:
            self._leases_renewed_at = now
        rescued = self._db(leases.rescue_expired)
        if rescued and (rescued.requeued or rescued.failed):
            self.stats.rescued += rescued.requeued + rescued.failed
            logger.warning(
                "worker %s: took back %d jobs whose worker stopped renewing its lease "
                "(%d requeued, %d failed after their last attempt)",
                self.id,
                rescued.requeued + rescued.failed,
                rescued.requeued,
                rescued.failed,
            )

    def _shutdown(self) -> None:
        waiting = self.pool.cancel_waiting()
        if waiting:
            released = self._db(lambda: leases.release(self.id, waiting)) or 0
            self.stats.released += released
            logger.info("worker %s: put %d claimed, unstarted jobs back", self.id, released)
        deadline = time.monotonic() + self.shutdown_timeout
        while self.pool.in_flight and time.monotonic() < deadline:
            self._maintain()
            self._collect(min(TICK_SECONDS, max(0.0, deadline - time.monotonic())))
        self._collect(0.0)
        if self.pool.in_flight:
            logger.warning(
                "worker %s: %d jobs still running after the %.0f s shutdown timeout; leaving "
                "them leased, to be run again once their lease expires",
                self.id,
                self.pool.in_flight,
                self.shutdown_timeout,
            )
        self._db(lambda: leases.unregister_worker(self.id))
        self.pool.shutdown()
        stats = self.stats
        logger.info(
            "worker %s stopped: %d runs finished (%d succeeded, %d will retry, %d failed)"
            " in %.1f s; %d statements (%.3f per run)",
            self.id,
            stats.finished,
            stats.succeeded,
            stats.retried,
            stats.failed,
            time.monotonic() - stats.started,
            stats.statements,
            stats.statements / max(stats.finished, 1),
        )

    @property
    def abandoned(self) -> int:
        """Threads still running jobs: unfinished at the shutdown deadline, or timed out."""
        return self.pool.in_flight + self.pool.stuck

    # -- database errors -------------------------------------------------------------

    def _db(self, operation: Callable[[], Any]) -> Any:
        """Run a database operation; on a database error, log it, drop the connection
        and back off, returning None. The database is the truth: nothing is lost, the
        next try picks up where this one left off."""
        now = time.monotonic()
        if now < self._db_ok_after:
            return None
        try:
            value = operation()
        except DatabaseErrors as exc:
            self._db_failures += 1
            pause = min(10.0, 0.5 * 2 ** min(self._db_failures - 1, 5))
            self._db_ok_after = now + pause
            logger.warning(
                "worker %s: database error (%s: %s); retrying in %.1f s",
                self.id,
                type(exc).__name__,
                (str(exc).strip().splitlines() or [""])[0],
                pause,
            )
            connections[router.db_for_write(Job)].close()
            return None
        if self._db_failures:
            logger.info("worker %s: database reachable again", self.id)
            self._db_failures = 0
        return value

    def _count_statement(
        self, execute: Any, sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        self.stats.statements += 1
        return execute(sql, params, many, context)


def _last_line(outcome: Outcome) -> str:
    lines = (outcome.error or {}).get("traceback", "").strip().splitlines()
    return lines[-1] if lines else "unknown error"
