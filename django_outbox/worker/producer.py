"""The producer: decides when to look for work and how much to claim. Nothing else does.

It looks (claims) when:
- a signal said a queue has work (``wake``), or a slot of a limited queue came free;
- a job this worker put back (a retry, a rate limit's hold-back) falls due;
- the next delayed job it knows of falls due;
- its poll comes round: every ``STALLED_CHECK_SECONDS`` while signals can arrive (the safety
  net that finds a lost one), every ``POLL_INTERVAL`` without them;
- a full batch came back: the queues may hold more, so it claims again at once.

A claim fills the room left (the batch size less the jobs in hand), so a woken worker takes
work until its pool is full or the queues run dry, not one claim per free slot. A signal
that comes while there is no room is kept (``_look``) and leads to a claim as soon as a run
ends. docs/state_machine.md draws this.
"""

from __future__ import annotations

import heapq
import time
from datetime import datetime
from typing import Any

from django.db import Error as DatabaseErrors
from django.utils import timezone

from django_outbox.jobs import claim, keys
from django_outbox.wake import Wake, Waker
from django_outbox.worker.database import Database
from django_outbox.worker.pool import Pool
from django_outbox.worker.stats import WorkerStats

#: Without --batch-size, a worker whose jobs are quick claims as many as its threads can
#: run in this long, judged by its recent runs (at least the default batch, at most
#: MAX_ADAPTIVE_BATCH): quick jobs then cost a claim and a completion per hundreds, not
#: per handful, and slow jobs are claimed as before, so other workers are not starved.
CLAIM_HORIZON_SECONDS = 0.1
MAX_ADAPTIVE_BATCH = 500


class CannotClaim(Exception):
    """The database answered the claim and refused it (a missing table, a database
    django_outbox cannot claim on …): trying again cannot help, unlike a lost connection."""


