"""The worker loop: claim → run → complete, plus heartbeats, rescue and a clean stop.

The loop owns one database connection (the main thread's) and calls named operations
from ``django_outbox.jobs``; it holds no SQL of its own. Jobs run on the pool's threads.
"""

from __future__ import annotations

import heapq
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import Error as DatabaseErrors
from django.db import InterfaceError, OperationalError, connections, router
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_outbox import conf, telemetry
from django_outbox.exceptions import JobTimeout, ResultNotStored
from django_outbox.jobs import claim, complete, leases
from django_outbox.jobs.complete import Outcome
from django_outbox.models import Job, JobStatus
from django_outbox.wake import Wake, Waker, build_waker
from django_outbox.wake.polling import PollingWaker
from django_outbox.worker import cancellation
from django_outbox.worker.executor import error_record, send_finished
from django_outbox.worker.pool import Pool
from django_outbox.worker.pruner import Pruner
from django_outbox.worker.scheduler import Scheduler

logger = logging.getLogger("django_outbox.worker")

#: Longest the loop waits for outcomes before it looks at its timers again.
TICK_SECONDS = 0.1
#: Most jobs one claim may take (and one completion write), within every database's
#: limit on statement parameters.
MAX_BATCH_SIZE = 1000


def default_batch_size(concurrency: int) -> int:
    """Jobs claimed and held at once unless told otherwise: four per thread, or more when
    jobs are quick (see CLAIM_HORIZON_SECONDS)."""
    return 4 * concurrency


#: Without --batch-size, a worker whose jobs are quick claims as many as its threads can
#: run in this long, judged by its recent runs (at least the default batch, at most
#: MAX_ADAPTIVE_BATCH): quick jobs then cost a claim and a completion per hundreds, not
#: per handful, and slow jobs are claimed as before, so other workers are not starved.
CLAIM_HORIZON_SECONDS = 0.1
MAX_ADAPTIVE_BATCH = 500


