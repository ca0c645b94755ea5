"""Procrastinate as a peer: PostgreSQL only, asyncio workers, LISTEN/NOTIFY wake-ups.

A shape of ``processes x threads`` is run as that many worker processes, each with
``concurrency`` = threads. Its own side is :mod:`.procrastinate_app`.
"""

from __future__ import annotations

from outbox_bench.peers.base import Children
from outbox_bench.peers.database import DatabasePeer

SCHEMA = "outbox_bench_procrastinate"
JOBS = f"{SCHEMA}.procrastinate_jobs"
EVENTS = f"{SCHEMA}.procrastinate_events"


class Procrastinate(DatabasePeer):
    name = "procrastinate"
    module = "procrastinate"
    how = (
        "P x T shape = P worker processes with concurrency T (asyncio; the sync no-op runs "
        "in a thread); LISTEN/NOTIFY wake-ups, polls every 5 s (its defaults)"
    )
    schema = SCHEMA
    steps = "outbox_bench.peers.procrastinate_app"
    done_sql = f"SELECT count(*) FROM {JOBS} WHERE status = 'succeeded'"
    started_sql = f"SELECT count(*) FROM {EVENTS} WHERE type = 'started'"
    pickups_sql = (
        f"SELECT extract(epoch FROM s.at - d.at) * 1000 FROM {EVENTS} d "
        f"JOIN {EVENTS} s ON s.job_id = d.job_id AND s.type = 'started' "
        "WHERE d.type = 'deferred'"
    )
    clear_sql = f"DELETE FROM {JOBS}"  # and their events
    window_sql = (
        "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
        f"- min(at) FILTER (WHERE type = 'started')) FROM {EVENTS}"
    )
    window = "from its first 'started' event to its last 'succeeded' one (its events table)"

    def start_workers(self, children: Children, processes: int, threads: int, drain: bool) -> None:
        # --once: wait=False, leave once caught up with the queue.
        for _ in range(processes):
            children.start("worker", str(threads), *(["--once"] if drain else []))
