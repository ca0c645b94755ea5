"""django-tasks-db, the database backend of Django's own ``django.tasks``, as a peer.

Its worker (``manage.py db_worker``) runs one job at a time per process and polls every
second (its default ``--interval``) when the queue is empty; it has no wake-ups. A shape of
``processes x threads`` is run as that many worker processes.

Its child steps run with settings of their own (:mod:`.tasks_db_settings`):
``python -m django_outbox.bench.peers.tasks_db setup | enqueue N | enqueue-paced N GAP``.
"""

from __future__ import annotations

import sys
import time

from django_outbox.bench.peers.base import (
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
    printed,
    wait_for,
)

SCHEMA = "outbox_bench_tasks_db"
TABLE = f"{SCHEMA}.django_tasks_database_dbtaskresult"
SETTINGS = "django_outbox.bench.peers.tasks_db_settings"


class TasksDb(Peer):
    name = "django-tasks-db"
    module = "django_tasks_db"
    how = (
        "P x T shape = P*T db_worker processes, one job at a time each; "
        "polls every 1 s when idle (its default), no wake-ups"
    )

    def _children(self) -> Children:
        env = {PG_ENV: pg_conninfo(SCHEMA), "DJANGO_SETTINGS_MODULE": SETTINGS}
        return Children(__name__, env)

    def _worker(self, children: Children, *args: str) -> None:
        children.start(command=[sys.executable, "-m", "django", "db_worker", *args])

    def drain(self, jobs: int, processes: int, threads: int) -> PeerDrain:
        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            wal_before = observer.wal()
            enqueued = children.run("enqueue", str(jobs))
            commits_before = observer.commits()
            own_before = observer.statements
            for _ in range(processes * threads):
                self._worker(children, "--batch")
            clocked = clock_drain(
                lambda: observer.value(f"SELECT count(*) FROM {TABLE} WHERE status = 'SUCCESSFUL'"),
                jobs,
                children,
            )
            children.wait(60)  # --batch: each worker leaves when the queue is empty
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
        done = f"SELECT count(*) FROM {TABLE} WHERE started_at IS NOT NULL"
        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            self._worker(children)
            children.run("enqueue", "1")  # once it has run, the worker is up and idle
            wait_for(lambda: observer.value(done), 1, children, 60)
            observer.execute(f"DELETE FROM {TABLE}")
            children.run("enqueue-paced", str(jobs), str(gap))
            wait_for(lambda: observer.value(done), jobs, children, 60)
            rows = observer.db.execute(
                f"SELECT extract(epoch FROM started_at - enqueued_at) * 1000 FROM {TABLE}"
            ).fetchall()
        return latency_figures(self.name, [float(row[0]) for row in rows])

    def idle(self, workers: int, seconds: float) -> PeerIdle:
        from django_outbox.bench.peers.base import IDLE_SETTLE_SECONDS

        with pg_schema(SCHEMA) as observer, self._children() as children:
            children.run("setup")
            for _ in range(workers):
                self._worker(children)
            time.sleep(IDLE_SETTLE_SECONDS)
            before, own = observer.commits(), observer.statements
            time.sleep(seconds)
            commits = observer.commits() - before - (observer.statements - own)
        return PeerIdle(self.name, workers, seconds, commits / workers / seconds, "transactions")


def _main(step: str, *args: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from django_outbox.bench.peers.jobs import noop

    if step == "setup":
        call_command("migrate", verbosity=0)
    elif step == "enqueue":
        count = int(args[0])
        started = time.perf_counter()
        with transaction.atomic():  # its backend has no bulk enqueue: one INSERT per job
            for _ in range(count):
                noop.enqueue()
        printed({"per_s": count / (time.perf_counter() - started)})
    elif step == "enqueue-paced":
        count, gap = int(args[0]), float(args[1])
        for _ in range(count):
            noop.enqueue()
            time.sleep(gap)
    else:
        raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    _main(*sys.argv[1:])
