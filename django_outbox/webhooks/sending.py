"""``send()``: a message, its deliveries and their jobs, in the caller's transaction; and
the envelope every message is sent in."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from django_outbox import conf
from django_outbox.jobs.jsonvalues import storable_problem
from django_outbox.jobs.results import resolve_task
from django_outbox.models import Message
from django_outbox.task import OutboxTask
from django_outbox.webhooks import catalogue, fanout, values
from django_outbox.webhooks.scope import in_webhooks_database, using


def envelope(event_type: str, payload: Any, at: datetime) -> str:
    """The exact body sent and signed: ``{"type", "timestamp", "data"}`` as compact JSON."""
    problem = storable_problem(payload)
    if problem is not None:
        raise ValidationError(f"The payload of {event_type!r} cannot be sent as JSON: {problem}")
    stamp = at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    body = json.dumps(
        {"type": event_type, "timestamp": stamp, "data": payload},
        separators=(",", ":"),
        ensure_ascii=False,
    )
    limit = conf.get().WEBHOOKS.MAX_PAYLOAD_BYTES
    size = len(body.encode("utf-8"))
    if size > limit:
        raise ValidationError(
            f"The payload of {event_type!r} is {size:,} bytes as sent, over "
            f"OUTBOX['WEBHOOKS']['MAX_PAYLOAD_BYTES'] ({limit:,} bytes). Send a smaller event (an "
            "id the receiver can fetch the rest with)."
        )
    return body


@in_webhooks_database
def send(
    event_type: str,
    payload: Any,
    *,
    tenant: str = "",
    idempotency_key: str | None = None,
    ordering_key: str | None = None,
) -> Message:
    """Send ``payload`` to every active endpoint of ``tenant`` whose filter matches.

    In the caller's transaction: a rollback sends nothing, and a database error in it
    leaves that transaction to be rolled back (as a failed ``save()`` does). A repeated
    ``idempotency_key`` (per tenant) returns the message it sent first and sends nothing
    new. The statements it runs do not grow with the number of endpoints.

    ``ordering_key``: messages with the same key reach each endpoint in the order they
    were sent; a delivery being retried holds back the later ones of its key to its
    endpoint, and nothing else.
    """
    values.event_type(event_type)
    catalogue.check_event_type(event_type)
    tenant = values.short_text("tenant", tenant)
    if idempotency_key is not None:
        values.short_text("idempotency_key", idempotency_key, allow_empty=False)
    values.ordering_key(ordering_key)
    now = timezone.now()
    body = envelope(event_type, payload, now)
    if catalogue.validating():
        # The data as it is sent (JSON values), not as it was given.
        catalogue.validate_payload(event_type, json.loads(body)["data"])
    alias = using()
    # All or nothing without a savepoint of its own, as Django's bulk_create() and
    # multi-table save(): inside the caller's transaction a failure marks that transaction
    # for rollback, and a send costs no SAVEPOINT and RELEASE round trips.
    with transaction.atomic(using=alias, savepoint=False):
        if idempotency_key is not None:
            found = Message.objects.using(alias).filter(
                tenant=tenant, idempotency_key=idempotency_key
            )
            if existing := found.first():
                return existing
        message = Message(
            uid=new_message_id(),
            event_type=event_type,
            tenant=tenant,
            body=body,
            idempotency_key=idempotency_key,
            ordering_key=ordering_key,
            created_at=now,
        )
        if idempotency_key is None:
            message.save(using=alias, force_insert=True)
        else:
            try:
                with transaction.atomic(using=alias):
                    message.save(using=alias, force_insert=True)
            except IntegrityError:
                # Sent a moment ago by a concurrent transaction: that message it is.
                if existing := found.first():
                    return existing
                raise
        fan_out(message, now, fresh=True)
    return message


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def fan_out(
    message: Message, now: datetime, endpoint_ids: list[int] | None = None, fresh: bool = False
) -> int:
    """Deliveries of ``message`` and their jobs, then a wake-up on commit. ``fresh``: the
    message was written by this transaction, so it has no deliveries yet."""
    created = fanout.insert_deliveries(
        using(), message.pk, message.event_type, message.tenant, now, endpoint_ids
    )
    if created:
        enqueue_delivery_jobs(message.pk, now, endpoint_ids, message.ordering_key, fresh)
    return created


def enqueue_delivery_jobs(
    message_id: int,
    now: datetime,
    endpoint_ids: list[int] | None = None,
    ordering_key: str | None = None,
    fresh: bool = False,
) -> int:
    options = conf.get().WEBHOOKS
    deliver = resolve_task(fanout.DELIVER_TASK)
    if not isinstance(deliver, OutboxTask):  # its backend is not django_outbox's
        raise ImproperlyConfigured(
            f"OUTBOX['WEBHOOKS']['BACKEND'] ({options.BACKEND!r}) must be a TASKS alias of "
            "django_outbox.backend.OutboxBackend: webhook deliveries are its jobs."
        )
    task = deliver.using(
        backend=options.BACKEND,
        queue_name=options.QUEUE,
        # The delivery's schedule decides when it has failed; the job's own limit only
        # stops a delivery whose worker keeps dying from running for ever.
        max_attempts=2 * len(options.RETRY_SCHEDULE) + 2,
    )
    return fanout.insert_jobs(using(), task, message_id, now, endpoint_ids, ordering_key, fresh)
