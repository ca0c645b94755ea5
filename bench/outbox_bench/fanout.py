"""The fan-out sweep at constant volume: what one call costs as it spreads wider.

- Webhooks: one ``send()`` to E matching endpoints (``webhooks.fan_out``).
- Jobs: one transaction enqueueing N jobs spread over K queues (one ``enqueue_many`` per
  queue), for K = 1, 10, 100.

Both report statements and, on PostgreSQL, WAL bytes per call: the cost should follow the
rows written, never rows times fan-out. Each ``enqueue_many`` in a transaction costs three
statements (a savepoint, its INSERT, the savepoint's release), so statements grow with K
while WAL per job stays flat.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

import django_outbox
from django_outbox.models import Job
from outbox_bench import pgstats
from outbox_bench.tasks import noop


@dataclass(frozen=True, slots=True)
class QueueSpread:
    queues: int
    jobs: int
    statements_per_call: float
    wal_bytes_per_call: float | None
    wal_bytes_per_job: float | None


def jobs_over_queues(spreads: list[int], jobs: int = 1000, calls: int = 5) -> list[QueueSpread]:
    """``calls`` transactions of ``jobs`` no-op jobs spread over K queues, for each K."""
    tasks = dict(settings.TASKS)
    alias = noop.backend
    # Any queue name, for the length of the sweep (the configured list may be short).
    tasks[alias] = {**tasks[alias], "QUEUES": []}
    rows = []
    theirs = Job.objects.filter(task_path=noop.module_path)
    with override_settings(TASKS=tasks):
        for spread in spreads:
            theirs.delete()
            per_queue = [jobs // spread + (1 if i < jobs % spread else 0) for i in range(spread)]
            wal_before = pgstats.wal_position()
            with CaptureQueriesContext(connection) as queries:
                for _ in range(calls):
                    with transaction.atomic():
                        for number, count in enumerate(per_queue):
                            task = noop.using(queue_name=f"outbox-bench-{number}")
                            django_outbox.enqueue_many(task, [((), {})] * count)
            wal_after = pgstats.wal_position()
            statements = sum("pg_notify" not in q["sql"] for q in queries) / calls
            wal = None if wal_before is None or wal_after is None else wal_after - wal_before
            rows.append(
                QueueSpread(
                    queues=spread,
                    jobs=jobs,
                    statements_per_call=statements,
                    wal_bytes_per_call=None if wal is None else wal / calls,
                    wal_bytes_per_job=None if wal is None else wal / (calls * jobs),
                )
            )
        theirs.delete()
    return rows
