"""The fan-out of one message: its deliveries and their jobs, in two INSERT … SELECT
statements however many endpoints match (the rows never travel to Python and back).

Event-type patterns are matched in SQL, spelled by the database's dialect
(``Dialect.event_type_matches``): case-sensitively, ``*`` the only wildcard (see
``values.PATTERN``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections

from django_outbox.compat import Task
from django_outbox.db import dialect, named
from django_outbox.jobs import dedup, keys
from django_outbox.jobs.enqueue import enqueue_select
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job
from django_outbox.task import SEQUENCE_PREFIX

#: The task a delivery's job runs (webhooks/tasks.py): its path, as written into each job row.
DELIVER_TASK = "django_outbox.webhooks.tasks.deliver"

#: The job of a delivery carries this dedup key, so a delivery has one active job at most.
DEDUP_PREFIX = "outbox.delivery:"


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
    quote = connection.ops.quote_name
    params: list[Any] = [message_id, DeliveryStatus.PENDING.value, now, now, True]
    if endpoint_ids is None:
        where = f"e.tenant = %s AND {dialect(using).event_type_matches('e.event_types')}"
        params += [tenant, event_type]
    else:
        where = f"e.id IN ({', '.join(['%s'] * len(endpoint_ids))})"
        params += list(endpoint_ids)
    sql = named(
        "fan-out",
        f"INSERT INTO {quote(Delivery._meta.db_table)} "
        "(message_id, endpoint_id, status, attempts, next_attempt_at, created_at) "
        f"SELECT %s, e.id, %s, 0, %s, %s FROM {quote(Endpoint._meta.db_table)} e "
        f"WHERE e.active = %s AND {where}",
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
    ordering_key: str | None = None,
    fresh: bool = False,
) -> int:
    """One job of ``task`` per pending delivery of the message that has no active job, in
    one statement, through the engine's enqueue path (jobs/enqueue.py). ``fresh``: the
    deliveries were all written by this transaction, so no job can hold their keys yet and
    the statement does not look (the unique index of active keys still stands behind it).

    With an ``ordering_key``, each job takes its turn in the sequence of its endpoint and
    key (``ordered_key``), behind the deliveries of earlier messages with that key."""
    quote = connections[using].ops.quote_name
    params: list[Any] = [DEDUP_PREFIX, message_id, DeliveryStatus.PENDING.value]
    only = ""
    if endpoint_ids is not None:
        only = f" AND d.endpoint_id IN ({', '.join(['%s'] * len(endpoint_ids))})"
        params += list(endpoint_ids)
    sql = dialect(using)
    dedup_key = sql.concat("%s", sql.text("d.id"))
    source_sql = (
        f"FROM {quote(Delivery._meta.db_table)} d WHERE d.message_id = %s AND d.status = %s{only}"
    )
    if not fresh:
        params.append(DEDUP_PREFIX)  # the prefix of the key the check builds
        source_sql += (
            f" AND NOT EXISTS (SELECT 1 FROM {quote(Job._meta.db_table)} j "
            f"WHERE {dedup.active_key_condition(using, f'= {dedup_key}', 'j')})"
        )
    if ordering_key is None:
        return enqueue_select(
            task,
            args_sql=sql.json_array_of("d.id"),
            dedup_key_sql=dedup_key,
            source_sql=source_sql,
            params=params,
            now=now,
        )
    pending = Delivery.objects.using(using).filter(
        message_id=message_id, status=DeliveryStatus.PENDING
    )
    if endpoint_ids is not None:
        pending = pending.filter(endpoint_id__in=list(endpoint_ids))
    sequences = {
        ordered_key(endpoint, ordering_key)
        for endpoint in pending.values_list("endpoint_id", flat=True)
    }
    # The keys are locked before the jobs are written: of two messages with the same key,
    # the second's jobs come after the first's (jobs/keys.py).
    keys.enter(using, dict.fromkeys(sequences, keys.Rule(1)), now)
    count = enqueue_select(
        task,
        args_sql=sql.json_array_of("d.id"),
        dedup_key_sql=dedup_key,
        source_sql=source_sql,
        # The parameters go in the order of the expressions: args (none), dedup key,
        # limit key, source.
        params=[params[0], ORDERED_PREFIX, f":{ordering_key}", *params[1:]],
        now=now,
        limit_key_sql=sql.concat("%s", sql.text("d.endpoint_id"), "%s"),
    )
    keys.admit(using, sequences, now)
    return count


#: Where a delivery's job takes its turn when its message has an ordering key.
ORDERED_PREFIX = f"{SEQUENCE_PREFIX}outbox.webhook:"


def ordered_key(endpoint_id: int, ordering_key: str) -> str:
    """The sequence of the deliveries to ``endpoint_id`` of messages with ``ordering_key``."""
    return f"{ORDERED_PREFIX}{endpoint_id}:{ordering_key}"
