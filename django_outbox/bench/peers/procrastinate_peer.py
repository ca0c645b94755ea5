"""Procrastinate as a peer: PostgreSQL only, asyncio workers, LISTEN/NOTIFY wake-ups.

A shape of ``processes x threads`` is run as that many worker processes, each with
``concurrency`` = threads. Its own side is :mod:`.procrastinate_app`.
"""

from __future__ import annotations

import time

from django_outbox.bench.peers.base import (
    IDLE_SETTLE_SECONDS,
    PG_ENV,
    Children,
    Peer,
    PeerDrain,
    PeerIdle,
    PeerLatency,
    clock_drain,
    latency_figures,
    pg_conninfo,
    pg_schema,
    wait_for,
)

APP = "django_outbox.bench.peers.procrastinate_app"
SCHEMA = "outbox_bench_procrastinate"
JOBS = f"{SCHEMA}.procrastinate_jobs"
EVENTS = f"{SCHEMA}.procrastinate_events"


class Procrastinate(Peer):
    name = "procrastinate"
    module = "procrastinate"
    how = (
        "P x T shape = P worker processes with concurrency T (asyncio; the sync no-op runs "
        "in a thread); LISTEN/NOTIFY wake-ups, polls every 5 s (its defaults)"
    )

    def _children(self) -> Children:
        return Children(APP, {PG_ENV: pg_conninfo(SCHEMA)})

    def drain(self, jobs: int, processes: int, threads: int) -> PeerDrain:
        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            wal_before = observer.wal()
            enqueued = children.run("enqueue", str(jobs))
            commits_before = observer.commits()
            own_before = observer.statements
            for _ in range(processes):
                children.start("worker", str(threads), "--once")
            clocked = clock_drain(
                lambda: observer.value(f"SELECT count(*) FROM {JOBS} WHERE status = 'succeeded'"),
                jobs,
                children,
            )
            children.wait(60)  # wait=False: each worker leaves once it has caught up
            commits = observer.commits() - commits_before - (observer.statements - own_before)
            wal = observer.wal() - wal_before
        return PeerDrain(
            peer=self.name,
            how=self.how,
            jobs=jobs,
            processes=processes,
            threads=threads,
            enqueue_per_s=enqueued["per_s"],
            seconds=clocked.seconds,
            per_s=clocked.counted / clocked.seconds,
            succeeded=clocked.done,
            transactions_per_job=max(0, commits) / jobs,
            wal_bytes_per_job=wal / jobs,
            redis_commands_per_job=None,
        )

    def latency(self, jobs: int, gap: float) -> PeerLatency:
        started = f"SELECT count(*) FROM {EVENTS} WHERE type = 'started'"
        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            children.start("worker", "1")
            children.run("enqueue", "1")  # once it has run, the worker is up and idle
            wait_for(lambda: observer.value(started), 1, children, 60)
            observer.execute(f"DELETE FROM {JOBS}")  # and their events
            children.run("enqueue-paced", str(jobs), str(gap))
            wait_for(lambda: observer.value(started), jobs, children, 60)
            rows = observer.db.execute(
                f"SELECT extract(epoch FROM s.at - d.at) * 1000 FROM {EVENTS} d "
                f"JOIN {EVENTS} s ON s.job_id = d.job_id AND s.type = 'started' "
                "WHERE d.type = 'deferred'"
            ).fetchall()
        return latency_figures(self.name, [float(row[0]) for row in rows])

    def idle(self, workers: int, seconds: float) -> PeerIdle:
        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            for _ in range(workers):
                children.start("worker", "1")
            time.sleep(IDLE_SETTLE_SECONDS)
            before, own = observer.commits(), observer.statements
            time.sleep(seconds)
            commits = observer.commits() - before - (observer.statements - own)
        return PeerIdle(self.name, workers, seconds, commits / workers / seconds, "transactions")
