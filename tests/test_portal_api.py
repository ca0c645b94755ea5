"""The portal's JSON API as a tenant uses it: endpoints, messages, deliveries, attempts,
pages, problems, the rate limit and the OpenAPI document."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job, Message
from django_outbox.portal import openapi
from django_outbox.portal.scoping import Scope
from tests.conftest import wait_until
from tests.portal import BASE, Api, problem

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"


@pytest.fixture
def api() -> Api:
    return Api("acme")


def test_create_shows_the_secret_once_and_reads_never(api):
    created = api.post(
        "endpoints/", {"url": URL, "description": "billing", "event_types": ["invoice.*"]}
    )
    assert created.status_code == 201, created.content
    body = created.json()
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert body["secret"] == endpoint.secret and body["secret"].startswith("whsec_")
    assert (endpoint.tenant, endpoint.url, endpoint.event_types) == ("acme", URL, ["invoice.*"])
    read = api.get(f"endpoints/{endpoint.pk}/").json()
    assert "secret" not in read and read["description"] == "billing" and read["active"] is True
    listed = api.get("endpoints/").json()
    assert [row["id"] for row in listed["data"]] == [endpoint.pk]
    assert "secret" not in listed["data"][0] and listed["next_cursor"] is None
    assert endpoint.secret not in json.dumps([read, listed])


def test_update_changes_only_the_fields_given(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme", description="old")
    answer = api.patch(f"endpoints/{endpoint.pk}/", {"event_types": ["order.*"], "rate_limit": 5})
    assert answer.status_code == 200, answer.content
    endpoint.refresh_from_db()
    assert (endpoint.event_types, endpoint.rate_limit, endpoint.description) == (
        ["order.*"],
        5.0,
        "old",
    )
    assert answer.json()["rate_limit"] == 5.0


def test_delete_removes_the_endpoint(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    assert api.delete(f"endpoints/{endpoint.pk}/").status_code == 204
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    problem(api.get(f"endpoints/{endpoint.pk}/"), 404)


def test_disable_and_enable(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    disabled = api.post(f"endpoints/{endpoint.pk}/disable/").json()
    assert disabled["active"] is False and disabled["disabled_reason"] == "in the portal"
    assert not Endpoint.objects.get(pk=endpoint.pk).active
    # A disabled endpoint gets no test event: a conflict that says what to do.
    assert "enable it first" in problem(api.post(f"endpoints/{endpoint.pk}/test/"), 409)["detail"]
    enabled = api.post(f"endpoints/{endpoint.pk}/enable/", {}).json()
    assert enabled["active"] is True and enabled["disabled_reason"] is None


def test_rotate_shows_the_new_secret_once_and_keeps_the_old_one_for_the_grace(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    old = endpoint.secret
    answer = api.post(f"endpoints/{endpoint.pk}/rotate-secret/", {"grace_seconds": 3600})
    assert answer.status_code == 200, answer.content
    endpoint.refresh_from_db()
    assert answer.json()["secret"] == endpoint.secret != old
    assert endpoint.previous_secret == old
    left = endpoint.previous_secret_expires_at - timezone.now()
    assert timedelta(minutes=59) < left <= timedelta(hours=1)
    assert "secret" not in api.get(f"endpoints/{endpoint.pk}/").json()


def test_a_test_event_reaches_a_real_receiver_and_its_attempt_is_shown(
    api, receiver, webhook_worker
):
    endpoint = api.post("endpoints/", {"url": receiver.url("/in")}).json()
    sent = api.post(f"endpoints/{endpoint['id']}/test/")
    assert sent.status_code == 202, sent.content
    assert sent.json()["event_type"] == "webhook.test"
    webhook_worker()
    wait_until(lambda: receiver.received, what="the test event")
    received = receiver.received[0]
    webhooks.verify(received.headers, received.body, endpoint["secret"])

    def succeeded():
        rows = api.get("attempts/", endpoint=endpoint["id"], status="succeeded").json()["data"]
        return rows

    (attempt,) = wait_until(succeeded, what="the attempt")
    assert attempt["status_code"] == 200 and attempt["error"] is None
    shown = api.get(f"attempts/{attempt['id']}/").json()
    assert shown["request"]["url"] == receiver.url("/in")
    assert json.loads(shown["request"]["body"])["type"] == "webhook.test"
    assert shown["response"]["body"] == "ok"
    deliveries = api.get("deliveries/", endpoint=endpoint["id"], status="succeeded").json()
    assert [d["id"] for d in deliveries["data"]] == [attempt["delivery"]]
    listed = api.get(f"deliveries/{attempt['delivery']}/attempts/").json()["data"]
    assert [a["id"] for a in listed] == [attempt["id"]]


def test_messages_list_filter_and_read(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    paid = webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    webhooks.send("order.made", {"id": 2}, tenant="acme")
    webhooks.send("invoice.paid", {"id": 3}, tenant="globex")
    listed = api.get("messages/").json()["data"]
    assert [m["event_type"] for m in listed] == ["order.made", "invoice.paid"]
    assert "payload" not in listed[0]
    only = api.get("messages/", event_type="invoice.paid").json()["data"]
    assert [m["id"] for m in only] == [paid.uid]
    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert api.get("messages/", since=later).json()["data"] == []
    assert len(api.get("messages/", until=later).json()["data"]) == 2
    read = api.get(f"messages/{paid.uid}/").json()
    assert read["payload"] == {"id": 1}
    assert [d["endpoint"] for d in read["deliveries"]] == [endpoint.pk]


def test_deliveries_filter_by_status_event_type_and_time(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    webhooks.send("order.made", {"id": 2}, tenant="acme")
    first = Delivery.objects.order_by("pk").first()
    Delivery.objects.filter(pk=first.pk).update(status=DeliveryStatus.FAILED)
    failed = api.get("deliveries/", status="failed").json()["data"]
    assert [d["id"] for d in failed] == [first.pk] and failed[0]["event_type"] == "invoice.paid"
    orders = api.get("deliveries/", event_type="order.made", endpoint=endpoint.pk).json()["data"]
    assert [d["event_type"] for d in orders] == ["order.made"]
    assert api.get("deliveries/", since=timezone.now().isoformat()).json()["data"] == []
    assert api.get(f"deliveries/{first.pk}/").json()["status"] == "failed"


def test_resend_queues_a_new_round_once(api):
    webhooks.create_endpoint(URL, tenant="acme")
    webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    delivery = Delivery.objects.get()
    # Its first job is still queued: a resend now would be a second one.
    assert "already queued" in problem(api.post(f"deliveries/{delivery.pk}/resend/"), 409)["detail"]
    Job.objects.all().delete()
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED, attempts=8)
    resent = api.post(f"deliveries/{delivery.pk}/resend/")
    assert resent.status_code == 202, resent.content
    assert resent.json()["status"] == "pending" and resent.json()["attempts"] == 0
    assert Job.objects.count() == 1


def test_recover_resends_the_failed_deliveries_since_a_time(api):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    for n in range(3):
        webhooks.send("invoice.paid", {"id": n}, tenant="acme")
    Job.objects.all().delete()
    Delivery.objects.update(status=DeliveryStatus.FAILED)
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    answer = api.post(f"endpoints/{endpoint.pk}/recover/", {"since": since})
    assert answer.status_code == 202, answer.content
    assert answer.json() == {"queued": 3}
    assert set(Delivery.objects.values_list("status", flat=True)) == {"pending"}


def test_pages_follow_their_cursors_newest_first(api):
    made = [webhooks.create_endpoint(f"{URL}/{n}", tenant="acme").pk for n in range(5)]
    seen, cursor, pages = [], None, 0
    while True:
        query = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        body = api.get("endpoints/", **query).json()
        seen += [row["id"] for row in body["data"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1] and pages == 3


def test_a_cursor_from_another_tenant_or_list_or_changed_is_refused(api):
    for n in range(3):
        webhooks.create_endpoint(f"{URL}/{n}", tenant="acme")
        webhooks.create_endpoint(f"{URL}/{n}", tenant="globex")
    theirs = Api("globex").get("endpoints/", limit=1).json()["next_cursor"]
    ours = api.get("endpoints/", limit=1).json()["next_cursor"]
    refused = problem(api.get("endpoints/", cursor=theirs), 400)
    assert "another tenant" in refused["detail"] and refused["errors"][0]["field"] == "cursor"
    assert "list of endpoints" in problem(api.get("messages/", cursor=ours), 400)["detail"]
    changed = problem(api.get("endpoints/", cursor=ours + "x"), 400)
    assert "not one this API gave" in changed["detail"]


def test_a_method_a_route_does_not_take_is_405_with_allow(api):
    answer = problem(api.call("PUT", "endpoints/", {}), 405)
    assert "use GET, POST" in answer["detail"]


@override_settings(
    OUTBOX={"REDIS_ALIAS": "redis", "WEBHOOKS": {"PORTAL_RATE": 0.01, "PORTAL_BURST": 2}}
)
def test_each_tenant_has_its_own_rate_limit_answered_with_429_and_retry_after():
    # Tenants of this run only: Redis keeps buckets from one run to the next.
    run = uuid.uuid4().hex[:8]
    acme, globex = Api(f"acme-{run}"), Api(f"globex-{run}")
    assert [acme.get("endpoints/").status_code for _ in range(2)] == [200, 200]
    refused = acme.get("endpoints/")
    assert "Too many requests" in problem(refused, 429)["detail"]
    assert int(refused["Retry-After"]) >= 1
    assert globex.get("endpoints/").status_code == 200


def _routes(patterns, prefix="") -> dict[str, tuple[str, ...]]:
    found = {}
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found |= _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            found[prefix + str(pattern.pattern)] = getattr(pattern.callback, "methods", ("GET",))
    return found


def test_the_openapi_document_is_served_kept_in_docs_and_describes_every_route(api):
    served = api.get("openapi.json")
    assert served.status_code == 200
    kept = json.loads((Path(__file__).parent.parent / "docs" / "openapi.json").read_text())
    assert served.json() == kept == openapi.document(), (
        "docs/openapi.json is out of date: write openapi.document() to it"
    )
    assert kept["openapi"].startswith("3.1")
    routes = _routes(get_resolver("django_outbox.portal.urls").url_patterns)
    described = {
        "/" + path.removeprefix("api/v1/").replace("<str:", "{").replace(">", "}"): methods
        for path, methods in routes.items()
        if path.startswith("api/v1/") and not path.endswith("openapi.json")
    }
    assert {path: sorted(m.upper() for m in ops) for path, ops in kept["paths"].items()} == {
        path: sorted(methods) for path, methods in described.items()
    }
    assert kept["servers"][0]["url"] == BASE


def test_a_tenants_messages_are_read_newest_first_through_their_index_on_postgresql(api):
    if connection.vendor != "postgresql":
        pytest.skip("EXPLAIN output is PostgreSQL's")
    now = timezone.now()
    Message.objects.bulk_create(
        Message(
            uid=f"msg_{n}",
            event_type="invoice.paid",
            tenant=f"t{n % 50}",
            body="{}",
            created_at=now,
        )
        for n in range(5000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_outbox_message")
    plan = Scope("t7").messages().order_by("-pk")[:51].explain()
    # Without it, the primary key is read backwards past every other tenant's messages.
    assert "outbox_message_tenant" in plan, plan
