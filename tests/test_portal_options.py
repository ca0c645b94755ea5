"""The portal's API with the event-type catalogue, an endpoint's own headers and the v1a
(ed25519) signature scheme: what a tenant sees, sends and receives."""

from __future__ import annotations

import json

import pytest

from django_outbox import webhooks
from django_outbox.models import Endpoint
from tests.conftest import wait_until
from tests.portal import Api, problem
from tests.test_webhook_catalogue import CATALOGUE, outbox

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"


@pytest.fixture
def api() -> Api:
    return Api("acme")


def _rows() -> list[dict]:
    return list(Endpoint.objects.order_by("pk").values())


def test_the_event_types_are_listed_with_their_examples_and_schemas(api):
    with outbox(EVENT_TYPES=CATALOGUE):
        listed = api.get("event-types/")
    assert listed.status_code == 200, listed.content
    by_name = {row["name"]: row for row in listed.json()["data"]}
    assert list(by_name) == sorted(CATALOGUE)
    paid = by_name["invoice.paid"]
    assert paid["description"] == CATALOGUE["invoice.paid"]["description"]
    assert paid["example"] == {"id": 7, "amount": "12.00"}
    assert paid["schema"] == CATALOGUE["invoice.paid"]["schema"]
    assert by_name["user.deleted"]["schema"] is None


def test_without_a_catalogue_the_list_is_empty_and_a_query_parameter_is_refused(api):
    assert api.get("event-types/").json() == {"data": []}
    refused = problem(api.get("event-types/", limit=5), 400)
    assert "'limit'" in refused["detail"]


def test_a_filter_matching_no_declared_type_is_refused_and_nothing_is_written(api):
    with outbox(EVENT_TYPES=CATALOGUE):
        refused = problem(api.post("endpoints/", {"url": URL, "event_types": ["order.*"]}), 422)
        assert "event_types" in {e["field"] for e in refused["errors"]}
        assert Endpoint.objects.count() == 0
        made = api.post("endpoints/", {"url": URL, "event_types": ["invoice.*"]})
        assert made.status_code == 201, made.content
        before = _rows()
        endpoint_id = made.json()["id"]
        problem(api.patch(f"endpoints/{endpoint_id}/", {"event_types": ["user.created"]}), 422)
    assert _rows() == before


def test_headers_are_set_shown_changed_and_a_reserved_one_changes_nothing(api):
    made = api.post("endpoints/", {"url": URL, "headers": {"X-Tenant": "acme"}}).json()
    assert made["headers"] == {"X-Tenant": "acme"}
    assert api.get(f"endpoints/{made['id']}/").json()["headers"] == {"X-Tenant": "acme"}
    before = _rows()
    for bad in (
        {"webhook-signature": "v1,forged"},
        {"Content-Type": "text/plain"},
        {"X-Bad": "line\r\nbreak"},
        {"bad name": "x"},
        {"X-Number": 5},
    ):
        refused = problem(api.patch(f"endpoints/{made['id']}/", {"headers": bad}), 422)
        assert [e["field"] for e in refused["errors"]] == ["headers"], bad
        assert "line\r\nbreak" not in refused["detail"]
    assert _rows() == before
    changed = api.patch(f"endpoints/{made['id']}/", {"headers": None}).json()
    assert changed["headers"] == {}


def test_a_v1a_endpoint_shows_its_public_key_and_never_its_private_key(api):
    made = api.post("endpoints/", {"url": URL, "signature_scheme": "v1a"})
    assert made.status_code == 201, made.content
    body = made.json()
    endpoint = Endpoint.objects.get(pk=body["id"])
    assert endpoint.secret.startswith("whsk_")
    assert body["signature_scheme"] == "v1a" and "secret" not in body
    assert body["public_key"] == webhooks.public_key(endpoint) and body["public_key"].startswith(
        "whpk_"
    )
    rotated = api.post(f"endpoints/{endpoint.pk}/rotate-secret/", {"grace_seconds": 60}).json()
    assert "secret" not in rotated and rotated["public_key"] != body["public_key"]
    endpoint.refresh_from_db()
    answers = [
        body,
        rotated,
        api.get(f"endpoints/{endpoint.pk}/").json(),
        api.get("endpoints/").json(),
    ]
    for private in (endpoint.secret, endpoint.previous_secret):
        assert private.startswith("whsk_") and private not in json.dumps(answers)
    # Back to v1: a rotation into a new whsec_ secret, shown once.
    back = api.patch(f"endpoints/{endpoint.pk}/", {"signature_scheme": "v1"}).json()
    assert back["signature_scheme"] == "v1" and back["public_key"] is None
    assert (
        back["secret"].startswith("whsec_")
        and back["secret"] == Endpoint.objects.get(pk=endpoint.pk).secret
    )
    assert "secret" not in api.get(f"endpoints/{endpoint.pk}/").json()


def test_an_unknown_signature_scheme_is_refused(api):
    refused = problem(api.post("endpoints/", {"url": URL, "signature_scheme": "v2"}), 422)
    assert [e["field"] for e in refused["errors"]] == ["signature_scheme"]
    assert Endpoint.objects.count() == 0


def test_a_v1a_test_event_with_headers_reaches_a_real_receiver_verified_by_the_public_key(
    api, receiver, webhook_worker
):
    made = api.post(
        "endpoints/",
        {"url": receiver.url("/in"), "signature_scheme": "v1a", "headers": {"X-Tenant": "acme"}},
    ).json()
    assert api.post(f"endpoints/{made['id']}/test/").status_code == 202
    webhook_worker()
    (received,) = wait_until(lambda: receiver.received, what="the test event")
    headers = {name.lower(): value for name, value in received.headers.items()}
    assert headers["x-tenant"] == "acme"
    assert headers["webhook-signature"].startswith("v1a,")
    payload = webhooks.verify(received.headers, received.body, made["public_key"])
    assert payload["type"] == "webhook.test"
