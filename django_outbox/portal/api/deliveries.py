"""Deliveries and their attempts: lists filtered by status, endpoint, event type and time;
one with its attempts; an attempt with the request and response excerpts; resend."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

from django_outbox import webhooks
from django_outbox.models import Attempt, DeliveryStatus
from django_outbox.portal import inputs, params, shapes
from django_outbox.portal.api.base import Answer
from django_outbox.portal.paging import page
from django_outbox.portal.problems import Problem
from django_outbox.portal.scoping import Scope

TIMES = {"since": params.moment, "until": params.moment}


def listed(request: HttpRequest, scope: Scope) -> Answer:
    query = params.parse(
        request,
        {
            "status": params.one_of(DeliveryStatus.values),
            "endpoint": params.whole,
            "event_type": params.event_type,
            **TIMES,
        },
    )
    rows = scope.deliveries().select_related("message")
    if "status" in query:
        rows = rows.filter(status=query["status"])
    if "endpoint" in query:
        rows = rows.filter(endpoint_id=query["endpoint"])
    if "event_type" in query:
        rows = rows.filter(message__event_type=query["event_type"])
    rows = _between(rows, query, "created_at")
    return Answer(page(scope, "deliveries", rows, query, shapes.delivery))


def read(request: HttpRequest, scope: Scope, delivery_id: int) -> Answer:
    delivery = scope.delivery(delivery_id)
    return Answer(shapes.delivery(delivery))


def resend(request: HttpRequest, scope: Scope, delivery_id: int) -> Answer:
    delivery = scope.delivery(delivery_id)
    inputs.nothing(request)
    if not webhooks.resend(delivery):
        raise Problem(
            "conflict",
            f"Delivery {delivery.pk} is already queued or being sent: it is resent once "
            "that run ends, if it fails.",
        )
    delivery.refresh_from_db()
    return Answer(shapes.delivery(delivery), status=202)


def attempts(request: HttpRequest, scope: Scope) -> Answer:
    query = params.parse(
        request,
        {
            "status": params.one_of(("succeeded", "failed")),
            "endpoint": params.whole,
            "delivery": params.whole,
            **TIMES,
        },
    )
    return Answer(
        page(scope, "attempts", _attempts(scope.attempts(), query), query, shapes.attempt)
    )


def delivery_attempts(request: HttpRequest, scope: Scope, delivery_id: int) -> Answer:
    delivery = scope.delivery(delivery_id)
    query = params.parse(request, {"status": params.one_of(("succeeded", "failed"))})
    rows = _attempts(scope.attempts().filter(delivery=delivery), query)
    return Answer(page(scope, f"attempts of delivery {delivery.pk}", rows, query, shapes.attempt))


def attempt(request: HttpRequest, scope: Scope, attempt_id: int) -> Answer:
    return Answer(shapes.attempt(scope.attempt(attempt_id), with_excerpts=True))


def _attempts(rows: QuerySet[Attempt], query: dict[str, Any]) -> QuerySet[Attempt]:
    if "status" in query:
        rows = rows.filter(succeeded=query["status"] == "succeeded")
    if "endpoint" in query:
        rows = rows.filter(delivery__endpoint_id=query["endpoint"])
    if "delivery" in query:
        rows = rows.filter(delivery_id=query["delivery"])
    return _between(rows, query, "started_at")


def _between(rows: QuerySet[Any], query: dict[str, Any], field: str) -> QuerySet[Any]:
    if "since" in query:
        rows = rows.filter(**{f"{field}__gte": query["since"]})
    if "until" in query:
        rows = rows.filter(**{f"{field}__lt": query["until"]})
    return rows
