"""The thread pool that runs claimed jobs, and what the loop needs to know about it."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections

from django_outbox.jobs.claim import ClaimedJob
from django_outbox.jobs.complete import Outcome
from django_outbox.worker.executor import execute


class Pool:
    """Runs jobs on ``concurrency`` threads; jobs submitted beyond that wait their turn.

    Outcomes are handed back through a queue, so the loop that owns the database
    connection writes them in batches.
    """

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="outbox-job")
        self._outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[ClaimedJob, Future[None]]] = {}
        self._started: dict[int, float] = {}
        # Timed-out jobs whose threads run on: job id -> the JobTimeout error to record
        # once the thread returns (until then the job stays leased, so it never runs twice
        # at the same time).
        self._overdue: dict[int, dict[str, str]] = {}

    @property
    def in_flight(self) -> int:
        """Jobs submitted and not yet handed back: waiting or running."""
        return len(self._pending)

    @property
    def stuck(self) -> int:
        """Threads still running jobs that ran over their timeout."""
        return len(self._overdue)

    @property
    def running(self) -> int:
        return len(self._started)

    def submit(self, job: ClaimedJob) -> None:
        with self._lock:
            self._pending[job.id] = (job, self._executor.submit(self._run, job))

    def _run(self, job: ClaimedJob) -> None:
        with self._lock:
            self._started[job.id] = time.monotonic()
        self._outcomes.put(execute(job))

    def outcomes(self, timeout: float) -> list[Outcome]:
        """Outcomes ready now; waits up to ``timeout`` seconds for the first one."""
        try:
            first = (
                self._outcomes.get(timeout=timeout) if timeout > 0 else self._outcomes.get_nowait()
            )
        except queue.Empty:
            return []
        ready = [first]
        while True:
            try:
                ready.append(self._outcomes.get_nowait())
            except queue.Empty:
                break
        kept = []
        with self._lock:
            for outcome in ready:
                job_id = outcome.job.id
                self._started.pop(job_id, None)
                self._pending.pop(job_id, None)
                timeout_error = self._overdue.pop(job_id, None)
                if timeout_error is not None:  # whatever it returned, it ran too long
                    outcome = Outcome(outcome.job, succeeded=False, error=timeout_error)
                kept.append(outcome)
        return kept

    def overdue(self, now: float) -> list[tuple[ClaimedJob, float]]:
        """Running jobs past their timeout, with how long they have run."""
        with self._lock:
            late = []
            for job_id, started in self._started.items():
                job = self._pending[job_id][0] if job_id in self._pending else None
                if job is not None and job.timeout is not None and now - started > job.timeout:
                    late.append((job, now - started))
            return late

    def time_out(self, job_id: int, error: dict[str, str]) -> None:
        """Mark a running job as over its timeout: when its thread returns, the run is
        recorded as failed with ``error``. It no longer counts as in flight."""
        with self._lock:
            self._pending.pop(job_id, None)
            self._started.pop(job_id, None)
            self._overdue[job_id] = error

    def cancel_waiting(self) -> list[int]:
        """Withdraw the jobs that have not started; returns their ids."""
        cancelled = []
        with self._lock:
            for job_id, (_job, future) in list(self._pending.items()):
                if future.cancel():
                    cancelled.append(job_id)
                    del self._pending[job_id]
        return cancelled

    def shutdown(self) -> None:
        """Let the threads go; each closes its database connections on the way out.

        Jobs not yet started were withdrawn first (cancel_waiting), so what is left in the
        executor's queue is one closing task per thread; the barrier spreads them one per
        thread (a stuck thread never arrives: the others give up waiting after 0.2 s).
        """
        barrier = threading.Barrier(self.concurrency, timeout=0.2)

        def close_connections() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            connections.close_all()

        for _ in range(self.concurrency):
            self._executor.submit(close_connections)
        self._executor.shutdown(wait=False)
