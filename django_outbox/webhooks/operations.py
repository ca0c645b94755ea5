"""The operations on deliveries that the admin and the portal expose: resend a delivery,
recover an endpoint's failed ones, replay a message to an endpoint, send a test event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from django_outbox.jobs import dedup
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Message
from django_outbox.webhooks import fanout
from django_outbox.webhooks.scope import in_webhooks_database, using
from django_outbox.webhooks.sending import enqueue_delivery_jobs, envelope, fan_out, new_message_id

TEST_EVENT = "webhook.test"


@in_webhooks_database
def resend(delivery: Delivery) -> bool:
    """Send a delivery again now, whatever its status, as a new round of attempts (numbered
    from 1, with the whole retry schedule). Returns False, changing nothing, while it
    already has a job queued or running (a delivery never has two)."""
    now = timezone.now()
    alias = using()
    with transaction.atomic(using=alias):
        if _has_active_job(delivery.pk):
            return False
        Delivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, resent_at=now
        )
        try:
            with transaction.atomic(using=alias):
                queued = enqueue_delivery_jobs(
                    delivery.message_id,
                    now,
                    [delivery.endpoint_id],
                    # Behind the deliveries of its key sent since, to this endpoint.
                    Message.objects.filter(pk=delivery.message_id)
                    .values_list("ordering_key", flat=True)
                    .first(),
                )
        except IntegrityError:  # a concurrent resend queued its job a moment ago
            return False
    return queued > 0


def _has_active_job(delivery_id: int) -> bool:
    return dedup.active_with_keys(using(), [f"{fanout.DEDUP_PREFIX}{delivery_id}"]).exists()


@in_webhooks_database
def recover(endpoint: Endpoint, since: datetime) -> int:
    """Resend every failed delivery to ``endpoint`` created since ``since``; returns how
    many were queued."""
    _deliverable(endpoint)
    failed = Delivery.objects.filter(
        endpoint=endpoint, status=DeliveryStatus.FAILED, created_at__gte=since
    ).order_by("pk")
    return sum(resend(delivery) for delivery in failed)


@in_webhooks_database
def replay(message: Message, endpoint: Endpoint) -> Delivery:
    """Deliver ``message`` to ``endpoint``, again or for the first time. The endpoint must
    be active and belong to the message's tenant."""
    _deliverable(endpoint)
    if endpoint.tenant != message.tenant:
        raise ValidationError(
            f"Endpoint {endpoint.pk} belongs to tenant {endpoint.tenant!r}, message "
            f"{message.uid} to {message.tenant!r}: a message goes to its own tenant only."
        )
    with transaction.atomic(using=using()):
        delivery = Delivery.objects.filter(message=message, endpoint=endpoint).first()
        if delivery is None:
            fan_out(message, timezone.now(), [endpoint.pk])
            return Delivery.objects.get(message=message, endpoint=endpoint)
        resend(delivery)
        delivery.refresh_from_db()
        return delivery


def _deliverable(endpoint: Endpoint) -> None:
    if not Endpoint.objects.filter(pk=endpoint.pk, active=True).exists():
        raise ValidationError(
            f"Endpoint {endpoint.pk} is disabled ({endpoint.disabled_reason or 'by hand'}): "
            "enable() it first."
        )


@in_webhooks_database
def send_test(endpoint: Endpoint, payload: Any = None) -> Message:
    """A ``webhook.test`` event to this endpoint alone, whatever its filter."""
    _deliverable(endpoint)
    now = timezone.now()
    data = payload if payload is not None else {"endpoint": endpoint.pk, "test": True}
    with transaction.atomic(using=using()):
        message = Message.objects.create(
            uid=new_message_id(),
            event_type=TEST_EVENT,
            tenant=endpoint.tenant,
            body=envelope(TEST_EVENT, data, now),
            created_at=now,
        )
        fan_out(message, now, [endpoint.pk], fresh=True)
    return message
