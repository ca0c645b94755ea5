"""PgQueuer as a peer: PostgreSQL only, asyncio workers, LISTEN/NOTIFY wake-ups.

A shape of ``processes x threads`` is run as that many worker processes, each running
``threads`` queue managers at once on connections of their own (PgQueuer's own benchmark
runs its consumers so), with its default dequeue batch of 10. A finished job leaves its
queue table for its log table, which records each job's enqueue, pick and success: the
drain is timed from the first pick to the last success, pickup latency from a job's
enqueue to its pick. Its own side is :mod:`.pgqueuer_app`.
"""

from __future__ import annotations

import importlib.util

from outbox_bench.peers.base import Children
from outbox_bench.peers.database import DatabasePeer

SCHEMA = "outbox_bench_pgqueuer"
LOG = f"{SCHEMA}.pgqueuer_log"


class PgQueuerPeer(DatabasePeer):
    name = "pgqueuer"
    module = "pgqueuer"
    how = (
        "P x T shape = P worker processes running T queue managers each (asyncio, asyncpg, "
        "uvloop), each on its own connection, dequeue batches of 10; LISTEN/NOTIFY "
        "wake-ups (its defaults)"
    )
    schema = SCHEMA
    steps = "outbox_bench.peers.pgqueuer_app"
    done_sql = f"SELECT count(*) FROM {LOG} WHERE status = 'successful'"
    started_sql = f"SELECT count(*) FROM {LOG} WHERE status = 'picked'"
    pickups_sql = (
        f"SELECT extract(epoch FROM p.created - q.created) * 1000 FROM {LOG} q "
        f"JOIN {LOG} p ON p.job_id = q.job_id AND p.status = 'picked' "
        "WHERE q.status = 'queued'"
    )
    clear_sql = f"DELETE FROM {LOG}"  # finished jobs have left the queue table already
    window_sql = (
        "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful') "
        f"- min(created) FILTER (WHERE status = 'picked')) FROM {LOG}"
    )
    window = "from its first 'picked' log entry to its last 'successful' one (its log table)"

    def missing(self, measure: str = "drain") -> str | None:
        if importlib.util.find_spec("asyncpg") is None:  # its driver here, an extra of its
            return "not installed (pip install 'django-outbox-tasks[bench-peers]')"
        return super().missing(measure)

    def start_workers(self, children: Children, processes: int, threads: int, drain: bool) -> None:
        # --drain: leave once the queue is empty (PgQueuer's drain mode).
        for _ in range(processes):
            children.start("worker", str(threads), *(["--drain"] if drain else []))
