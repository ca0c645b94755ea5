"""Messages: the tenant's events, newest first, and one with its payload and deliveries."""

from __future__ import annotations

from django.http import HttpRequest

from django_outbox.portal import params, shapes
from django_outbox.portal.api.base import Answer
from django_outbox.portal.paging import page
from django_outbox.portal.scoping import Scope


def listed(request: HttpRequest, scope: Scope) -> Answer:
    query = params.parse(
        request,
        {"event_type": params.event_type, "since": params.moment, "until": params.moment},
    )
    rows = scope.messages()
    if "event_type" in query:
        rows = rows.filter(event_type=query["event_type"])
    if "since" in query:
        rows = rows.filter(created_at__gte=query["since"])
    if "until" in query:
        rows = rows.filter(created_at__lt=query["until"])
    return Answer(page(scope, "messages", rows, query, shapes.message))


def read(request: HttpRequest, scope: Scope, message_id: str) -> Answer:
    message = scope.message(message_id)
    deliveries = scope.deliveries().filter(message=message).select_related("message")
    return Answer(
        {
            **shapes.message(message, with_payload=True),
            "deliveries": [shapes.delivery(row) for row in deliveries.order_by("pk")],
        }
    )
