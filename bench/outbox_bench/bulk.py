"""Bulk writes against the plain insert of the same rows.

Each round, interleaved, in one transaction each:

- the plain insert: rows of every column of a job, by the leanest statement the database
  has (``COPY`` on PostgreSQL, multi-row ``INSERT`` of 1,000 rows elsewhere);
- ``enqueue_many`` of N no-op jobs, 5,000 a call;
- a workflow group of N no-op steps (``workflows.group(...).enqueue()``), which writes a
  step row beside each job;
- webhook sends: N / E messages, each to E endpoints, so N delivery jobs (each send also
  writes its message and its deliveries).

Rates are jobs per second; each writer's is a median over the rounds, and so is its
ratio to the plain insert of the same round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction

import django_outbox
from django_outbox import webhooks, workflows
from django_outbox.models import Delivery, Job, Message, Workflow, WorkflowEdge, WorkflowStep
from django_outbox.webhooks.api import DELIVER_TASK
from outbox_bench import webhooks as hooks
from outbox_bench.depth import ENQUEUE_CHUNK, plain_insert_rate

#: The name of the benchmark's workflows: its clean-up deletes those only.
BENCH_WORKFLOW = "outbox-bench-group"

#: The writers measured beside the plain insert, in the order they run in a round.
WRITERS = ("enqueue_many", "group", "webhooks")


@dataclass(frozen=True, slots=True)
class BulkWrite:
    writer: str
    jobs: int
    per_s: float
    #: Median over the rounds of this writer's rate / the plain insert's in the same round.
    of_plain: float
    plain_per_s: float
    #: "COPY" or "multi-row INSERT".
    plain_insert: str


def run(jobs: int, rounds: int, endpoints: int, queue: str = "default") -> list[BulkWrite]:
    if jobs % endpoints:
        raise ValueError(f"--jobs ({jobs}) must be a multiple of --endpoints ({endpoints})")
    rates: dict[str, list[float]] = {name: [] for name in ("plain", *WRITERS)}
    ratios: dict[str, list[float]] = {name: [] for name in WRITERS}
    with hooks.bench_settings():
        hooks.clean()
        hooks.endpoints("http://127.0.0.1:9/hook", endpoints)
        try:
            for _ in range(rounds):
                plain = plain_insert_rate(jobs, queue)
                rates["plain"].append(plain)
                for name, write in _writers(jobs, endpoints, queue).items():
                    rate = _timed(jobs, write)
                    rates[name].append(rate)
                    ratios[name].append(rate / plain)
        finally:
            _forget()
            hooks.clean()
    plain_insert = "COPY" if connection.vendor == "postgresql" else "multi-row INSERT"
    return [
        BulkWrite(
            writer=name,
            jobs=jobs,
            per_s=statistics.median(rates[name]),
            of_plain=statistics.median(ratios[name]),
            plain_per_s=statistics.median(rates["plain"]),
            plain_insert=plain_insert,
        )
        for name in WRITERS
    ]


def _writers(jobs: int, endpoints: int, queue: str) -> dict[str, Callable[[], None]]:
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)

    def enqueue_many() -> None:
        for first in range(0, jobs, ENQUEUE_CHUNK):
            django_outbox.enqueue_many(task, [((), {})] * min(ENQUEUE_CHUNK, jobs - first))

    def group() -> None:
        workflows.group(*[workflows.step(task) for _ in range(jobs)]).enqueue(BENCH_WORKFLOW)

    def send() -> None:
        for number in range(jobs // endpoints):
            webhooks.send("bench.event", {"n": number}, tenant=hooks.BENCH_TENANT)

    return {"enqueue_many": enqueue_many, "group": group, "webhooks": send}


def _timed(jobs: int, write: Callable[[], None]) -> float:
    """``write`` in one transaction, on an empty job table; jobs/s."""
    _forget()
    started = time.perf_counter()
    with transaction.atomic():
        write()
    rate = jobs / (time.perf_counter() - started)
    _forget()
    return rate


def _forget() -> None:
    """Delete what the writers wrote: the no-op jobs, the benchmark's workflows with their
    steps and edges, the bench tenant's messages with their deliveries and delivery jobs
    (the endpoints stay). In SQL: the ORM's cascade would read every row first."""
    from outbox_bench.tasks import noop

    quote = connection.ops.quote_name
    job, message = quote(Job._meta.db_table), quote(Message._meta.db_table)
    workflow, delivery = quote(Workflow._meta.db_table), quote(Delivery._meta.db_table)
    ours = f"SELECT id FROM {workflow} WHERE name = %s"
    theirs = f"SELECT id FROM {message} WHERE tenant = %s"
    with connection.cursor() as cursor:
        for model in (WorkflowEdge, WorkflowStep):
            table = quote(model._meta.db_table)
            cursor.execute(f"DELETE FROM {table} WHERE workflow_id IN ({ours})", [BENCH_WORKFLOW])
        cursor.execute(f"DELETE FROM {workflow} WHERE name = %s", [BENCH_WORKFLOW])
        cursor.execute(
            f"DELETE FROM {delivery} WHERE message_id IN ({theirs})", [hooks.BENCH_TENANT]
        )
        cursor.execute(f"DELETE FROM {message} WHERE tenant = %s", [hooks.BENCH_TENANT])
        cursor.execute(
            f"DELETE FROM {job} WHERE task_path IN (%s, %s)", [noop.module_path, DELIVER_TASK]
        )
        if connection.vendor == "postgresql":
            tables = [job, workflow, delivery, message]
            tables += [quote(m._meta.db_table) for m in (WorkflowEdge, WorkflowStep)]
            cursor.execute(f"VACUUM ANALYZE {', '.join(tables)}")
