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
ratio to the plain insert of the same round. Two plain inserts: of the job rows alone (the
issue's yardstick), and of every row the writer writes (``same_work``): for a group its
workflow row, job rows and step rows; for the sends their message, delivery and job rows,
each row as the writer stores it (arguments, dedup keys and all), ids read back between
the tables untimed. That one is the lean plain-SQL version of the same work. Every
plain insert's commit is timed, as the writers' are: on PostgreSQL a delivery's foreign
keys to its message and endpoint are checked there (Django makes them deferred).
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
from django_outbox.webhooks.fanout import DEDUP_PREFIX, DELIVER_TASK
from outbox_bench import webhooks as hooks
from outbox_bench.depth import (
    ENQUEUE_CHUNK,
    plain_columns,
    plain_insert,
    plain_insert_rate,
    stored_rows,
)

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
    #: The plain insert of every row this writer writes (see the module's docstring).
    same_work_per_s: float
    #: Median over the rounds of this writer's rate / that plain insert's.
    of_same_work: float


def run(jobs: int, rounds: int, endpoints: int, queue: str = "default") -> list[BulkWrite]:
    if jobs % endpoints:
        raise ValueError(f"--jobs ({jobs}) must be a multiple of --endpoints ({endpoints})")
    rates: dict[str, list[float]] = {name: [] for name in ("plain", *WRITERS)}
    ratios: dict[str, list[float]] = {name: [] for name in WRITERS}
    same_rates: dict[str, list[float]] = {name: [] for name in WRITERS}
    same_ratios: dict[str, list[float]] = {name: [] for name in WRITERS}
    with hooks.bench_settings():
        hooks.clean()
        hooks.endpoints("http://127.0.0.1:9/hook", endpoints)
        try:
            for _ in range(rounds):
                plain = plain_insert_rate(jobs, queue)
                rates["plain"].append(plain)
                for name, write in _writers(jobs, endpoints, queue).items():
                    same = plain if name == "enqueue_many" else _same_work(name, jobs, queue)
                    rate = _timed(jobs, write)
                    rates[name].append(rate)
                    ratios[name].append(rate / plain)
                    same_rates[name].append(same)
                    same_ratios[name].append(rate / same)
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
            same_work_per_s=statistics.median(same_rates[name]),
            of_same_work=statistics.median(same_ratios[name]),
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


def _same_work(writer: str, jobs: int, queue: str) -> float:
    """The plain insert of every row ``writer`` writes for ``jobs`` jobs, in one
    transaction on empty tables; jobs/s. The rows are the writer's own, read back from one
    small write of it: a group of one step, or one send to every bench endpoint."""
    from outbox_bench.tasks import noop

    task = noop.using(queue_name=queue)
    _forget()
    with transaction.atomic():
        if writer == "group":
            workflows.group(workflows.step(task)).enqueue(BENCH_WORKFLOW)
        else:
            webhooks.send("bench.event", {"n": 0}, tenant=hooks.BENCH_TENANT)
    plain = _group_rows if writer == "group" else _send_rows
    seconds = plain(jobs)
    _forget()
    return jobs / seconds


def _group_rows(jobs: int) -> float:
    """A group's rows, by plain inserts: its workflow row, the job rows, the step rows."""
    workflow_columns = plain_columns(Workflow)
    (workflow,) = stored_rows(Workflow, workflow_columns, "name = %s", [BENCH_WORKFLOW])
    job_columns = plain_columns(Job)
    (job,) = stored_rows(Job, job_columns, "task_path = %s", [_noop_path()])
    step_columns = plain_columns(WorkflowStep)
    (step,) = stored_rows(WorkflowStep, step_columns, "1 = 1", [])
    _forget()
    for name in ("steps_total", "steps_left"):
        workflow[workflow_columns.index(name)] = jobs
    with transaction.atomic():
        seconds = plain_insert(Workflow, workflow_columns, [workflow])
        workflow_id = Workflow.objects.get(name=BENCH_WORKFLOW).pk
        job[job_columns.index("workflow_id")] = workflow_id
        seconds += plain_insert(Job, job_columns, [job] * jobs)
        ids = (
            Job.objects.filter(workflow_id=workflow_id).order_by("pk").values_list("pk", flat=True)
        )
        at = {name: step_columns.index(name) for name in ("job_id", "workflow_id", "position")}
        steps = []
        for position, job_id in enumerate(ids):
            row = list(step)
            row[at["job_id"]], row[at["workflow_id"]], row[at["position"]] = (
                job_id,
                workflow_id,
                position,
            )
            steps.append(row)
        seconds += plain_insert(WorkflowStep, step_columns, steps)
        committing = time.perf_counter()
    return seconds + time.perf_counter() - committing


def _send_rows(jobs: int) -> float:
    """Sends' rows, by plain inserts: the messages, each one's delivery to every bench
    endpoint, a delivery job for each (its arguments and dedup key name its delivery)."""
    tenant = [hooks.BENCH_TENANT]
    message_columns = plain_columns(Message)
    (message,) = stored_rows(Message, message_columns, "tenant = %s", tenant)
    delivery_columns = plain_columns(Delivery)
    deliveries = stored_rows(Delivery, delivery_columns, "1 = 1", [])
    job_columns = plain_columns(Job)
    job = stored_rows(Job, job_columns, "task_path = %s", [DELIVER_TASK])[0]
    _forget()
    uid = message_columns.index("uid")
    messages = []
    for number in range(jobs // len(deliveries)):
        row = list(message)
        row[uid] = f"{row[uid][:40]}-{number}"
        messages.append(row)
    with transaction.atomic():
        seconds = plain_insert(Message, message_columns, messages)
        message_ids = Message.objects.filter(tenant=hooks.BENCH_TENANT).order_by("pk")
        to = delivery_columns.index("message_id")
        rows = []
        for message_id in message_ids.values_list("pk", flat=True):
            for delivery in deliveries:
                row = list(delivery)
                row[to] = message_id
                rows.append(row)
        seconds += plain_insert(Delivery, delivery_columns, rows)
        delivery_ids = (
            Delivery.objects.filter(message__tenant=hooks.BENCH_TENANT)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        args, dedup = job_columns.index("args"), job_columns.index("dedup_key")
        rows = []
        for delivery_id in delivery_ids:
            row = list(job)
            row[args], row[dedup] = f"[{delivery_id}]", f"{DEDUP_PREFIX}{delivery_id}"
            rows.append(row)
        seconds += plain_insert(Job, job_columns, rows)
        committing = time.perf_counter()
    # The commit is timed as a writer's is: on PostgreSQL the deliveries' foreign keys
    # (deferred, as Django makes them) are checked there.
    return seconds + time.perf_counter() - committing


def _noop_path() -> str:
    from outbox_bench.tasks import noop

    return str(noop.module_path)


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
