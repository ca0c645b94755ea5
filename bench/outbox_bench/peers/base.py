"""What every peer shares: its figures, its processes, and how its drain is clocked.

A peer's own code runs in child processes (``python -m outbox_bench.peers.<peer>
<step> …``), told where the database and Redis are through the environment; this process
only starts them and watches the servers, with connections of its own whose statements it
counts and leaves out of the peer's figures. The peers that keep their jobs in the
database, and those connections, are in ``peers.database``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from django.db import connection

#: Environment of a peer's child processes: the PostgreSQL connection string (with the
#: peer's schema first on its search_path) and the Redis URL.
PG_ENV = "OUTBOX_BENCH_PEER_PG"
REDIS_ENV = "OUTBOX_BENCH_PEER_REDIS"

#: The databases a peer may keep its jobs in, as its messages name them.
VENDOR_NAMES = {"postgresql": "PostgreSQL", "mysql": "MariaDB"}

#: How often the observer counts finished jobs while a peer drains.
POLL_SECONDS = 0.05
#: PostgreSQL publishes a busy backend's counters about once a second and an idle one's up
#: to 10 s late: idle peers settle past that before their window opens.
IDLE_SETTLE_SECONDS = 11.0


@dataclass(frozen=True, slots=True)
class PeerDrain:
    peer: str
    #: What the peer runs a ``processes x threads`` shape with, and how idle workers wake.
    how: str
    jobs: int
    processes: int
    threads: int
    enqueue_per_s: float
    #: From the first job done to the last, so each peer's start-up is left out.
    seconds: float
    per_s: float
    succeeded: int
    #: Peers on PostgreSQL: transactions committed during the drain, and WAL written from
    #: the enqueue to the end of the drain, per job (None on MariaDB, which counts both for
    #: the whole server only).
    transactions_per_job: float | None
    wal_bytes_per_job: float | None
    #: Redis peers: commands the server processed during the drain, per job.
    redis_commands_per_job: float | None
    #: How ``seconds`` was measured.
    timed: str = "from its first job done to its last, polled every 50 ms"


@dataclass(frozen=True, slots=True)
class PeerLatency:
    peer: str
    jobs: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class PeerIdle:
    peer: str
    workers: int
    seconds: float
    #: Transactions (PostgreSQL peers) or commands (Redis peers) per second per idle worker.
    per_worker_s: float
    unit: str


class PeerError(RuntimeError):
    """A peer's process failed, or its jobs did not finish in time."""


class Peer:
    """One job queue to compare with. Subclasses say how to set it up, fill it and run it."""

    name = ""
    #: Its import name, to tell whether the bench-peers extra is installed.
    module = ""
    #: What a ``processes x threads`` shape becomes for this peer, and how it wakes.
    how = ""
    #: The databases (Django's vendors) it runs on here.
    vendors: tuple[str, ...] = ("postgresql",)

    def missing(self, measure: str = "drain") -> str | None:
        """Why this peer cannot run here, or cannot be measured for ``measure`` ("drain",
        "latency" or "idle"), or None."""
        if importlib.util.find_spec(self.module) is None:
            return "not installed (pip install 'django-outbox-tasks[bench-peers]')"
        if connection.vendor not in self.vendors:
            names = " or ".join(VENDOR_NAMES[vendor] for vendor in self.vendors)
            return f"runs on {names} here, not {connection.vendor}"
        return None

    def drain(self, jobs: int, processes: int, threads: int) -> PeerDrain:
        raise NotImplementedError

    def latency(self, jobs: int, gap: float) -> PeerLatency:
        raise NotImplementedError

    def idle(self, workers: int, seconds: float, settle: float | None = None) -> PeerIdle:
        """``settle``: seconds the workers idle before the window opens (None: the
        peer's own need)."""
        raise NotImplementedError


def drained(
    peer: Peer,
    jobs: int,
    processes: int,
    threads: int,
    enqueued: dict[str, Any],
    clocked: Clocked,
    *,
    transactions: float | None = None,
    wal: float | None = None,
    redis_commands: float | None = None,
    timed: str | None = None,
) -> PeerDrain:
    """A peer's drain figures, the totals made per job; ``timed``: how its seconds were
    measured, when not polled."""

    def per_job(total: float | None) -> float | None:
        return None if total is None else total / jobs

    return PeerDrain(
        peer=peer.name,
        how=peer.how,
        jobs=jobs,
        processes=processes,
        threads=threads,
        enqueue_per_s=enqueued["per_s"],
        seconds=clocked.seconds,
        per_s=clocked.counted / clocked.seconds,
        succeeded=clocked.done,
        transactions_per_job=per_job(transactions),
        wal_bytes_per_job=per_job(wal),
        redis_commands_per_job=per_job(redis_commands),
        **({} if timed is None else {"timed": timed}),
    )


