"""django-tasks-db, the database backend of Django's own ``django.tasks``, as a peer.

Its worker (``manage.py db_worker``) runs one job at a time per process and polls every
second (its default ``--interval``) when the queue is empty; it has no wake-ups. A shape of
``processes x threads`` is run as that many worker processes.

It runs on PostgreSQL and on MariaDB (its claim is the ORM's ``select_for_update(
skip_locked=True)``), so it is the peer on both: in a schema of its own on PostgreSQL, a
database of its own on MariaDB. Its times are read as timestamps and subtracted here, so the
same statements serve both.

Its child steps run with settings of their own (:mod:`.tasks_db_settings`):
``python -m outbox_bench.peers.tasks_db setup | enqueue N | enqueue-paced N GAP``.
"""

from __future__ import annotations

import sys
import time

from outbox_bench.peers.base import Children, printed
from outbox_bench.peers.database import DatabasePeer, ServerObserver

SCHEMA = "outbox_bench_tasks_db"
#: Unqualified: the observer reads its schema (PostgreSQL: first on its search path) or its
#: database (MariaDB: the one it is connected to).
TABLE = "django_tasks_database_dbtaskresult"
SETTINGS = "outbox_bench.peers.tasks_db_settings"


class TasksDb(DatabasePeer):
    name = "django-tasks-db"
    module = "django_tasks_db"
    how = (
        "P x T shape = P*T db_worker processes, one job at a time each; "
        "polls every 1 s when idle (its default), no wake-ups"
    )
    vendors = ("postgresql", "mysql")
    schema = SCHEMA
    steps = __name__
    done_sql = f"SELECT count(*) FROM {TABLE} WHERE status = 'SUCCESSFUL'"
    started_sql = f"SELECT count(*) FROM {TABLE} WHERE started_at IS NOT NULL"
    pickups_sql = f"SELECT enqueued_at, started_at FROM {TABLE} WHERE started_at IS NOT NULL"
    clear_sql = f"DELETE FROM {TABLE}"
    window_sql = f"SELECT min(started_at), max(finished_at) FROM {TABLE}"
    window = "from its first job's started_at to its last one's finished_at (its results table)"

    def window_seconds(self, observer: ServerObserver) -> float:
        ((first, last),) = observer.rows(self.window_sql)
        return float((last - first).total_seconds())

    def pickups_ms(self, observer: ServerObserver) -> list[float]:
        rows = observer.rows(self.pickups_sql)
        return [(started - enqueued).total_seconds() * 1000 for enqueued, started in rows]

    def children(self) -> Children:
        children = super().children()
        children.env["DJANGO_SETTINGS_MODULE"] = SETTINGS
        return children

    def start_workers(self, children: Children, processes: int, threads: int, drain: bool) -> None:
        # One job at a time per process: a thread becomes a process. --batch: leave when
        # the queue is empty.
        command = [sys.executable, "-m", "django", "db_worker", *(["--batch"] if drain else [])]
        for _ in range(processes * threads):
            children.start(command=command)


def _main(step: str, *args: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction

    from outbox_bench.peers.jobs import noop

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
