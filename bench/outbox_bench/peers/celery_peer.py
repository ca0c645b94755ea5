"""Celery with a Redis broker as a peer.

A shape of ``processes x threads`` is run as that many workers, each with the thread pool
(``-P threads -c T``); workers wait on the broker (BRPOP, a second at a time). Its own side is
:mod:`.celery_app`. Celery stores nothing in PostgreSQL: its cost is counted in Redis
commands.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any

from outbox_bench.peers.base import (
    REDIS_ENV,
    Children,
    Peer,
    PeerDrain,
    PeerIdle,
    PeerLatency,
    clock_drain,
    drained,
    latency_figures,
    redis_url,
    wait_for,
)

APP = "outbox_bench.peers.celery_app"
PREFIX = "outbox_bench_celery:"  # as celery_app.PREFIX, which needs Celery to import
#: Celery workers take a few seconds to start, and exchange hellos when they do.
IDLE_SETTLE_SECONDS = 8.0


class RedisObserver:
    """This process's connection to the broker, counting its own commands."""

    def __init__(self, url: str) -> None:
        import redis

        self.client: Any = redis.Redis.from_url(url)
        self.commands = 0
        self.clean()

    def done(self) -> int:
        self.commands += 1
        return int(self.client.get(f"{PREFIX}done") or 0)

    def processed(self) -> int:
        """Commands the server has processed so far (this call counts itself)."""
        self.commands += 1
        return int(self.client.info("stats")["total_commands_processed"])

    def clean(self) -> None:
        keys = list(self.client.scan_iter(f"{PREFIX}*"))
        if keys:
            self.client.delete(*keys)


class Celery(Peer):
    name = "celery"
    module = "celery"
    how = (
        "P x T shape = P workers with the thread pool (-P threads -c T), Redis broker; "
        "workers block on the broker (BRPOP, 1 s at a time)"
    )

    def missing(self, measure: str = "drain") -> str | None:
        if importlib.util.find_spec(self.module) is None:
            return "not installed (pip install 'django-outbox-tasks[bench-peers]')"
        if redis_url() is None:
            return "no Redis configured (a django-redis cache as OUTBOX['REDIS_ALIAS'])"
        return None

    def _run(self) -> tuple[Children, RedisObserver]:
        url = redis_url()
        assert url is not None
        return Children(APP, {REDIS_ENV: url}), RedisObserver(url)

    def _worker(self, children: Children, number: int, *args: str) -> None:
        command = [sys.executable, "-m", "celery", "-A", APP, "worker", "-P", "threads"]
        command += ["-n", f"outbox_bench{number}@%h", "--loglevel", "WARNING", *args]
        children.start(command=command)

    def drain(self, jobs: int, processes: int, threads: int) -> PeerDrain:
        children, observer = self._run()
        with children:
            try:
                enqueued = children.run("enqueue", str(jobs))
                before, own = observer.processed(), observer.commands
                for number in range(processes):
                    self._worker(children, number, "-c", str(threads))
                clocked = clock_drain(observer.done, jobs, children)
                # Less this process's own reads, and the task's one INCR per job that
                # stands in for the result backend Celery is run without.
                commands = observer.processed() - before - (observer.commands - own) - jobs
            finally:
                children.stop()
                observer.clean()
        return drained(self, jobs, processes, threads, enqueued, clocked,
                       redis_commands=max(0, commands))  # fmt: skip

    def latency(self, jobs: int, gap: float) -> PeerLatency:
        children, observer = self._run()
        with children:
            try:
                self._worker(children, 0)
                children.run("enqueue", "1")  # once it has run, the worker is up and idle
                wait_for(observer.done, 1, children, 60)
                observer.clean()
                children.run("enqueue-paced", str(jobs), str(gap))
                wait_for(observer.done, jobs, children, 60)
                waits = [float(w) for w in observer.client.lrange(f"{PREFIX}pickups", 0, -1)]
            finally:
                children.stop()
                observer.clean()
        return latency_figures(self.name, waits)

    def idle(self, workers: int, seconds: float, settle: float | None = None) -> PeerIdle:
        children, observer = self._run()
        with children:
            try:
                for number in range(workers):
                    self._worker(children, number)
                time.sleep(IDLE_SETTLE_SECONDS if settle is None else settle)
                before, own = observer.processed(), observer.commands
                time.sleep(seconds)
                commands = observer.processed() - before - (observer.commands - own)
            finally:
                children.stop()
                observer.clean()
        return PeerIdle(self.name, workers, seconds, commands / workers / seconds, "Redis commands")
