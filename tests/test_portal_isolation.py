"""No route reads or changes another tenant's rows: every route of
django_outbox.portal.urls, with every method, called as tenant B with tenant A's ids."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, Job, Message
from tests.portal import Api

pytestmark = pytest.mark.django_db(transaction=True)

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: A body each unsafe call sends, good in itself: only the tenant is wrong.
BODIES: dict[str, Any] = {
    "PATCH": {"url": "https://evil.example.com/in", "description": "taken"},
    "rotate-secret": {"grace_seconds": 0},
    "recover": {"since": "2000-01-01T00:00:00Z"},
    "POST": {},
    "PUT": {},
}


@pytest.fixture(autouse=True)
def no_rate_limit(settings: Any) -> None:
    """Some hundred calls in a second: over the default burst of a tenant."""
    webhooks_settings = {**settings.OUTBOX["WEBHOOKS"], "PORTAL_RATE": 10_000.0}
    settings.OUTBOX = {**settings.OUTBOX, "WEBHOOKS": webhooks_settings | {"PORTAL_BURST": 10_000}}


def routes() -> list[tuple[str, tuple[str, ...]]]:
    def walk(patterns: list[Any], prefix: str) -> list[tuple[str, tuple[str, ...]]]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                found += walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                methods = getattr(pattern.callback, "methods", ("GET",))
                found.append((prefix + str(pattern.pattern), methods))
        return found

    return walk(get_resolver("django_outbox.portal.urls").url_patterns, "/webhooks/")


def snapshot(tenant: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``tenant``, and every job."""
    return {
        "endpoints": list(Endpoint.objects.filter(tenant=tenant).order_by("pk").values()),
        "messages": list(Message.objects.filter(tenant=tenant).order_by("pk").values()),
        "deliveries": list(
            Delivery.objects.filter(endpoint__tenant=tenant).order_by("pk").values()
        ),
        "attempts": list(
            Attempt.objects.filter(delivery__endpoint__tenant=tenant).order_by("pk").values()
        ),
        "jobs": list(Job.objects.order_by("pk").values()),
    }


@pytest.fixture
def tenant_a() -> dict[str, str]:
    """Tenant A's rows: an endpoint, a message, its failed delivery and an attempt."""
    endpoint = webhooks.create_endpoint("https://a.example.com/in", tenant="a")
    message = webhooks.send("invoice.paid", {"id": 1}, tenant="a")
    delivery = Delivery.objects.get(message=message)
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    Job.objects.all().delete()  # so that a resend by B would have queued one
    attempt = Attempt.objects.create(
        delivery=delivery, number=1, started_at=timezone.now(), duration=0.1, status_code=500
    )
    # B has rows of its own, so that its lists are not empty by accident.
    webhooks.create_endpoint("https://b.example.com/in", tenant="b")
    return {
        "endpoint_id": str(endpoint.pk),
        "message_id": message.uid,
        "delivery_id": str(delivery.pk),
        "attempt_id": str(attempt.pk),
    }


def test_every_route_and_method_as_another_tenant_is_404_or_405_and_changes_nothing(tenant_a):
    before = snapshot("a")
    b = Api("b")
    called = 0
    for route, allowed in routes():
        names = re.findall(r"<str:(\w+)>", route)
        if not names or "token" in names:
            continue
        path = re.sub(r"<str:(\w+)>", lambda m: tenant_a[m[1]], route)
        for method in METHODS:
            action = route.rstrip("/").rsplit("/", 1)[-1]
            body = BODIES.get(action, BODIES.get(method)) if method != "GET" else None
            answer = b.call(method, path, body)
            expected = 404 if method in allowed else 405
            assert answer.status_code == expected, (method, path, answer.content[:300])
            if "/api/" in route:  # the pages answer the same, as a page
                assert answer["Content-Type"] == "application/problem+json"
            called += 1
    assert called >= 80
    assert snapshot("a") == before


def test_lists_filtered_by_another_tenants_ids_are_empty(tenant_a):
    before = snapshot("a")
    b = Api("b")
    # Each list against A's id of its own kind: B's endpoint 177 may well share its number
    # with A's attempt 177.
    for path, query, a_id in [
        ("endpoints/", {}, "endpoint_id"),
        ("messages/", {"event_type": "invoice.paid"}, "message_id"),
        ("deliveries/", {"endpoint": tenant_a["endpoint_id"]}, "delivery_id"),
        ("deliveries/", {"status": "failed"}, "delivery_id"),
        ("attempts/", {"delivery": tenant_a["delivery_id"]}, "attempt_id"),
        ("attempts/", {"endpoint": tenant_a["endpoint_id"]}, "attempt_id"),
    ]:
        body = b.get(path, **query).json()
        shown = {str(row["id"]) for row in body["data"]}
        assert tenant_a[a_id] not in shown, (path, query, body)
    assert [row["url"] for row in b.get("endpoints/").json()["data"]] == [
        "https://b.example.com/in"
    ]
    # B creates an endpoint of its own; A's rows stay as they were.
    assert b.post("endpoints/", {"url": "https://b.example.com/two"}).status_code == 201
    assert Endpoint.objects.filter(tenant="b").count() == 2
    assert snapshot("a") == before