class Producer:
    def __init__(
        self,
        *,
        worker_id: str,
        queues: list[str],
        backend: str,
        settings: Any,
        concurrency: int,
        batch_size: int,
        adaptive: bool,
        db: Database,
        pool: Pool,
        stats: WorkerStats,
    ) -> None:
        self.worker_id = worker_id
        self.queues = queues
        self.backend = backend
        self.settings = settings
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.adaptive = adaptive
        self.db = db
        self.pool = pool
        self.stats = stats
        self.waker: Waker | None = None
        #: The batch the next claim fills up to (see _claim_size()).
        self.claim_size = batch_size
        #: A signal asked for a look that has not happened yet.
        self._look = True
        #: The next look on the producer's own timer (monotonic).
        self._next_look = 0.0
        #: Monotonic times at which jobs this worker put back fall due (a min-heap).
        self._requeued_due: list[float] = []
        #: Whether the next empty claim should ask when the next delayed job falls due:
        #: after a start, a signal or a busy spell, not after every idle stalled check.
        self._due_unknown = True
        #: When the last job this worker held back for a rate limit falls due (monotonic).
        self.latest_held = 0.0

    # -- what it is told -----------------------------------------------------------------

    def wake(self, wake: Wake) -> None:
        if wake.look_now:
            self._look = True
            self._due_unknown = True
        if wake.next_due is not None:
            self._next_look = min(self._next_look, monotonic_at(wake.next_due))
            # Clocks differ by milliseconds: a look a hair early finds nothing, and must
            # then ask when the job falls due rather than wait for the stalled check.
            self._due_unknown = True

    def look_now(self) -> None:
        self._look = True

    def requeued(self, when: datetime, held: bool) -> None:
        """A job this worker put back falls due at ``when``: look again then."""
        at = monotonic_at(when.timestamp())
        self._next_look = min(self._next_look, at)
        heapq.heappush(self._requeued_due, at)
        if held:
            self.latest_held = max(self.latest_held, at)

    # -- when ----------------------------------------------------------------------------

    @property
    def poll_seconds(self) -> float:
        """How long an idle worker goes without looking for work by itself."""
        if self.waker is not None and self.waker.active:
            return self.settings.STALLED_CHECK_SECONDS
        return self.settings.POLL_INTERVAL

    @property
    def room(self) -> int:
        """How many jobs the next claim may take: the batch less the jobs in hand, once
        those have fallen to the low-water mark (threads stuck in timed-out jobs count as
        busy)."""
        in_flight = self.pool.in_flight + self.pool.stuck
        if self.pool.stuck >= self.concurrency or in_flight > self.low_water:
            return 0
        return max(0, self.claim_size - in_flight)

    @property
    def low_water(self) -> int:
        """Jobs in hand at which the next claim is due: the threads' jobs and half of those
        claimed beyond them. The rest keep the threads busy while the claim runs (waiting
        until only the threads' jobs were left had them idle a claim's time, each time);
        the claim still takes at least half a batch."""
        return self.concurrency + max(0, self.claim_size - self.concurrency) // 2

    @property
    def handoff_room(self) -> int:
        """How many jobs a completion may hand this worker (jobs/handoff.py): the batch
        less the jobs in hand. No low-water mark: a hand-off costs no claim of its own."""
        if self.pool.stuck >= self.concurrency:
            return 0
        return max(0, self.claim_size - self.pool.in_flight - self.pool.stuck)

    def handed(self, jobs: list[claim.ClaimedJob]) -> None:
        """Run the jobs a completion handed this worker, as if claimed."""
        self.pool.submit_all(jobs)
        self.stats.claimed += len(jobs)

    @property
    def idle_threads(self) -> int:
        """Threads free to start a job now: how many jobs of limited queues a claim takes."""
        return max(0, self.concurrency - self.pool.in_flight - self.pool.stuck)

    @property
    def has_room(self) -> bool:
        return self.room > 0

    def due_at(self) -> float:
        """When the producer wants the loop back (monotonic; inf: only for news)."""
        if not self.has_room:
            return float("inf")  # a run's end brings the loop back
        if self._look:
            return self.db.ok_after
        return max(self._next_look, self.db.ok_after)

    # -- claiming ------------------------------------------------------------------------

    def refill(self) -> int:
        """Claim up to the room left in the batch, when there is room and it is time."""
        self.claim_size = self._claim_size()
        if not self.has_room:
            return 0
        now = time.monotonic()
        if not self._look and now < self._next_look:
            return 0
        want = self.room
        # Cleared before the claim: a signal that arrives during it asks for another look.
        self._look = False
        try:
            batch = self.db.run(
                lambda: claim.claim_batch(
                    self.worker_id,
                    self.queues,
                    want,
                    self.settings.LEASE_SECONDS,
                    self.backend,
                    rated_room=self.idle_threads,
                ),
                refused_raises=True,
            )
        except DatabaseErrors as exc:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise CannotClaim(f"{type(exc).__name__}: {first_line}") from exc
        if batch is None:  # the database is away: look again once it may be back
            self._look = True
            return 0
        jobs = batch.jobs
        self.pool.submit_all(jobs)
        self.stats.claimed += len(jobs)
        if jobs:
            self._due_unknown = True
        if len(jobs) == want:
            self._look = True  # the queues may hold more: claim again at once
            if self.waker is not None:
                for queue in {job.queue for job in jobs}:
                    self.waker.more_remain(queue)
            return len(jobs)
        self._ran_dry(now, batch.retry_in, idle=not jobs)
        return len(jobs)

    def _ran_dry(self, now: float, retry_in: float | None, idle: bool) -> None:
        """A short batch: the queues ran dry. Look again at the next poll, or sooner when
        something is known to fall due."""
        self._next_look = now + self.poll_seconds
        if retry_in is not None:  # a rate limit held a queue back: look at its next token
            self._next_look = min(self._next_look, now + retry_in)
        while self._requeued_due and self._requeued_due[0] <= now:
            heapq.heappop(self._requeued_due)
        if self._requeued_due:
            self._next_look = min(self._next_look, self._requeued_due[0])
        if self.waker is not None and self.waker.active and idle and self._due_unknown:
            # Only when idle (no extra query per busy claim), and not again at every stalled
            # check: delayed jobs enqueued later come with their due time in the signal.
            due = self.db.run(lambda: claim.next_due(self.queues, self.backend))
            self._due_unknown = False
            if due is not None:
                # A due job we could not claim is locked by another worker's claim, or held
                # by a full concurrency limit: look again in a moment, never in a tight loop.
                at = monotonic_at(due.timestamp())
                locked = at <= now
                if locked:
                    at = now + min(1.0, self.poll_seconds)
                self._next_look = min(self._next_look, at)
                self._due_unknown = locked  # still locked then? ask again

    def _claim_size(self) -> int:
        """The batch to claim up to: the fixed one, or, when adaptive, what the threads can
        run within CLAIM_HORIZON_SECONDS at the recent pace (never below the default)."""
        average = self.pool.average_run_seconds
        if not self.adaptive or average is None:
            return self.batch_size
        quick = int(self.concurrency * CLAIM_HORIZON_SECONDS / max(average, 1e-6))
        return max(self.batch_size, min(MAX_ADAPTIVE_BATCH, quick))

    def due_behind_a_limit(self) -> bool:
        """Whether a queue of this worker with a concurrency or rate limit has a due job."""
        limited = list(
            self.settings.concurrency_limits(self.queues) | self.settings.rate_limits(self.queues)
        )
        if not limited:
            return False
        due = self.db.run(lambda: claim.next_due(limited, self.backend))
        return due is not None and due <= timezone.now()

    def held_behind_a_running_key(self) -> bool:
        """Whether a job of this worker's queues is held behind a key one of whose jobs is
        running: its turn comes when that job ends, maybe in another worker."""
        return bool(self.db.run(lambda: keys.held_behind_running(self.queues, self.backend)))

    def next_look_in(self) -> float:
        """Seconds until the producer's own timer (a burst worker's pause)."""
        return self._next_look - time.monotonic()


def monotonic_at(epoch_seconds: float) -> float:
    """The monotonic-clock reading at a wall-clock time."""
    return time.monotonic() + (epoch_seconds - time.time())
