"""The completer: writes finished runs back in batches, and puts back unstarted jobs.

Outcomes gather for up to FLUSH_LINGER_SECONDS, so one UPDATE carries many even when jobs
finish one by one; results become visible that much later, never lost. A run of a queue with
a concurrency limit is written at once: its slot is free, and the next waiting job must not
wait for the linger (the worker then takes the slot, or signals others to: see loop.py).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from django.db import Error as DatabaseErrors
from django.utils import timezone

from django_outbox import telemetry
from django_outbox.exceptions import ResultNotStored
from django_outbox.jobs import complete, leases
from django_outbox.jobs.handoff import Handoff
from django_outbox.jobs.types import Outcome
from django_outbox.models import JobStatus
from django_outbox.worker.database import Database
from django_outbox.worker.events import Handed, Post, Requeued, SlotsFreed
from django_outbox.worker.executor import error_record, send_finished
from django_outbox.worker.stats import WorkerStats

logger = logging.getLogger("django_outbox.worker")

#: Longest a finished run waits to be written with others in one statement.
FLUSH_LINGER_SECONDS = 0.02


class Completer:
    def __init__(
        self,
        worker_id: str,
        db: Database,
        stats: WorkerStats,
        lease_seconds: float,
        limited_queues: set[str],
        post: Post,
        handoff: Callable[[], Handoff | None] = lambda: None,
    ) -> None:
        self.worker_id = worker_id
        self.db = db
        self.stats = stats
        self.lease_seconds = lease_seconds
        #: Queues with a concurrency limit: their runs free a slot when written.
        self.limited_queues = limited_queues
        #: Where it tells the worker what a write did: jobs put back (Requeued), slots
        #: freed (SlotsFreed), jobs handed to this worker (Handed).
        self.post = post
        #: What the worker may take of the next jobs of the keys a write frees (None:
        #: nothing now; jobs/handoff.py).
        self.handoff = handoff
        self.unflushed: list[Outcome] = []
        self.to_release: list[int] = []
        self._since = 0.0
        self._urgent = False
        #: When this worker's leases were last renewed (monotonic); maintenance sets it.
        self.leases_renewed_at = time.monotonic()

    def add(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            return
        if not self.unflushed:
            self._since = time.monotonic()
        self.unflushed.extend(outcomes)
        if self.limited_queues and any(o.job.queue in self.limited_queues for o in outcomes):
            self._urgent = True

    @property
    def urgent(self) -> bool:
        """A gathered outcome frees a slot of a limited queue: it is written at once."""
        return self._urgent

    def due_at(self) -> float:
        """When the gathered outcomes must be written (monotonic; inf: nothing gathered)."""
        if not self.unflushed:
            return float("inf")
        return max(self.db.ok_after, self._since + FLUSH_LINGER_SECONDS)

    def flush_if_due(self, enough: int, running: int, stopping: bool) -> None:
        if not self.unflushed or self.db.away:
            return
        if (
            self._urgent
            or not running
            or stopping
            or len(self.unflushed) >= enough
            or time.monotonic() >= self._since + FLUSH_LINGER_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        batch, self.unflushed = self.unflushed, []
        self._urgent = False
        if time.monotonic() - self.leases_renewed_at > self.lease_seconds / 2:
            # Heartbeats have failed for a while (the database was away): some leases may
            # have run out and their jobs been taken back. Write only what is still ours.
            held = self.db.run(lambda: leases.still_held(self.worker_id, [o.job.id for o in batch]))
            if held is None:
                self._put_back(batch)
                return
            lost = [o for o in batch if o.job.id not in held]
            self._drop_lost(lost, len(batch))
            if any(o.writes for o in lost):
                # What those runs did is still recorded; their jobs, no longer this
                # worker's, are left alone (complete() touches only jobs it holds).
                self.db.run(lambda: complete.complete(self.worker_id, lost))
            batch = [o for o in batch if o.job.id in held]
        keyed = any(o.job.limit_key is not None and o.ends_job for o in batch)
        handoff = self.handoff() if keyed else None
        try:
            stored = self.db.run(lambda: complete.complete(self.worker_id, batch, handoff), True)
        except DatabaseErrors:
            handoff = None  # rolled back: nothing was taken
            batch = self._complete_one_by_one(batch)
            stored = len(batch)
        if stored is None:
            self._put_back(batch)  # for the next try
            return
        if stored < len(batch):
            logger.warning(
                "worker %s: %d of %d results were not stored: their leases ran out just now",
                self.worker_id,
                len(batch) - stored,
                len(batch),
            )
        if self.limited_queues:
            freed = Counter(o.job.queue for o in batch if o.job.queue in self.limited_queues)
            if freed:
                self.post(SlotsFreed(freed))
        if handoff is not None and handoff.jobs:
            self.post(Handed(handoff.jobs))
        if any(o.job.workflow_id is not None and o.ends_job for o in batch) or (
            keyed and (handoff is None or handoff.queued)
        ):
            # Workflow steps or jobs with keys ended: the steps or the next jobs of the keys
            # they queued (and did not hand to this worker) are due now. Look for them at
            # once, not at the next poll (a wake-up reaches other workers; this one may be
            # polling).
            self.post(Requeued(timezone.now()))
        for outcome in batch:
            self._record(outcome)

    def _put_back(self, batch: list[Outcome]) -> None:
        if not self.unflushed:
            self._since = time.monotonic()
        self.unflushed = batch + self.unflushed

    def _complete_one_by_one(self, batch: list[Outcome]) -> list[Outcome]:
        """The database refused a batch: write each outcome alone, and record a run whose
        result it refuses as a failure that says why, so one job cannot block the rest.

        Returns the outcomes written; the rest go back to be written later."""
        written: list[Outcome] = []
        for position, outcome in enumerate(batch):
            if self._write_alone(outcome) is None:  # the connection went: try the rest later
                self._put_back(batch[position:])
                break
            written.append(outcome)
        return written

    def _write_alone(self, outcome: Outcome) -> int | None:
        def write() -> int:
            return complete.complete(self.worker_id, [outcome])

        try:
            return self.db.run(write, refused_raises=True)
        except DatabaseErrors as exc:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            what = (
                "this run's result and what it recorded" if outcome.writes else "this run's result"
            )
            try:
                raise ResultNotStored(
                    f"the database refused {what}: {type(exc).__name__}: {first_line}"
                ) from exc
            except ResultNotStored as refused:
                outcome.succeeded, outcome.return_value = False, None
                outcome.held_until = outcome.new_kwargs = None  # fail it, do not hold it
                outcome.writes = []  # what the run deferred may be what was refused
                outcome.error = error_record(refused)
            logger.error(
                "worker %s: job %s (%s): the database refused its result (%s: %s); the run "
                "is recorded as failed",
                self.worker_id,
                outcome.job.id,
                outcome.job.task_path,
                type(exc).__name__,
                first_line,
            )
            return self.db.run(write)

    def _drop_lost(self, lost: list[Outcome], of: int) -> None:
        if not lost:
            return
        self.stats.lost += len(lost)
        logger.warning(
            "worker %s: %d of %d results came after their lease ran out and were dropped; "
            "those jobs were taken back and run again (jobs %s)",
            self.worker_id,
            len(lost),
            of,
            ", ".join(str(o.job.id) for o in lost[:10])
            + (f", and {len(lost) - 10} more" if len(lost) > 10 else ""),
        )

    def _record(self, outcome: Outcome) -> None:
        job = outcome.job
        status = outcome.status
        if outcome.held:
            assert outcome.held_until is not None
            self.stats.held += 1  # back in the queue, not an attempt: look again then
            self.post(Requeued(outcome.held_until, held=True))
            return
        if status == JobStatus.QUEUED:
            self.stats.retried += 1
            telemetry.ended(job.task_path, job.queue, "retried")
            if outcome.retry_at is not None:  # look again when it falls due
                self.post(Requeued(outcome.retry_at))
                # The task chose when (a webhook delivery, by its own schedule): its
                # message says what happened and when it runs again.
                logger.warning(
                    "job %s (%s) runs again when it asked: %s",
                    job.id,
                    job.task_path,
                    _last_line(outcome).split(": ", 1)[-1],  # its message, not its class
                )
                return
            logger.warning(
                "job %s (%s) failed attempt %d of %d; will retry: %s",
                job.id,
                job.task_path,
                job.attempts,
                job.max_attempts,
                _last_line(outcome),
            )
            return
        if status == JobStatus.SUCCEEDED:
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1
        telemetry.ended(job.task_path, job.queue, "succeeded" if outcome.succeeded else "failed")
        send_finished(outcome, status)

    # -- jobs that will not start here -------------------------------------------------

    def release(self, ids: list[int]) -> None:
        self.to_release.extend(ids)

    def release_pending(self) -> int:
        """Put back claimed jobs that will not start here; kept for a retry on failure."""
        if not self.to_release:
            return 0
        ids = list(self.to_release)
        released = self.db.run(lambda: leases.release(self.worker_id, ids))
        if released is None:
            return 0
        gone = set(ids)
        self.to_release = [i for i in self.to_release if i not in gone]
        self.stats.released += released
        return int(released)


def _last_line(outcome: Outcome) -> str:
    lines = (outcome.error or {}).get("traceback", "").strip().splitlines()
    return lines[-1] if lines else "unknown error"