def redis_url() -> str | None:
    """The URL of the Redis that django_outbox is configured with, if any."""
    alias = getattr(settings, "OUTBOX", {}).get("REDIS_ALIAS", "default")
    cache = settings.CACHES.get(alias, {})
    if not cache.get("BACKEND", "").startswith("django_redis"):
        return None
    location = cache.get("LOCATION")
    return location[0] if isinstance(location, list | tuple) else location


class Children:
    """A peer's child processes, each logging to a file of its own, stopped on exit."""

    def __init__(self, module: str, env: dict[str, str]) -> None:
        self.module = module
        self.env = {**os.environ, **env}
        self.processes: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []

    def start(self, *args: str, command: Sequence[str] | None = None) -> subprocess.Popen[bytes]:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        argv = [sys.executable, "-m", self.module, *args] if command is None else list(command)
        process = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.processes.append((process, log))
        return process

    def run(self, *args: str, timeout: float = 600) -> dict[str, Any]:
        """Run one step to its end; it prints its figures as a JSON line last."""
        process = self.start(*args)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise PeerError(f"{self.module} {' '.join(args)} took over {timeout:.0f} s") from None
        output = self.output(process)
        if process.returncode != 0:
            raise PeerError(f"{self.module} {' '.join(args)} failed:\n{output[-3000:]}")
        lines = [line for line in output.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}

    def output(self, process: subprocess.Popen[bytes]) -> str:
        for candidate, log in self.processes:
            if candidate is process:
                log.seek(0)
                return log.read().decode(errors="replace")
        return ""

    def failed(self) -> str | None:
        """The output of a child that exited with an error, if any did."""
        for process, _ in self.processes:
            if process.poll() not in (None, 0):
                return self.output(process)[-3000:]
        return None

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process, _ in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise PeerError(f"{self.module} workers did not exit in {timeout:.0f} s") from None

    def stop(self) -> None:
        for process, _ in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, log in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()
        self.processes.clear()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True, slots=True)
class Clocked:
    seconds: float
    #: Jobs finished between the first done and the last (the ones the rate is of).
    counted: int
    done: int


def clock_drain(done: Callable[[], int], jobs: int, children: Children) -> Clocked:
    """Watch ``done()`` until it reaches ``jobs``: time from the first job done to the last.

    Every peer's start-up (interpreter, imports, connections, a random start delay) is left
    out alike; the jobs already done at the first look are not counted in the rate.
    """
    timeout = 120 + jobs / 20  # far slower than any peer: a stuck run, not a slow one
    first: list[tuple[float, int]] = []

    def seen(count: int) -> None:
        if count and not first:
            first.append((time.perf_counter(), count))

    count = wait_for(done, jobs, children, timeout, seen)
    now = time.perf_counter()
    started, before = first[0]
    if jobs - before < max(1, jobs // 10):
        raise PeerError(
            f"{children.module}: {before:,} of {jobs:,} jobs were done at the first look, "
            "too many to time the rest: drain more jobs (--peer-jobs)"
        )
    return Clocked(seconds=max(now - started, 1e-6), counted=jobs - before, done=count)


def wait_for(
    done: Callable[[], int],
    target: int,
    children: Children,
    timeout: float,
    seen: Callable[[int], None] | None = None,
) -> int:
    """Look at ``done()`` every POLL_SECONDS until it reaches ``target``; returns the last
    count. A child that fails, or ``timeout`` seconds, end the wait with PeerError."""
    deadline = time.monotonic() + timeout
    while True:
        count = done()
        if seen is not None:
            seen(count)
        if count >= target:
            return count
        failure = children.failed()
        if failure is not None:
            raise PeerError(f"a {children.module} worker failed:\n{failure}")
        if time.monotonic() > deadline:
            raise PeerError(f"{children.module}: {count:,} of {target:,} done in {timeout:.0f} s")
        time.sleep(POLL_SECONDS)


def percentiles(waits: list[float]) -> tuple[float, float, float, float]:
    """p50, p95, p99 and the longest of ``waits`` (at least two)."""
    ordered = sorted(waits)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return cuts[49], cuts[94], cuts[98], ordered[-1]


def latency_figures(peer: str, waits: list[float]) -> PeerLatency:
    if len(waits) < 2:
        raise PeerError(f"{peer}: {len(waits)} pickups recorded, too few to rank")
    return PeerLatency(peer, len(waits), *percentiles(waits))


def printed(figures: dict[str, Any]) -> None:
    """A child step's figures, as the JSON line ``Children.run`` reads."""
    print(json.dumps(figures), flush=True)