#: Longest a finished run waits to be written with others in one statement.
FLUSH_LINGER_SECONDS = 0.02


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    failed: int = 0
    released: int = 0
    #: Runs a rate limit held back (queued again, not counted as attempts).
    held: int = 0
    lost: int = 0
    rescued: int = 0
    statements: int = 0
    started: float = field(default_factory=time.monotonic)
    #: CPU time of the whole process (every thread) when the worker started.
    cpu_started: float = field(default_factory=time.process_time)

    @property
    def finished(self) -> int:
        return self.succeeded + self.retried + self.failed

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__} | {
            "seconds": round(time.monotonic() - self.started, 3),
            "cpu_seconds": round(time.process_time() - self.cpu_started, 3),
            # Peak resident memory of the process so far (Linux reports kilobytes).
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
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
        if batch_size is not None and not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be from 1 to {MAX_BATCH_SIZE}, not {batch_size}.")
        if shutdown_timeout < 0:
            raise ValueError(f"shutdown_timeout must not be negative, not {shutdown_timeout}.")
        self.settings = conf.get()
        self.id = new_worker_id()
        self.queues = list(queues)
        self.backend = backend
        self.concurrency = concurrency
        self.batch_size = batch_size or default_batch_size(concurrency)
        #: Whether the batch grows with quick jobs (no --batch-size given).
        self.adaptive = batch_size is None
        #: The batch the next claim fills up to (see claim_size()).
        self.claim_size = self.batch_size
        self.burst = burst
        self.shutdown_timeout = shutdown_timeout
        self.parent_pid = parent_pid
        self.stats = WorkerStats()
        self.pool = Pool(concurrency)
        self._stop = threading.Event()
        #: Set once the worker is registered and listening for wake-ups.
        self.ready = threading.Event()
        self._unflushed: list[Outcome] = []
        self._to_release: list[int] = []
        self._unflushed_since = 0.0
        self._next_claim = 0.0
        #: Monotonic times at which retries this worker wrote fall due (a min-heap).
        self._retries_due: list[float] = []
        self._next_heartbeat = 0.0
        self._next_rescue = 0.0
        self._next_wake_check = 0.0
        #: Whether the next empty claim should ask when the next delayed job falls due:
        #: after a start, a signal or a busy spell, not after every idle stalled check.
        self._due_unknown = True
        self.waker: Waker = PollingWaker(self.queues, self._stop)
        self._leases_renewed_at = time.monotonic()
        self._db_ok_after = 0.0
        self._db_failures = 0
        #: Set when a thread got stuck in a timed-out job under the supervisor: this
        #: process drains and exits for a fresh one to take its place.
        self.replace_me = False
        #: When the last job this worker held back for a rate limit falls due (monotonic).
        self._latest_held = 0.0

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
            # Listen before the first look for work, so a signal sent in between is not lost.
            self.waker = build_waker(
                self.queues, self._stop, alias, alive=lambda: leases.alive_statement(self.id)
            )
            logger.info(
                "worker %s started: queues %s, %d threads, batches of %d, %s database, "
                "wake-ups: %s",
                self.id,
                ",".join(self.queues),
                self.concurrency,
                self.batch_size,
                connections[alias].vendor,
                self.waker.name,
            )
            pruner = scheduler = None
            if self.settings.RETENTION is not None:
                pruner = Pruner(self.settings.RETENTION, self.id)
                pruner.start()
            if self.settings.SCHEDULES and not self.burst:
                scheduler = Scheduler(self.id)
                scheduler.start()
            self.ready.set()
            try:
                self._loop()
            finally:
                if pruner is not None:
                    pruner.stop()
                if scheduler is not None:
                    scheduler.stop()
                self._shutdown()
                self.waker.close()
        return self.stats

    # -- the loop --------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._maintain()
            claimed = self._refill()
            if self.pool.in_flight or self._unflushed or (self.pool.stuck and not self.burst):
                self._glance_at_wake_ups()
                self._collect(TICK_SECONDS if not claimed else 0.0)
                continue
            if claimed:
                continue
            if self.burst:
                # Look once more, whatever the poll timer says, before leaving.
                self._next_claim = 0.0
                if self._refill():
                    continue
                now = time.monotonic()
                # Not before the next claim is due; the whole poll when none is (a claim
                # that could not run, with every thread stuck, leaves it in the past).
                pause = self._next_claim - now
                pause = min(pause, self._poll_seconds) if pause > 0 else self._poll_seconds
                if self._latest_held > now:
                    # Jobs this worker held back for a rate limit are part of its work.
                    self._stop.wait(min(pause, self._latest_held - now))
                    continue
                if self._due_behind_a_limit():
                    # Due jobs wait for room or a token in a limited queue: wait, not leave.
                    self._stop.wait(pause)
                    continue
                logger.info("worker %s: nothing is due; leaving (burst)", self.id)
                return
            now = time.monotonic()
            until = min(self._next_claim, self._next_heartbeat, self._next_rescue)
            self._apply(self.waker.wait(max(0.0, until - now)))

    def _due_behind_a_limit(self) -> bool:
        """Whether a queue of this worker with a concurrency or rate limit has a due job."""
        limited = list(
            self.settings.concurrency_limits(self.queues) | self.settings.rate_limits(self.queues)
        )
        if not limited:
            return False
        due = self._db(lambda: claim.next_due(limited, self.backend))
        return due is not None and due <= timezone.now()

    @property
    def _poll_seconds(self) -> float:
        """How long an idle worker goes without looking for work by itself."""
        if self.waker.active:
            return self.settings.STALLED_CHECK_SECONDS
        return self.settings.POLL_INTERVAL

    def _apply(self, wake: Wake) -> None:
        if wake.look_now:
            self._next_claim = 0.0
            self._due_unknown = True
        if wake.next_due is not None:
            self._next_claim = min(self._next_claim, _monotonic_at(wake.next_due))
            # Clocks differ by milliseconds: a look a hair early finds nothing, and must
            # then ask when the job falls due rather than wait for the stalled check.
            self._due_unknown = True

    def _glance_at_wake_ups(self) -> None:
        """While busy with room to spare, see (without waiting) whether work arrived."""
        now = time.monotonic()
        if now < self._next_wake_check or now >= self._next_claim:
            return
        if self.pool.in_flight + self.pool.stuck >= min(self.batch_size, self.concurrency + 1):
            return
        self._next_wake_check = now + 0.05
        self._apply(self.waker.wait(0.0))

    def _refill(self) -> int:
        """Claim up to the room left in the batch, when there is room and it is time."""
        # Threads still stuck in timed-out jobs are busy too: count them as in flight.
        in_flight = self.pool.in_flight + self.pool.stuck
        if self.pool.stuck >= self.concurrency:
            return 0
        self.claim_size = self._claim_size()
        if in_flight >= self.claim_size or in_flight > self.concurrency:
            return 0
        now = time.monotonic()
        if now < self._next_claim:
            return 0
        want = self.claim_size - in_flight
        batch = self._db(
            lambda: claim.claim_batch(
                self.id,
                self.queues,
                want,
                self.settings.LEASE_SECONDS,
                self.backend,
                rated_room=max(0, self.concurrency - in_flight),
            )
        )
        if batch is None:  # the database is unreachable: try again when _db allows
            self._next_claim = max(now + self.settings.POLL_INTERVAL, self._db_ok_after)
            return 0
        jobs = batch.jobs
        if jobs and not in_flight and not self._unflushed:
            # Every lease held is one just granted; renew them on the busy schedule, not
            # the idle one (which can be as long as a lease).
            self._leases_renewed_at = now
            self._next_heartbeat = min(self._next_heartbeat, now + self.settings.HEARTBEAT_SECONDS)
        for job in jobs:
            self.pool.submit(job)
        self.stats.claimed += len(jobs)
        if jobs:
            self._due_unknown = True
        if len(jobs) == want:
            self._next_claim = now  # the queues may hold more: claim again at once
            for queue in {job.queue for job in jobs}:
                self.waker.more_remain(queue)
            return len(jobs)
        # A short batch means the queues ran dry: look again at the next poll, or when
        # the next delayed job falls due if that is sooner (wake-ups know no other way).
        self._next_claim = now + self._poll_seconds
        if batch.retry_in is not None:  # a rate limit held a queue back: look at its next token
            self._next_claim = min(self._next_claim, now + batch.retry_in)
        # Retries this worker scheduled fall due on their own: look again at the next one.
        while self._retries_due and self._retries_due[0] <= now:
            heapq.heappop(self._retries_due)
        if self._retries_due:
            self._next_claim = min(self._next_claim, self._retries_due[0])
        if self.waker.active and not jobs and self._due_unknown:
            # Only when idle (no extra query per busy claim), and not again at every stalled
            # check: delayed jobs enqueued later come with their due time in the signal.
            due = self._db(lambda: claim.next_due(self.queues, self.backend))
            self._due_unknown = False
            if due is not None:
                # A due job we could not claim is locked by another worker's claim: look
                # again in a moment, never in a tight loop.
                at = _monotonic_at(due.timestamp())
                locked = at <= now  # due already, yet not claimed: someone holds it
                if locked:
                    at = now + min(1.0, self._poll_seconds)
                self._next_claim = min(self._next_claim, at)
                self._due_unknown = locked  # still locked then? ask again
        return len(jobs)

    def _claim_size(self) -> int:
        """The batch to claim up to: the fixed one, or, when adaptive, what the threads can
        run within CLAIM_HORIZON_SECONDS at the recent pace (never below the default)."""
        average = self.pool.average_run_seconds
        if not self.adaptive or average is None:
            return self.batch_size
        quick = int(self.concurrency * CLAIM_HORIZON_SECONDS / max(average, 1e-6))
        return max(self.batch_size, min(MAX_ADAPTIVE_BATCH, quick))

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
            or len(self._unflushed) >= max(1, self.claim_size // 2)
            or time.monotonic() - self._unflushed_since >= FLUSH_LINGER_SECONDS
        ):
            self._flush()

    def _time_out_overdue(self) -> list[Outcome]:
        """Fail the runs over their timeout, now, and stop waiting for them.

        Python cannot stop a thread: the function runs on (its ``context.cancelled()``
        turns true, so a task that checks it can stop) and whatever it returns is dropped.
        Its thread is reported and counts as stuck until it returns. A worker under the
        supervisor (``--processes``) then drains and exits, and a fresh process replaces
        it; a lone worker goes on with the threads it has left."""
        timed_out = []
        for job, ran in self.pool.overdue(time.monotonic()):
            cancellation.request(job.id)
            where = self.pool.abandon(job)
            logger.error(
                "worker %s: job %s (%s) ran %.3g s, over its %.3g s timeout: recorded as "
                "timed out; its thread cannot be stopped and is still running here:\n%s",
                self.id,
                job.id,
                job.task_path,
                ran,
                job.timeout,
                where.rstrip() or "  (its stack could not be read)",
            )
            try:
                raise JobTimeout(f"{job.task_path} ran over its {job.timeout:g} s timeout.")
            except JobTimeout as exc:
                timed_out.append(Outcome(job, succeeded=False, error=error_record(exc)))
        if not timed_out:
            return []
        if self.parent_pid is not None:
            self.replace_me = True
            self.request_stop(
                f"{self.pool.stuck} thread(s) stuck in timed-out jobs; draining, so that a "
                "fresh process replaces this one"
            )
        elif self.pool.stuck >= self.concurrency:
            # No thread is left to run what waits here: let other workers have it.
            self._to_release.extend(self.pool.cancel_waiting())
            released = self._release_pending()
            logger.error(
                "worker %s: all %d threads are stuck in timed-out jobs; put %d waiting jobs "
                "back and claiming nothing until a thread comes free",
                self.id,
                self.concurrency,
                released,
            )
        return timed_out

    def _release_pending(self) -> int:
        """Put back claimed jobs that will not start here; kept for a retry on failure."""
        if not self._to_release:
            return 0
        ids = list(self._to_release)
        released = self._db(lambda: leases.release(self.id, ids))
        if released is None:
            return 0
        self._to_release = [i for i in self._to_release if i not in set(ids)]
        self.stats.released += released
        return int(released)

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
        try:
            stored = self._db(lambda: complete.complete(self.id, batch), refused_raises=True)
        except DatabaseErrors:
            batch = self._complete_one_by_one(batch)
            stored = len(batch)
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

    def _complete_one_by_one(self, batch: list[Outcome]) -> list[Outcome]:
        """The database refused a batch: write each outcome alone, and record a run whose
        result it refuses as a failure that says why, so one job cannot block the rest.

        Returns the outcomes written; the rest go back to be written later."""
        written: list[Outcome] = []
        for position, outcome in enumerate(batch):
            if self._write_alone(outcome) is None:  # the connection went: try the rest later
                self._unflushed = batch[position:] + self._unflushed
                break
            written.append(outcome)
        return written

    def _write_alone(self, outcome: Outcome) -> int | None:
        def write() -> int:
            return complete.complete(self.id, [outcome])

        try:
            return self._db(write, refused_raises=True)
        except DatabaseErrors as exc:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            try:
                raise ResultNotStored(
                    f"the database refused this run's result: {type(exc).__name__}: {first_line}"
                ) from exc
            except ResultNotStored as refused:
                outcome.succeeded, outcome.return_value = False, None
                outcome.held_until = outcome.new_kwargs = None  # fail it, do not hold it
                outcome.error = error_record(refused)
            logger.error("worker %s: job %s: %s", self.id, outcome.job.id, first_line)
            return self._db(write)

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
        if outcome.held:
            assert outcome.held_until is not None
            self.stats.held += 1  # back in the queue, not an attempt: look again then
            at = self._look_again_at(outcome.held_until)
            self._latest_held = max(self._latest_held, at)
            return
        if outcome.succeeded:
            self.stats.succeeded += 1
            status = JobStatus.SUCCEEDED
            telemetry.ended(job.task_path, job.queue, "succeeded")
        elif outcome.will_retry:
            self.stats.retried += 1
            telemetry.ended(job.task_path, job.queue, "retried")
            if outcome.retry_at is not None:  # look again when it falls due
                self._look_again_at(outcome.retry_at)
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
            telemetry.ended(job.task_path, job.queue, "failed")
        send_finished(outcome, status)

    def _look_again_at(self, when: datetime) -> float:
        """Claim again when a job this worker put back falls due; returns that moment on
        the monotonic clock."""
        at = _monotonic_at(when.timestamp())
        self._next_claim = min(self._next_claim, at)
        heapq.heappush(self._retries_due, at)
        return at

    def _maintain(self) -> None:
        now = time.monotonic()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.request_stop("the supervising process is gone")
        if now >= self._next_heartbeat:
            self._heartbeat(now)
        if now >= self._next_rescue:
            self._next_rescue = now + (
                self.settings.STALLED_CHECK_SECONDS
                if self.waker.active
                else self.settings.HEARTBEAT_SECONDS
            )
            self._rescue()

    def _heartbeat(self, now: float) -> None:
        """Renew this worker's leases; an idle worker only says it is alive, less often."""
        self._release_pending()
        holding = self.pool.in_flight + self.pool.stuck + len(self._unflushed)
        if holding:
            self._next_heartbeat = now + self.settings.HEARTBEAT_SECONDS
            renewed = self._db(lambda: leases.heartbeat(self.id, self.settings.LEASE_SECONDS))
            if renewed is not None:
                for job_id in renewed.cancel_requested:
                    cancellation.request(job_id)
        else:
            self._next_heartbeat = now + max(self.settings.HEARTBEAT_SECONDS, self._poll_seconds)
            # A PostgreSQL listener's heartbeat says it for us.
            renewed = 0 if self.waker.reports_alive else self._db(lambda: leases.alive(self.id))
        if renewed is not None:
            self._leases_renewed_at = now

    def _rescue(self) -> None:
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
        self._to_release.extend(self.pool.cancel_waiting())
        released = self._release_pending()
        if released:
            logger.info("worker %s: put %d claimed, unstarted jobs back", self.id, released)
        deadline = time.monotonic() + self.shutdown_timeout
        # Runs that timed out are recorded already: their stuck threads are not waited for.
        while (
            self.pool.in_flight or self._unflushed or self._to_release
        ) and time.monotonic() < deadline:
            self._maintain()
            self._release_pending()
            self._collect(min(TICK_SECONDS, max(0.0, deadline - time.monotonic())))
        self._collect(0.0)
        if self._unflushed or self._to_release:
            logger.warning(
                "worker %s: could not write %d results or put back %d jobs before stopping "
                "(database unreachable); those jobs run again once their lease expires",
                self.id,
                len(self._unflushed),
                len(self._to_release),
            )
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

    @property
    def unwritten(self) -> int:
        """Results and releases the worker could not write before it stopped."""
        return len(self._unflushed) + len(self._to_release)

    # -- database errors -------------------------------------------------------------

    def _db(self, operation: Callable[[], Any], refused_raises: bool = False) -> Any:
        """Run a database operation; on a database error, log it, drop the connection
        and back off, returning None. The database is the truth: nothing is lost, the
        next try picks up where this one left off."""
        now = time.monotonic()
        if now < self._db_ok_after:
            return None
        try:
            value = operation()
        except DatabaseErrors as exc:
            if refused_raises and not isinstance(exc, OperationalError | InterfaceError):
                raise  # the database answered, and said no: the caller deals with it
            self._db_failures += 1
            # Heartbeats wait too: keep the pause well inside a lease, so the jobs this
            # worker runs are not taken back while the database is briefly away.
            longest = min(10.0, self.settings.LEASE_SECONDS / 4)
            pause = min(longest, 0.5 * 2 ** min(self._db_failures - 1, 5))
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


def _monotonic_at(epoch_seconds: float) -> float:
    """The monotonic-clock reading at a wall-clock time."""
    return time.monotonic() + (epoch_seconds - time.time())


def _last_line(outcome: Outcome) -> str:
    lines = (outcome.error or {}).get("traceback", "").strip().splitlines()
    return lines[-1] if lines else "unknown error"
