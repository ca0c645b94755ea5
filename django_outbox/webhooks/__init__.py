"""Webhooks: endpoints, signed messages, retries and a log of every attempt.

from django_outbox import webhooks

endpoint = webhooks.create_endpoint("https://hooks.example.com/in", event_types=["invoice.*"])
with transaction.atomic():
    invoice.save()
    webhooks.send("invoice.paid", {"id": invoice.id}, idempotency_key=f"paid-{invoice.id}")
"""

from __future__ import annotations

from django_outbox.webhooks.access import portal_token, portal_url
from django_outbox.webhooks.catalogue import EventType, event_types
from django_outbox.webhooks.endpoints import (
    create_endpoint,
    disable,
    enable,
    set_rate_limit,
    update_endpoint,
)
from django_outbox.webhooks.operations import recover, replay, resend, send_test
from django_outbox.webhooks.secrets import (
    public_key,
    rotate_secret,
    signature_schemes,
    verification_key,
    verify,
)
from django_outbox.webhooks.sending import send
from django_outbox.webhooks.signing import VerificationError

__all__ = [
    "EventType",
    "VerificationError",
    "create_endpoint",
    "disable",
    "enable",
    "event_types",
    "portal_token",
    "portal_url",
    "public_key",
    "recover",
    "replay",
    "resend",
    "rotate_secret",
    "send",
    "send_test",
    "set_rate_limit",
    "signature_schemes",
    "update_endpoint",
    "verification_key",
    "verify",
]
