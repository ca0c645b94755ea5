"""Webhook endpoints, the messages sent to them, one delivery per (message, endpoint), and
the log of every attempt.

A delivery's retries run as jobs (one active job per delivery, through the job's dedup
key); the delivery row holds what a user asks about: its status, attempts and next try.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q, Value
from django.utils import timezone


class SignatureScheme(models.TextChoices):
    """Standard Webhooks' signature schemes."""

    V1 = "v1", "v1: HMAC-SHA256 with a shared whsec_ secret"
    V1A = "v1a", "v1a: ed25519, the receiver holds the whpk_ public key"


class Endpoint(models.Model):
    id = models.BigAutoField(primary_key=True)
    url = models.URLField("URL", max_length=2048)
    tenant = models.CharField(max_length=255, blank=True, default="")
    description = models.TextField(blank=True, default="")
    #: Event types this endpoint receives; ``*`` matches any run of characters. Empty: all.
    event_types = models.JSONField(default=list, blank=True)
    #: The key it signs with: a ``whsec_`` secret (scheme v1) or a ``whsk_`` private key
    #: (v1a, whose receiver verifies with the ``whpk_`` public key).
    secret = models.CharField(max_length=255)
    #: How its requests are signed from now on: "v1" (HMAC-SHA256, a shared secret) or "v1a"
    #: (ed25519, a key pair). A change takes effect as a rotation (``webhooks.update_endpoint``).
    #: Both new columns have a database default: rows inserted by code that does not know
    #: them (older code during a rolling upgrade, SQL of one's own) are v1, without headers.
    signature_scheme = models.CharField(
        max_length=3,
        choices=SignatureScheme.choices,
        default=SignatureScheme.V1,
        db_default=SignatureScheme.V1.value,
    )
    #: Headers of its own sent with every request: names to values (webhooks/headers.py
    #: says which are allowed).
    headers = models.JSONField(
        default=dict, db_default=Value({}, output_field=models.JSONField()), blank=True
    )
    #: Until ``previous_secret_expires_at``, the secret before the last rotation signs too.
    previous_secret = models.CharField(max_length=255, blank=True, default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    active = models.BooleanField(default=True)
    disabled_reason = models.CharField(max_length=255, blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)
    #: Seconds for a whole request to this endpoint; empty: OUTBOX["WEBHOOKS"]["TIMEOUT"].
    timeout = models.FloatField(null=True, blank=True)
    #: Requests per second at most, shared by every worker; empty: no limit.
    rate_limit = models.FloatField(null=True, blank=True)
    #: When its deliveries started failing without a success since, and how many attempts
    #: in a row have failed (the auto-disable rule reads both).
    failing_since = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "django_outbox_endpoint"
        indexes = [
            # send() reads the active endpoints of one tenant.
            models.Index(
                fields=["tenant"], name="outbox_endpoint_active", condition=Q(active=True)
            ),
        ]

    def __str__(self) -> str:
        return self.url


class Message(models.Model):
    id = models.BigAutoField(primary_key=True)
    #: The ``webhook-id`` header: the same on every attempt, so receivers can deduplicate.
    uid = models.CharField("UID", max_length=64, unique=True)
    event_type = models.CharField(max_length=255)
    tenant = models.CharField(max_length=255, blank=True, default="")
    #: The exact body sent and signed: a Standard Webhooks envelope as JSON text.
    body = models.TextField()
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    #: Messages with the same key reach each endpoint in the order they were sent
    #: (``send(ordering_key=...)``); NULL: in any order.
    ordering_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "django_outbox_message"
        indexes = [
            # The portal's list of a tenant's messages, newest first (docs/portal.md).
            models.Index(fields=["tenant", "id"], name="outbox_message_tenant"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                name="outbox_message_idempotency",
                condition=Q(idempotency_key__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.uid} {self.event_type}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Delivery(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (message, endpoint) below serves every lookup by
    # message, and a send writes one index entry a delivery fewer.
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    #: Attempts in the current round (since it was created or last resent).
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    #: When it was last sent again by hand: a new round of attempts, numbered from 1.
    resent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "django_outbox_delivery"
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["message", "endpoint"], name="outbox_delivery_once"),
        ]
        indexes = [
            # recover(): an endpoint's failed deliveries since a time.
            models.Index(
                fields=["endpoint", "created_at"],
                name="outbox_delivery_failed",
                condition=Q(status=DeliveryStatus.FAILED),
            ),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.pk} ({self.status})"


class Attempt(models.Model):
    """One HTTP request of a delivery, or one refused before it was sent."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the (delivery, started_at) index below serves every lookup.
    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration = models.FloatField(help_text="Seconds.")
    succeeded = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    #: The first 4 KiB of the response body, decoded leniently.
    response_body = models.TextField(blank=True, default="")
    error_class = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")

    class Meta:
        db_table = "django_outbox_attempt"
        indexes = [
            # The latest-attempt lookup: per delivery, newest first, within a time bound.
            models.Index(fields=["delivery", "started_at"], name="outbox_attempt_latest"),
        ]

    def __str__(self) -> str:
        # Numbers start again at 1 after a resend: the time tells two attempts 1 apart.
        when = f" at {self.started_at:%Y-%m-%d %H:%M:%S}" if self.started_at else ""
        return f"attempt {self.number} of delivery #{self.delivery_id}{when}"


class EndpointHour(models.Model):
    """Attempts to one endpoint in one hour, and how many succeeded.

    The dashboard's success rates read these few rows per endpoint, not the attempt log:
    a busy day logs millions of attempts. The recorder adds each batch's counts."""

    id = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="hours")
    #: The hour's start.
    hour = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "django_outbox_endpoint_hour"
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "hour"], name="outbox_endpoint_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint_id} at {self.hour:%Y-%m-%d %H}h"
