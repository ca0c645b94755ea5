"""Deleting what is old: finished jobs, finished workflows (with their steps' jobs), and
webhook messages whose deliveries are all done (with their deliveries, attempts and hourly
counts).

A workflow's step jobs go with their workflow, never before: a step that waits reads the
results of the steps above it, however long ago they finished.

Every DELETE takes at most CHUNK rows, chosen by a bounded SELECT in the same statement,
so no statement holds many locks or runs for long, and workers keep claiming while a
prune runs. On PostgreSQL the chunk's rows are taken with ``FOR UPDATE SKIP LOCKED``:
two prunes at once (two workers with RETENTION, or a worker and ``outbox_prune``) share
the work instead of waiting on, or deadlocking with, each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router, transaction
from django.utils import timezone

from django_outbox.conf import FINISHED_STATUSES, parse_age, parse_statuses
from django_outbox.db import dialect, named, partitions
from django_outbox.lib import text
from django_outbox.models import (
    Attempt,
    Delivery,
    DeliveryStatus,
    EndpointHour,
    Job,
    LimitKey,
    Message,
    Workflow,
    WorkflowEdge,
    WorkflowStep,
)

__all__ = [
    "CHUNK",
    "FINISHED_NAMES",
    "Pruned",
    "make_partitions",
    "parse_age",
    "parse_statuses",
    "prune",
]

#: Rows per DELETE.
CHUNK = 10_000
#: Messages per round: each brings its deliveries and their attempts.
MESSAGE_CHUNK = 1_000
#: The statuses of finished jobs; live ones (queued, running) are never pruned.
FINISHED_NAMES = FINISHED_STATUSES


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be), by table."""

    counts: dict[str, int] = field(
        default_factory=lambda: {
            "jobs": 0,
            "workflows": 0,
            "messages": 0,
            "deliveries": 0,
            "attempts": 0,
            "hourly counts": 0,
        }
    )

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        return ", ".join(
            text.count(count, *_NOUNS.get(name, (name, name)))
            for name, count in self.counts.items()
        )


#: Each table's count as one row and as several: "1 delivery", "2 deliveries".
_NOUNS = {
    "jobs": ("job", "jobs"),
    "workflows": ("workflow", "workflows"),
    "messages": ("message", "messages"),
    "deliveries": ("delivery", "deliveries"),
    "attempts": ("attempt", "attempts"),
    "hourly counts": ("hourly count", "hourly counts"),
}


def prune(
    older_than: timedelta,
    statuses: Iterable[str] = FINISHED_NAMES,
    dry_run: bool = False,
    progress: Callable[[Pruned], None] | None = None,
    now: datetime | None = None,
) -> Pruned:
    """Delete jobs finished (with one of ``statuses``) more than ``older_than`` ago, and
    messages created more than ``older_than`` ago whose deliveries are all finished, with
    their deliveries and attempts, and endpoint hourly counts as old. ``progress`` is
    called after every statement."""
    cutoff = (now or timezone.now()) - older_than
    statuses = parse_statuses(statuses)
    pruned = Pruned()
    report = progress or (lambda _: None)
    partitioned = _partitioned()
    # A partitioned table's finished jobs go with their day, once all of it is past the
    # age: deleting the older part of a day first would leave its partition little to drop.
    jobs_cutoff = partitions.day_start(cutoff) if partitioned else cutoff
    if dry_run:
        _count(pruned, cutoff, statuses, jobs_cutoff)
        report(pruned)
        return pruned
    if partitioned:
        # Workflows first: their old steps' jobs would keep a day's partition.
        _prune_workflows(pruned, cutoff, statuses, report)
        _drop_days(pruned, jobs_cutoff, statuses, report)
        _prune_jobs(pruned, jobs_cutoff, statuses, report)
    else:
        _prune_jobs(pruned, cutoff, statuses, report)
        _prune_workflows(pruned, cutoff, statuses, report)
    _prune_messages(pruned, cutoff, report)
    _prune_hours(pruned, cutoff, report)
    return pruned


