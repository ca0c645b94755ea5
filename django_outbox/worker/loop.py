"""The worker: a short loop over its services, on the main thread that owns the connection.

- the producer (producer.py) decides when to claim and how much;
- the pool (pool.py) runs claimed jobs on threads and puts their outcomes in the inbox;
- the listener (listener.py) waits on the wake-up channel on its own thread and puts
  signals in the inbox;
- the completer (completer.py) writes outcomes back in batches;
- maintenance (maintenance.py) renews leases, rescues expired ones, watches the supervisor;
- pauses (pauses.py) say which of its queues are paused: the claim skips them.

The loop waits on the inbox until news comes (an outcome, a signal) or a service's timer
falls due; it holds no SQL and makes no decision a service owns. The services tell it
what happened by posting events (events.py: jobs put back, slots freed, jobs handed over,
work found, the supervisor gone), which ``Worker.on`` hands to the service that acts on
them; no service calls another. What it logs at start and stop is in report.py, the
runs over their timeout in timeouts.py, when a burst worker leaves in burst.py.

One module over 400 lines: the loop and its start and stop (registering, listening,
draining) share the worker's state.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter

from django.db import connections, router
from django.utils import timezone
from django.utils.crypto import get_random_string

from django_outbox import conf
from django_outbox.db.routing import database_of, serving
from django_outbox.jobs import leases
from django_outbox.jobs.handoff import Handoff
from django_outbox.jobs.types import Outcome
from django_outbox.lib import text
from django_outbox.models import Job
from django_outbox.wake import Wake, Waker, build_waker, notify
from django_outbox.wake.polling import PollingWaker
from django_outbox.worker import burst, report
from django_outbox.worker.completer import Completer
from django_outbox.worker.database import Database
from django_outbox.worker.events import Event, FoundWork, Handed, Orphaned, Requeued, SlotsFreed
from django_outbox.worker.inbox import Inbox
from django_outbox.worker.listener import Listener
from django_outbox.worker.maintenance import Maintenance
from django_outbox.worker.pauses import Pauses
from django_outbox.worker.pool import Pool
from django_outbox.worker.producer import MAX_ADAPTIVE_BATCH, CannotClaim, Producer
from django_outbox.worker.pruner import Pruner
from django_outbox.worker.scheduler import Scheduler
from django_outbox.worker.stats import WorkerStats
from django_outbox.worker.timeouts import time_out_overdue

__all__ = ["MAX_ADAPTIVE_BATCH", "MAX_BATCH_SIZE", "Worker", "WorkerStats", "default_batch_size"]

logger = logging.getLogger("django_outbox.worker")

#: How long a stopping worker waits for its idle threads to close their connections.
JOIN_SECONDS = 5.0

#: Longest the loop waits while jobs run, so a run over its timeout is seen promptly.
TICK_SECONDS = 0.1
#: Most jobs one claim may take (and one completion write), within every database's
#: limit on statement parameters.
MAX_BATCH_SIZE = 1000


def default_batch_size(concurrency: int) -> int:
    """Jobs claimed and held at once unless told otherwise: four per thread, or more when
    jobs are quick (see producer.CLAIM_HORIZON_SECONDS)."""
    return 4 * concurrency


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
        self.settings = settings = conf.get()
        self.id = new_worker_id()
        self.queues = list(queues)
        self.backend = backend
        self.concurrency = concurrency
        self.batch_size = batch_size or default_batch_size(concurrency)
        self.burst = burst
        self.shutdown_timeout = shutdown_timeout
        self.parent_pid = parent_pid
        self.stats = WorkerStats()
        self._stop = threading.Event()
        #: Set once the worker is registered and listening for wake-ups.
        self.ready = threading.Event()
        #: Set when a thread got stuck in a timed-out job under the supervisor: this
        #: process drains and exits for a fresh one to take its place.
        self.replace_me = False
        #: Why this worker could not claim jobs (the database refused, or stayed out of
        #: reach at the end of a burst), when it could not: it then exits non-zero.
        self.cannot_claim: str | None = None
        self.inbox = Inbox()
        self.pool = Pool(concurrency, self.inbox)
        self.alias = database_of(backend) or router.db_for_write(Job)
        self.db = Database(self.id, self.alias, settings.LEASE_SECONDS, self.stats)
        self.waker: Waker = PollingWaker(self.queues, self._stop)
        self._listener: Listener | None = None
        self.producer = Producer(
            worker_id=self.id,
            queues=self.queues,
            backend=backend,
            settings=settings,
            concurrency=concurrency,
            batch_size=self.batch_size,
            adaptive=batch_size is None,
            db=self.db,
            pool=self.pool,
            stats=self.stats,
        )
        self.completer = Completer(
            self.id,
            self.db,
            self.stats,
            settings.LEASE_SECONDS,
            limited_queues=set(settings.concurrency_limits(self.queues)),
            post=self.on,
            handoff=self._handoff,
        )
        self.maintenance = Maintenance(
            worker_id=self.id,
            settings=settings,
            db=self.db,
            completer=self.completer,
            stats=self.stats,
            holding=lambda: self.pool.in_flight + self.pool.stuck + len(self.completer.unflushed),
            poll_seconds=lambda: self.producer.poll_seconds,
            parent_pid=parent_pid,
            post=self.on,
        )
        self.pauses = Pauses(self.id, self.queues, self.db)
        #: Queues with a concurrency or rate limit: a claim counts them, a hand-off cannot.
        self._limited = frozenset(settings.concurrency_limits(self.queues)) | frozenset(
            settings.rate_limits(self.queues)
        )

    # -- control ---------------------------------------------------------------------

    def on(self, event: Event) -> None:
        """What the services post (worker/events.py), acted on at once."""
        match event:
            case Requeued(when, held):
                self.producer.requeued(when, held)
            case SlotsFreed(freed):
                self._slots_freed(freed)
            case Handed(jobs):
                self.producer.handed(jobs)
            case FoundWork():
                self.producer.look_now()
            case Orphaned():
                self.request_stop("the supervising process is gone")

    def request_stop(self, reason: str = "asked to stop") -> None:
        if not self._stop.is_set():
            running = self.pool.running
            finishing = (
                f" once its {text.count(running, 'running job')} finish (at most "
                f"{text.duration(self.shutdown_timeout)})"
                if running
                else ""
            )
            logger.info("worker %s: %s; stopping%s", self.id, reason, finishing)
        self._stop.set()
        self.inbox.poke()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def claim_size(self) -> int:
        return self.producer.claim_size

    def run(self) -> WorkerStats:
        """Work until asked to stop (or, with ``burst``, until nothing is due)."""
        with (
            serving(self.backend),
            connections[self.alias].execute_wrapper(self.db.count_statement),
        ):
            self.db.run(
                lambda: leases.register_worker(self.id, self.queues, self.concurrency, os.getpid())
            )
            # Listen before the first look for work, so a signal sent in between is not lost.
            self._listen()
            report.started(
                self.id,
                backend=self.backend,
                queues=self.queues,
                concurrency=self.concurrency,
                batches=f"{self.batch_size} (up to {MAX_ADAPTIVE_BATCH} for quick jobs)"
                if self.producer.adaptive
                else str(self.batch_size),
                alias=self.alias,
                waker=self.waker.name,
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
                if self._listener is not None:
                    self._listener.stop()
                else:
                    self.waker.close()
                self._shutdown()
        return self.stats

    def _listen(self) -> None:
        self.waker = build_waker(
            self.queues, self._stop, self.alias, alive=lambda: leases.alive_statement(self.id)
        )
        self.producer.waker = self.maintenance.waker = self.waker
        if not isinstance(self.waker, PollingWaker):
            self._listener = Listener(self.waker, self.inbox, self._stop)
            self._listener.start()

    def _handoff(self) -> Handoff | None:
        """What this worker may take of the next jobs of keys its completion frees: jobs
        of the queues it claims from (not paused) that have no limit, up to its room."""
        room = self.producer.handoff_room
        if self._stop.is_set() or room < 1:
            return None
        queues = frozenset(self.producer.queues) - self._limited
        if not queues:
            return None
        return Handoff(self.id, queues, self.backend, room, self.settings.LEASE_SECONDS)

    def _slots_freed(self, freed: Counter[str]) -> None:
        """Slots of limited queues came free. This worker takes as many as it has idle
        threads, at once; the other workers serving those queues are signalled only for
        slots it cannot take (signalling them all would have them all queue up for the
        queue's lock)."""
        self.producer.look_now()
        if sum(freed.values()) > self.producer.idle_threads:
            notify.notify_on_commit([(queue, timezone.now()) for queue in freed], self.alias)

    # -- the loop --------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._work()
        except CannotClaim as exc:
            self.cannot_claim = str(exc)
            logger.error(
                "worker %s: cannot claim jobs: the database refused the claim (%s). Has "
                "`python manage.py migrate` run on it?",
                self.id,
                exc,
            )
            self.request_stop("cannot claim jobs")

    def _work(self) -> None:
        producer = self.producer
        while not self._stop.is_set():
            self.maintenance.run_due()
            self._take_news()
            was_idle = not self._holding()
            self._read_pauses()
            claimed = producer.refill()
            # Claimed first, then written: the threads have their next jobs while the
            # outcomes go to the database.
            self._flush_if_due()
            if claimed and was_idle:
                self.maintenance.busy_now()
            if self._listener is not None:
                self._listener.room(producer.has_room)
            if claimed:
                continue
            if self.burst and not self._holding():
                leave = burst.look_last(self.id, producer, self.db, self.inbox, self._read_pauses)
                if leave is not None:
                    self.cannot_claim = leave.cannot_claim
                    return
                continue
            self._wait()

    def _read_pauses(self) -> None:
        """Before a claim, and each second while a queue is paused: which queues are
        paused, at most once a second. The producer claims from the others only."""
        pauses = self.pauses
        now = time.monotonic()
        if not pauses.stale(now) or not (pauses.paused or self.producer.has_room):
            return
        if self.db.failures:
            # What was known last holds while the database fails: a read that succeeds
            # would say it is reachable again when the claim is what fails (a burst
            # worker counts those failures to know when to give up).
            return
        resumed = pauses.refresh(now)
        self.producer.queues = pauses.running
        if resumed:  # look now, and ask again when the next delayed job falls due
            self.producer.wake(Wake(look_now=True))

    def _take_news(self) -> None:
        """Hand the inbox's signals to the producer and its outcomes to the completer."""
        self.producer.wake(self.inbox.take_wake())
        ready = self.pool.accept(self.inbox.take_outcomes()) + self._time_out_overdue()
        self.completer.add(ready)
        if self.completer.urgent:  # a limited queue's slot: free it before the claim
            self._flush_if_due()

    def _flush_if_due(self) -> None:
        self.completer.flush_if_due(
            enough=max(1, self.producer.claim_size // 2),
            running=self.pool.in_flight,
            stopping=self._stop.is_set(),
        )

    def _holding(self) -> int:
        return self.pool.in_flight + len(self.completer.unflushed)

    def _wait(self) -> None:
        now = time.monotonic()
        until = min(
            self.producer.due_at(),
            self.completer.due_at(),
            self.maintenance.due_at(),
            self.pauses.due_at(),  # while a queue is paused: read again in a second
        )
        timeout = until - now
        if self.pool.in_flight:
            timeout = min(timeout, TICK_SECONDS)  # runs over their timeout end promptly
        elif self.completer.unflushed:  # the database is away: wait, do not spin
            timeout = max(timeout, min(TICK_SECONDS, self.db.ok_after - now))
        if timeout > 0:
            self.inbox.wait(timeout)

    def _time_out_overdue(self) -> list[Outcome]:
        """Fail the runs over their timeout (worker/timeouts.py). Under the supervisor
        (``--processes``) the worker then drains and exits, and a fresh process replaces
        it; a lone worker goes on with the threads it has left."""
        timed_out = time_out_overdue(self.pool, self.id)
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
            self.completer.release(self.pool.cancel_waiting())
            released = self.completer.release_pending()
            logger.error(
                "worker %s: all %d threads are stuck in timed-out jobs; put %d waiting jobs "
                "back; claiming nothing until a thread comes free",
                self.id,
                self.concurrency,
                released,
            )
        return timed_out

    # -- stopping --------------------------------------------------------------------

    def _shutdown(self) -> None:
        completer = self.completer
        completer.release(self.pool.cancel_waiting())
        released = completer.release_pending()
        if released:
            logger.info("worker %s: put %d claimed, unstarted jobs back", self.id, released)
        deadline = time.monotonic() + self.shutdown_timeout
        # Runs that timed out are recorded already: their stuck threads are not waited for.
        while (
            self.pool.in_flight or completer.unflushed or completer.to_release
        ) and time.monotonic() < deadline:
            self.maintenance.run_due()
            completer.release_pending()
            self._take_news()
            self._flush_if_due()
            if self.pool.in_flight or completer.unflushed or completer.to_release:
                self.inbox.wait(min(TICK_SECONDS, max(0.0, deadline - time.monotonic())))
        self._take_news()
        self._flush_if_due()
        report.left_behind(
            self.id,
            len(completer.unflushed),
            len(completer.to_release),
            self.pool.in_flight,
            self.shutdown_timeout,
        )
        self.db.run(lambda: leases.unregister_worker(self.id))
        self.pool.shutdown()
        # Its idle threads leave now; run() returns once they have closed their connections.
        self.pool.join(JOIN_SECONDS)
        report.stopped(self.id, self.stats)

    @property
    def abandoned(self) -> int:
        """Threads still running jobs: unfinished at the shutdown deadline, or timed out."""
        return self.pool.in_flight + self.pool.stuck

    @property
    def unwritten(self) -> int:
        """Results and releases the worker could not write before it stopped."""
        return len(self.completer.unflushed) + len(self.completer.to_release)
