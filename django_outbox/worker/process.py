"""Running workers as processes: one in this process, or N under a supervisor."""

from __future__ import annotations

import gc
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_outbox.worker.loop import Worker
from django_outbox.worker.reload import RESTART_STATUS, Watcher, reloader_pid
from django_outbox.worker.shutdown import graceful_signals
from django_outbox.worker.supervisor import CANNOT_CLAIM_STATUS, REPLACE_STATUS, Supervisor

logger = logging.getLogger("django_outbox.worker")


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    queues: list[str]
    concurrency: int = 4
    batch_size: int | None = None
    burst: bool = False
    shutdown_timeout: float = 30.0
    backend: str = "default"

    def build(self, parent_pid: int | None = None) -> Worker:
        return Worker(
            queues=self.queues,
            concurrency=self.concurrency,
            batch_size=self.batch_size,
            burst=self.burst,
            shutdown_timeout=self.shutdown_timeout,
            parent_pid=parent_pid,
            backend=self.backend,
        )


def run_here(
    options: WorkerOptions,
    report: Any = None,
    parent_pid: int | None = None,
    watch: bool = False,
) -> int:
    """Run one worker in this process until it stops; returns the exit status.

    ``report``, when given, receives the worker's statistics (a dict) when it stops.
    ``watch``: under ``runworker --reload`` (worker/reload.py), a change to the code drains
    the worker, and the status is RESTART_STATUS.
    """
    worker = options.build(parent_pid)
    watcher = None
    if watch:
        watcher = Watcher(lambda path: worker.request_stop(f"{path} changed; restarting"))
        watcher.start()
    # What start-up built (Django's apps, models, URLs, the task registry) lives as long as
    # the process: out of the collector's reach, a full collection looks at what the jobs
    # allocate, not at every object of the project again (tens of ms each time).
    # Given back when the worker stops, for a process that goes on (a test's call_command).
    gc.collect()
    gc.freeze()
    try:
        with graceful_signals(worker.request_stop):
            stats = worker.run()
    finally:
        gc.unfreeze()
        if watcher is not None:
            watcher.stop()
    restart = watcher is not None and watcher.changed is not None
    if report is not None:
        report.put(stats.as_dict())
    if worker.replace_me and not worker.pool.in_flight and not worker.unwritten:
        # A thread stuck in a timed-out job, and everything else drained: end the process
        # (and the thread with it) so the supervisor starts a fresh one.
        logging.shutdown()
        os._exit(REPLACE_STATUS)
    if worker.abandoned or worker.unwritten:
        # Threads still running jobs would keep the interpreter alive; their jobs stay
        # leased until the lease runs out, then run again elsewhere (a timed-out job's
        # thread is simply ended: its run was recorded already).
        logging.shutdown()
        os._exit(RESTART_STATUS if restart else 1)
    if worker.cannot_claim:
        return CANNOT_CLAIM_STATUS
    return RESTART_STATUS if restart else 0


def start_in_thread(worker: Worker) -> threading.Thread:
    """Run ``worker`` on a new thread of this process (benchmarks and tests); the thread
    closes its database connections when the worker stops."""

    def run() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=f"outbox-worker-{worker.id}", daemon=True)
    thread.start()
    return thread


def _child(options: WorkerOptions, report: Any, parent_pid: int) -> None:
    raise SystemExit(run_here(options, report, parent_pid))


def run(options: WorkerOptions, processes: int = 1, report: Any = None, watch: bool = False) -> int:
    """Run the workers until they stop. ``watch``: this is the child of ``runworker
    --reload``'s reloader, which it watches as a supervisor's child watches its parent."""
    if watch:
        return run_here(options, report, parent_pid=reloader_pid(), watch=True)
    if processes == 1:
        return run_here(options, report)
    supervisor = Supervisor(processes, _child, (options, report), burst=options.burst)
    return supervisor.run()
