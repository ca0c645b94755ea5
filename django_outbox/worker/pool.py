"""The thread pool that runs claimed jobs, and what the loop needs to know about it.

Its own threads and a queue, not a ``ThreadPoolExecutor``: the executor makes a Future (with
its Condition) for every job, and for quick jobs that cost the worker's main thread more
than claiming and completing them did.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from itertools import islice

from django.db import connections

from django_outbox.jobs import readahead
from django_outbox.jobs.types import ClaimedJob, Outcome
from django_outbox.lib import text
from django_outbox.worker.executor import execute
from django_outbox.worker.inbox import Inbox

logger = logging.getLogger("django_outbox.worker")


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A run given up on at its timeout, whose thread has not returned yet."""

    job: ClaimedJob
    thread: int
    started: float


class Pool:
    """Runs jobs on ``concurrency`` threads; jobs submitted beyond that wait their turn.

    Outcomes are handed back through the worker's inbox, so the loop that owns the
    database connection writes them in batches.
    """

    def __init__(self, concurrency: int, inbox: Inbox) -> None:
        self.concurrency = concurrency
        self.inbox = inbox
        self._lock = threading.Lock()
        #: Signalled when a job is queued or the pool closes.
        self._work = threading.Condition(self._lock)
        #: Jobs submitted and not handed back: job id -> job.
        self._pending: dict[int, ClaimedJob] = {}
        #: Submitted jobs no thread has taken yet, in claim order.
        self._waiting: deque[ClaimedJob] = deque()
        self._closing = False
        #: Running jobs: job id -> (when its thread started it, that thread's ident).
        self._started: dict[int, tuple[float, int]] = {}
        #: Runs given up on at their timeout, by (job id, attempt): their threads run on,
        #: and whatever they return is dropped (the run was recorded as timed out).
        self._abandoned: dict[tuple[int, int], Abandoned] = {}
        #: Recent runs' average duration, in seconds (None before the first run ends).
        self.average_run_seconds: float | None = None
        #: Started with the first job (a pool that never gets one starts none).
        self._threads: list[threading.Thread] = []

    @property
    def in_flight(self) -> int:
        """Jobs submitted and not yet handed back: waiting or running."""
        return len(self._pending)

    @property
    def stuck(self) -> int:
        """Threads still running jobs that ran over their timeout."""
        return len(self._abandoned)

    @property
    def running(self) -> int:
        return len(self._started)

    def submit_all(self, jobs: list[ClaimedJob]) -> None:
        """Queue a claimed batch: one lock and one wake-up for the lot, not one per job."""
        if not jobs:
            return
        with self._lock:
            if not self._threads:
                # Daemon threads: one stuck in a job that never returns must not keep the
                # process alive once the worker has stopped (its run was recorded already).
                self._threads = [
                    threading.Thread(target=self._serve, name=f"outbox-job-{n}", daemon=True)
                    for n in range(self.concurrency)
                ]
                for thread in self._threads:
                    thread.start()
            for job in jobs:
                self._pending[job.id] = job
            self._waiting.extend(jobs)
            self._work.notify(len(jobs))

    def behind(self, job_id: int, began: float, limit: int) -> list[ClaimedJob]:
        """Up to ``limit`` jobs behind the one ``job_id`` that started at ``began``: those
        other threads started since, then those no thread has taken yet, in order; never
        more than two rounds of the threads (what they will start soon)."""
        limit = min(limit, 2 * self.concurrency)
        with self._lock:
            since = [
                self._pending[other]
                for other, (start, _thread) in self._started.items()
                if start >= began and other != job_id and other in self._pending
            ]
            return (since + list(islice(self._waiting, limit)))[:limit]

    def _serve(self) -> None:
        """One thread: take the next waiting job and run it, until the pool closes."""
        running = (0, 0.0)  # this thread's job, and when it started
        readahead.serve(lambda limit: self.behind(*running, limit))
        try:
            while True:
                with self._lock:
                    while not self._waiting and not self._closing:
                        self._work.wait()
                    if not self._waiting:  # closing, and nothing left to run
                        return
                    job = self._waiting.popleft()
                    began = time.monotonic()
                    running = (job.id, began)
                    self._started[job.id] = (began, threading.get_ident())
                self._run(job, began)
        finally:
            connections.close_all()

    def _run(self, job: ClaimedJob, began: float) -> None:
        outcome = execute(job)
        ran = time.monotonic() - began
        # A moving average of run times (the newest run counts a tenth): how many jobs
        # the worker may claim at once. A race between threads here loses one sample.
        average = self.average_run_seconds
        self.average_run_seconds = ran if average is None else average + (ran - average) / 10
        self.inbox.put_outcome(outcome)

    def accept(self, ready: list[Outcome]) -> list[Outcome]:
        """Take back the runs in ``ready`` (from the inbox): they are no longer in flight.
        Returns them less those given up on at their timeout, whose late result is dropped."""
        if not ready:
            return []
        kept = []
        with self._lock:
            for outcome in ready:
                job = outcome.job
                gone = self._abandoned.pop((job.id, job.attempts), None)
                if gone is not None:
                    # Recorded as timed out long ago; the job may be running again by now.
                    logger.warning(
                        "job %s (%s): the run that timed out returned after %s; "
                        "its result is dropped",
                        job.id,
                        job.task_path,
                        text.duration(time.monotonic() - gone.started),
                    )
                    continue
                self._started.pop(job.id, None)
                self._pending.pop(job.id, None)
                kept.append(outcome)
        return kept

    def overdue(self, now: float) -> list[tuple[ClaimedJob, float]]:
        """Running jobs past their timeout, with how long they have run."""
        with self._lock:
            late = []
            for job_id, (started, _thread) in self._started.items():
                job = self._pending.get(job_id)
                if job is not None and job.timeout is not None and now - started > job.timeout:
                    late.append((job, now - started))
            return late

    def abandon(self, job: ClaimedJob) -> str:
        """Give up on a run over its timeout: it no longer counts as in flight, its thread
        counts as stuck until it returns, and what it returns then is dropped. Returns
        where that thread is now (its stack), for the log."""
        with self._lock:
            self._pending.pop(job.id, None)
            started, thread = self._started.pop(job.id)
            self._abandoned[(job.id, job.attempts)] = Abandoned(job, thread, started)
        frame = sys._current_frames().get(thread)
        return "".join(traceback.format_stack(frame)) if frame is not None else ""

    def cancel_waiting(self) -> list[int]:
        """Withdraw the jobs that have not started; returns their ids."""
        with self._lock:
            cancelled = [job.id for job in self._waiting]
            self._waiting.clear()
            for job_id in cancelled:
                del self._pending[job_id]
        return cancelled

    def join(self, timeout: float) -> list[threading.Thread]:
        """After shutdown(): wait up to ``timeout`` s for the threads that run no job to
        leave (closing their database connections); returns those still running. A thread
        still in a job (one that ran over its timeout, or past the shutdown deadline) is
        not waited for."""
        deadline = time.monotonic() + timeout
        with self._lock:
            busy = {ident for _began, ident in self._started.values()}
            busy |= {abandoned.thread for abandoned in self._abandoned.values()}
        for thread in self._threads:
            if thread.ident not in busy:
                thread.join(max(0.0, deadline - time.monotonic()))
        return [thread for thread in self._threads if thread.is_alive()]

    def shutdown(self) -> None:
        """Let the threads go once the jobs they hold are done; each closes its database
        connections on the way out. Jobs not yet started were withdrawn first
        (cancel_waiting); a thread stuck in a job leaves when (if) the job returns."""
        with self._lock:
            self._closing = True
            self._work.notify_all()
