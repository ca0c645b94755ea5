"""What the API shows of each row: one function per kind, the one place its fields are
chosen (``openapi.py`` describes the same fields). Secrets never appear here: create and
rotate add the new secret to their own answer, once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django_outbox.models import Attempt, Delivery, Endpoint, Message, SignatureScheme
from django_outbox.webhooks import public_key

#: How much of a message's body an attempt's request shows, in characters.
REQUEST_EXCERPT = 4096


def moment(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z, or None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def endpoint(row: Endpoint) -> dict[str, Any]:
    return {
        "id": row.pk,
        "url": row.url,
        "description": row.description,
        "event_types": row.event_types,
        "active": row.active,
        "disabled_reason": row.disabled_reason or None,
        "disabled_at": moment(row.disabled_at),
        "rate_limit": row.rate_limit,
        "timeout": row.timeout,
        "headers": row.headers,
        "signature_scheme": row.signature_scheme,
        # v1a: what the receiver verifies with, no secret (v1: null; the secret is shown
        # once, by secret_once()).
        "public_key": public_key(row),
        "failing_since": moment(row.failing_since),
        "consecutive_failures": row.consecutive_failures,
        "previous_secret_expires_at": moment(row.previous_secret_expires_at),
        "created_at": moment(row.created_at),
    }


def secret_once(row: Endpoint) -> dict[str, str]:
    """What an answer that made a new key shows once: a v1 endpoint's ``whsec_`` secret.
    A v1a endpoint's private key is never shown: its ``public_key`` is in every read."""
    if row.signature_scheme == SignatureScheme.V1:
        return {"secret": row.secret}
    return {}


def message(row: Message, *, with_payload: bool = False) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": row.uid,
        "event_type": row.event_type,
        "ordering_key": row.ordering_key,
        "idempotency_key": row.idempotency_key,
        "created_at": moment(row.created_at),
    }
    if with_payload:
        shown["payload"] = json.loads(row.body).get("data")
    return shown


def delivery(row: Delivery) -> dict[str, Any]:
    return {
        "id": row.pk,
        "message": row.message.uid,
        "event_type": row.message.event_type,
        "endpoint": row.endpoint_id,
        "status": row.status,
        "attempts": row.attempts,
        "next_attempt_at": moment(row.next_attempt_at),
        "last_attempt_at": moment(row.last_attempt_at),
        "resent_at": moment(row.resent_at),
        "created_at": moment(row.created_at),
    }


def attempt(row: Attempt, *, with_excerpts: bool = False) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": row.pk,
        "delivery": row.delivery_id,
        "number": row.number,
        "started_at": moment(row.started_at),
        "duration": row.duration,
        "succeeded": row.succeeded,
        "status_code": row.status_code,
        "error": (
            {"class": row.error_class, "message": row.error_message} if row.error_class else None
        ),
    }
    if with_excerpts:
        body = row.delivery.message.body
        shown["request"] = {
            "url": row.delivery.endpoint.url,
            "body": body[:REQUEST_EXCERPT],
            "truncated": len(body) > REQUEST_EXCERPT,
        }
        shown["response"] = {"headers": row.response_headers, "body": row.response_body}
    return shown
