"""Maintenance: the heartbeat that renews this worker's leases, the rescue of jobs whose
worker stopped renewing theirs, and the watch on a supervising process."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from django_outbox.jobs import idlekeys, keys, leases
from django_outbox.wake import Waker
from django_outbox.worker import cancellation
from django_outbox.worker.completer import Completer
from django_outbox.worker.database import Database
from django_outbox.worker.events import FoundWork, Orphaned, Post
from django_outbox.worker.stats import WorkerStats

logger = logging.getLogger("django_outbox.worker")

#: The sweep of keys with a free turn nobody gave (``keys.sweep``): a safety net, run with
#: the stalled check but not more often than this.
SWEEP_SECONDS = 30.0


class Maintenance:
    def __init__(
        self,
        *,
        worker_id: str,
        settings: Any,
        db: Database,
        completer: Completer,
        stats: WorkerStats,
        holding: Callable[[], int],
        poll_seconds: Callable[[], float],
        parent_pid: int | None,
        post: Post,
    ) -> None:
        self.worker_id = worker_id
        self.settings = settings
        self.db = db
        self.completer = completer
        self.stats = stats
        #: How many jobs the worker holds (running, waiting, or unwritten).
        self.holding = holding
        self.poll_seconds = poll_seconds
        self.parent_pid = parent_pid
        #: Where it tells the worker that the supervisor is gone (Orphaned) or that it
        #: put jobs back in the queue (FoundWork).
        self.post = post
        self.waker: Waker | None = None
        self._next_heartbeat = 0.0
        self._next_rescue = 0.0
        self._next_sweep = 0.0

    def due_at(self) -> float:
        return min(self._next_heartbeat, self._next_rescue)

    def busy_now(self) -> None:
        """Jobs were just claimed by an idle worker: renew their leases on the busy
        schedule, not the idle one (which can be as long as a lease)."""
        now = time.monotonic()
        self.completer.leases_renewed_at = now
        self._next_heartbeat = min(self._next_heartbeat, now + self.settings.HEARTBEAT_SECONDS)

    def run_due(self) -> None:
        now = time.monotonic()
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.post(Orphaned())
        if now >= self._next_heartbeat:
            self._heartbeat(now)
        if now >= self._next_rescue:
            active = self.waker is not None and self.waker.active
            self._next_rescue = now + (
                self.settings.STALLED_CHECK_SECONDS if active else self.settings.HEARTBEAT_SECONDS
            )
            self._rescue()

    def _heartbeat(self, now: float) -> None:
        """Renew this worker's leases; an idle worker only says it is alive, less often."""
        self.completer.release_pending()
        if self.holding():
            self._next_heartbeat = now + self.settings.HEARTBEAT_SECONDS
            renewed = self.db.run(
                lambda: leases.heartbeat(self.worker_id, self.settings.LEASE_SECONDS)
            )
            if renewed is not None:
                for job_id in renewed.cancel_requested:
                    cancellation.request(job_id)
        else:
            self._next_heartbeat = now + max(self.settings.HEARTBEAT_SECONDS, self.poll_seconds())
            # A PostgreSQL listener's heartbeat says it for us.
            reports = self.waker is not None and self.waker.reports_alive
            renewed = 0 if reports else self.db.run(lambda: leases.alive(self.worker_id))
        if renewed is not None:
            self.completer.leases_renewed_at = now

    def _rescue(self) -> None:
        rescued = self.db.run(leases.rescue_expired)
        if rescued and rescued.requeued:
            self.post(FoundWork())
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + max(self.settings.STALLED_CHECK_SECONDS, SWEEP_SECONDS)
        admitted = self.db.run(keys.sweep)
        # After the sweep, so that a failure here (which pauses the worker's database
        # work a moment) never keeps the sweep from running.
        self.db.run(idlekeys.forget_idle)
        if admitted:
            self.post(FoundWork())
            logger.info(
                "worker %s: queued %d held jobs whose keys had a free turn (a job of the key "
                "was deleted, say)",
                self.worker_id,
                admitted,
            )
        if rescued and (rescued.requeued or rescued.failed):
            self.stats.rescued += rescued.requeued + rescued.failed
            logger.warning(
                "worker %s: took back %d jobs whose worker stopped renewing its lease "
                "(%d requeued, %d failed after their last attempt)",
                self.worker_id,
                rescued.requeued + rescued.failed,
                rescued.requeued,
                rescued.failed,
            )
