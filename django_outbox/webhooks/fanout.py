"""The fan-out of one message: its deliveries and their jobs, in two INSERT … SELECT
statements however many endpoints match (the rows never travel to Python and back).

Event-type patterns are matched in SQL, which is where PostgreSQL and SQLite differ: LIKE
(with ``*`` turned into ``%``) over ``jsonb_array_elements_text`` on PostgreSQL, GLOB over
``json_each`` on SQLite. Both match case-sensitively; patterns hold no other wildcard (see
``api.PATTERN``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import NotSupportedError, connections

from django_outbox.compat import Task
from django_outbox.jobs.enqueue import enqueue_select
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job, JobStatus

#: The job of a delivery carries this dedup key, so a delivery has one active job at most.
DEDUP_PREFIX = "outbox.delivery:"

_MATCH = {
    "postgresql": (
        "(jsonb_array_length(e.event_types) = 0 OR EXISTS (SELECT 1 FROM "
        "jsonb_array_elements_text(e.event_types) AS p(pattern) WHERE %s LIKE "
        "replace(replace(p.pattern, '_', '\\_'), '*', '%%') ESCAPE '\\'))"
    ),
    "sqlite": (
        "(json_array_length(e.event_types) = 0 OR EXISTS (SELECT 1 FROM "
        "json_each(e.event_types) AS p WHERE %s GLOB p.value))"
    ),
}

_JOB_ARGS = {"postgresql": "jsonb_build_array(d.id)", "sqlite": "json_array(d.id)"}


def _vendor(using: str) -> str:
    vendor = connections[using].vendor
    if vendor not in _MATCH:
        raise NotSupportedError(f"Webhooks support PostgreSQL and SQLite, not {vendor}.")
    return vendor


def insert_deliveries(
    using: str,
    message_id: int,
    event_type: str,
    tenant: str,
    now: datetime,
    endpoint_ids: Sequence[int] | None = None,
) -> int:
    """One delivery per matching active endpoint of ``tenant`` (or per endpoint of
    ``endpoint_ids``, whatever its filter); returns how many."""
    connection = connections[using]
    vendor = _vendor(using)
    quote = connection.ops.quote_name
    params: list[Any] = [message_id, DeliveryStatus.PENDING.value, now, now, True]
    if endpoint_ids is None:
        where = f"e.tenant = %s AND {_MATCH[vendor]}"
        params += [tenant, event_type]
    else:
        where = f"e.id IN ({', '.join(['%s'] * len(endpoint_ids))})"
        params += list(endpoint_ids)
    sql = (
        f"INSERT INTO {quote(Delivery._meta.db_table)} "
        "(message_id, endpoint_id, status, attempts, next_attempt_at, created_at) "
        f"SELECT %s, e.id, %s, 0, %s, %s FROM {quote(Endpoint._meta.db_table)} e "
        f"WHERE e.active = %s AND {where}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def insert_jobs(
    using: str,
    task: Task,
    message_id: int,
    now: datetime,
    endpoint_ids: Sequence[int] | None = None,
) -> int:
    """One job of ``task`` per pending delivery of the message that has no active job, in
    one statement, through the engine's enqueue path (jobs/enqueue.py)."""
    vendor = _vendor(using)
    quote = connections[using].ops.quote_name
    params: list[Any] = [DEDUP_PREFIX, message_id, DeliveryStatus.PENDING.value]
    only = ""
    if endpoint_ids is not None:
        only = f" AND d.endpoint_id IN ({', '.join(['%s'] * len(endpoint_ids))})"
        params += list(endpoint_ids)
    params += [DEDUP_PREFIX, JobStatus.QUEUED.value, JobStatus.RUNNING.value]
    return enqueue_select(
        task,
        args_sql=_JOB_ARGS[vendor],
        dedup_key_sql="%s || CAST(d.id AS TEXT)",
        source_sql=(
            f"FROM {quote(Delivery._meta.db_table)} d WHERE d.message_id = %s AND d.status = %s"
            f"{only} AND NOT EXISTS (SELECT 1 FROM {quote(Job._meta.db_table)} j "
            "WHERE j.dedup_key = %s || CAST(d.id AS TEXT) AND j.status IN (%s, %s))"
        ),
        params=params,
        now=now,
    )