class _Sql:
    """Chunked DELETEs for one database."""

    def __init__(self, model: Any) -> None:
        self.connection = connections[router.db_for_write(model)]
        self.quote = self.connection.ops.quote_name
        self.dialect = dialect(self.connection.alias)

    def table(self, model: Any) -> str:
        return str(self.quote(model._meta.db_table))

    def delete_chunk(self, model: Any, where: str, params: list[Any], order: str = "id") -> int:
        """DELETE up to CHUNK rows of ``model`` matching ``where``; returns how many."""
        sql = named(
            "prune-chunk", self.dialect.delete_chunk(self.table(model), where, order, CHUNK)
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def datetime(self, value: datetime) -> Any:
        return self.connection.ops.adapt_datetimefield_value(value)


def _status_list(statuses: list[str]) -> str:
    # Statuses were checked against FINISHED: literals keep the partial indexes usable.
    return ", ".join(f"'{status}'" for status in statuses)


def _prune_jobs(
    pruned: Pruned, cutoff: datetime, statuses: list[str], report: Callable[[Pruned], None]
) -> None:
    sql = _Sql(Job)
    where = (
        f"status IN ({_status_list(statuses)}) AND finished_at < %s AND workflow_id IS NULL "
        f"AND id NOT IN ({_holding(sql)})"
    )
    while deleted := sql.delete_chunk(Job, where, [sql.datetime(cutoff)], order="finished_at"):
        pruned.counts["jobs"] += deleted
        report(pruned)


def _holding(sql: _Sql) -> str:
    """The ids of the failed jobs that hold their sequence: they stay until retried or
    skipped (jobs/keys.py)."""
    return f"SELECT held_by FROM {sql.table(LimitKey)} WHERE held_by IS NOT NULL"


def _partitioned() -> bool:
    sql = _Sql(Job)
    return sql.dialect.partitioned(sql.connection, Job._meta.db_table)


def make_partitions() -> list[str]:
    """The job table's partitions of today and the next days, where missing (a partitioned
    table only); their names."""
    if not _partitioned():
        return []
    sql = _Sql(Job)
    return partitions.make_days(sql.connection, Job._meta.db_table)


def _drop_days(
    pruned: Pruned, cutoff: datetime, statuses: list[str], report: Callable[[Pruned], None]
) -> None:
    """Drop each day's partition of finished jobs that ended before ``cutoff`` and holds no
    row that stays: a workflow's step (it goes with its workflow), a failed job holding its
    sequence, a job of a status not pruned. A day that keeps a row is left to the chunked
    deletes; so is one whose detach could not take its lock in time. One prune at a time
    drops days (another one at the same moment leaves them to it); then the days ahead are
    made."""
    sql = _Sql(Job)
    table = Job._meta.db_table
    with partitions.one_dropper(sql.connection) as alone:
        if alone:
            _drop_past_days(sql, table, pruned, cutoff, statuses, report)
    partitions.make_days(sql.connection, table)


def _drop_past_days(
    sql: _Sql,
    table: str,
    pruned: Pruned,
    cutoff: datetime,
    statuses: list[str],
    report: Callable[[Pruned], None],
) -> None:
    for name in partitions.leftovers(sql.connection, table):
        pruned.counts["jobs"] += partitions.drop(sql.connection, name)
    keep = f"workflow_id IS NOT NULL OR id IN ({_holding(sql)})"
    if set(statuses) != set(FINISHED_NAMES):
        keep += f" OR status NOT IN ({_status_list(statuses)})"
    for day in partitions.days(sql.connection, table):
        if day.end > cutoff:
            break
        if partitions.keeps_rows(sql.connection, day, keep):
            continue
        if not partitions.detach(sql.connection, table, day):
            continue
        if dropped := partitions.drop(sql.connection, day.name):
            pruned.counts["jobs"] += dropped
            report(pruned)


#: Workflows per round: each brings its steps' jobs, steps and edges.
WORKFLOW_CHUNK = 1_000
#: Step rows per DELETE (their primary key is their job's id, not ``id``).
STEP_CHUNK = 5_000


def _prune_workflows(
    pruned: Pruned, cutoff: datetime, statuses: list[str], report: Callable[[Pruned], None]
) -> None:
    """Workflows finished before ``cutoff`` with one of ``statuses``, a round of them at a
    time: their rows first, chosen and deleted under a lock (a retry that reopens one waits,
    or finds it gone), then their steps' jobs, their edges and steps."""
    sql = _Sql(Workflow)
    alias = sql.connection.alias
    step = sql.table(WorkflowStep)
    old = Workflow.objects.using(alias).filter(status__in=statuses, finished_at__lt=cutoff)
    while True:
        with transaction.atomic(using=alias):
            ids = list(
                old.select_for_update().order_by("id").values_list("id", flat=True)[:WORKFLOW_CHUNK]
            )
            if not ids:
                return
            pruned.counts["workflows"] += (
                Workflow.objects.using(alias).filter(id__in=ids)._raw_delete(alias)
            )
        among = ", ".join(str(int(pk)) for pk in ids)
        of_them = f"id IN (SELECT job_id FROM {step} WHERE workflow_id IN ({among}))"
        while deleted := sql.delete_chunk(Job, of_them, []):
            pruned.counts["jobs"] += deleted
            report(pruned)
        while sql.delete_chunk(WorkflowEdge, f"workflow_id IN ({among})", []):
            pass
        steps = WorkflowStep.objects.using(alias).filter(workflow_id__in=ids)
        while chunk := list(steps.values_list("job_id", flat=True)[:STEP_CHUNK]):
            steps.filter(job_id__in=chunk)._raw_delete(alias)
        report(pruned)


def _old_messages(sql: _Sql, cutoff: datetime) -> tuple[str, list[Any]]:
    """Messages created before ``cutoff`` with no delivery still pending."""
    delivery = sql.table(Delivery)
    message = sql.table(Message)
    return (
        f"{message}.created_at < %s AND NOT EXISTS (SELECT 1 FROM {delivery} "
        f"WHERE {delivery}.message_id = {message}.id "
        f"AND {delivery}.status = '{DeliveryStatus.PENDING.value}')",
        [sql.datetime(cutoff)],
    )


def _prune_messages(pruned: Pruned, cutoff: datetime, report: Callable[[Pruned], None]) -> None:
    sql = _Sql(Message)
    message, delivery = sql.table(Message), sql.table(Delivery)
    where, params = _old_messages(sql, cutoff)
    after = 0  # each round starts past the last: a message that must stay is not met again
    while True:
        with sql.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {message} WHERE {where} AND id > %s "
                f"ORDER BY id LIMIT {MESSAGE_CHUNK}",
                [*params, after],
            )
            ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return
        after = ids[-1]
        among = ", ".join(str(int(pk)) for pk in ids)
        # Only finished deliveries go: one a replay has just added stays, and keeps its
        # message, which a later prune takes once the delivery is done.
        done = f"message_id IN ({among}) AND status <> '{DeliveryStatus.PENDING.value}'"
        of_done = f"delivery_id IN (SELECT id FROM {delivery} WHERE {done})"
        while deleted := sql.delete_chunk(Attempt, of_done, []):
            pruned.counts["attempts"] += deleted
            report(pruned)
        # A delivery resent and attempted since its attempts went stays for the next prune.
        attempt = sql.table(Attempt)
        unattempted = (
            f"{done} AND NOT EXISTS (SELECT 1 FROM {attempt} "
            f"WHERE {attempt}.delivery_id = {delivery}.id)"
        )
        while deleted := sql.delete_chunk(Delivery, unattempted, []):
            pruned.counts["deliveries"] += deleted
            report(pruned)
        with sql.connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {message} WHERE id IN ({among}) AND NOT EXISTS (SELECT 1 FROM "
                f"{delivery} WHERE {delivery}.message_id = {message}.id)"
            )
            pruned.counts["messages"] += int(cursor.rowcount)
        report(pruned)
        if len(ids) < MESSAGE_CHUNK:
            return


def _prune_hours(pruned: Pruned, cutoff: datetime, report: Callable[[Pruned], None]) -> None:
    sql = _Sql(EndpointHour)
    while deleted := sql.delete_chunk(EndpointHour, "hour < %s", [sql.datetime(cutoff)]):
        pruned.counts["hourly counts"] += deleted
        report(pruned)


def _count(pruned: Pruned, cutoff: datetime, statuses: list[str], jobs_cutoff: datetime) -> None:
    pruned.counts["jobs"] = (
        Job.objects.exclude(id__in=LimitKey.objects.filter(held_by__isnull=False).values("held_by"))
        .filter(status__in=statuses, finished_at__lt=jobs_cutoff, workflow_id=None)
        .count()
    )
    workflows = Workflow.objects.filter(status__in=statuses, finished_at__lt=cutoff)
    pruned.counts["workflows"] = workflows.count()
    pruned.counts["jobs"] += Job.objects.filter(
        id__in=WorkflowStep.objects.filter(workflow__in=workflows).values("job_id")
    ).count()
    old = Message.objects.filter(created_at__lt=cutoff).exclude(
        deliveries__status=DeliveryStatus.PENDING
    )
    pruned.counts["messages"] = old.count()
    pruned.counts["deliveries"] = Delivery.objects.filter(message__in=old).count()
    pruned.counts["attempts"] = Attempt.objects.filter(delivery__message__in=old).count()
    pruned.counts["hourly counts"] = EndpointHour.objects.filter(hour__lt=cutoff).count()
