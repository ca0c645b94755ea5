"""An endpoint's own headers: sent with every delivery to a real receiver, and every bad
name or value refused with a clear error that changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from standardwebhooks import Webhook

from django_outbox import webhooks
from django_outbox.models import Delivery, DeliveryStatus, Endpoint, Job, Message
from tests.test_webhooks_delivery import settled

pytestmark = pytest.mark.django_db(transaction=True)


def rows() -> dict[str, list[dict[str, Any]]]:
    return {
        m.__name__: list(m.objects.order_by("pk").values())
        for m in (Endpoint, Message, Delivery, Job)
    }


@pytest.fixture
def stored() -> Any:
    """An endpoint with a header and a message sent to it; the returned check is true while
    every row is exactly as it was."""
    webhooks.create_endpoint("https://hooks.example.com/in", headers={"X-Api-Key": "k1"})
    webhooks.send("invoice.paid", {"id": 1})
    before = rows()
    return lambda: rows() == before


def test_an_endpoints_headers_arrive_with_every_delivery(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(
        receiver.url(),
        headers={"Authorization": "Bearer t0k3n", "X-Tenant": "acme", "X-Empty": ""},
    )
    message = webhooks.send("invoice.paid", {"id": 7})
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.SUCCEEDED
    (request,) = receiver.at("/hook")
    assert request.headers["authorization"] == "Bearer t0k3n"
    assert request.headers["x-tenant"] == "acme"
    assert request.headers["x-empty"] == ""
    # Ours are still there, and the official library still verifies the v1 signature.
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == message.uid
    assert Webhook(endpoint.secret).verify(request.body, request.headers)["data"] == {"id": 7}


def test_changed_headers_go_with_the_next_delivery(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url(), headers={"X-Version": "1"})
    webhook_worker()
    settled(webhooks.send("invoice.paid", {"id": 1}))
    webhooks.update_endpoint(endpoint, headers={"X-Version": "2", "X-New": "yes"})
    settled(webhooks.send("invoice.paid", {"id": 2}))
    webhooks.update_endpoint(endpoint, headers=None)
    settled(webhooks.send("invoice.paid", {"id": 3}))

    first, second, third = receiver.at("/hook")
    assert first.headers["x-version"] == "1" and "x-new" not in first.headers
    assert second.headers["x-version"] == "2" and second.headers["x-new"] == "yes"
    assert "x-version" not in third.headers
    endpoint.refresh_from_db()
    assert endpoint.headers == {}


RESERVED = "accept-encoding, connection, content-encoding, content-length, content-type, "
BAD_HEADERS: list[tuple[str, Any, str]] = [
    ("a list", [("X-A", "1")], "headers must be a dict of header names to values, not list."),
    ("a name with a space", {"X Api": "1"},
     "'X Api' is not a valid header name: use letters, digits and !#$%&'*+-.^_`|~ only (no "
     "spaces, colons or other characters), e.g. 'X-Api-Key'."),
    ("a name with a colon", {"X-Api:": "1"}, "'X-Api:' is not a valid header name"),
    ("a name with a line break", {"X-A\r\nX-B": "1"}, "'X-A\\r\\nX-B' is not a valid header name"),
    ("a name outside ASCII", {"X-Clé": "1"}, "'X-Clé' is not a valid header name"),
    ("an empty name", {"": "1"}, "A header name must be a non-empty string, not ''."),
    ("a name that is a number", {1: "1"}, "A header name must be a non-empty string, not 1."),
    ("a 101-character name", {"X" * 101: "1"}, "The header name 'XXXXXXXXXXXXXXXXXXXX'… has "
     "101 characters; at most 100."),
    ("webhook-signature", {"webhook-signature": "v1,forged"},
     "The header 'webhook-signature' is reserved: webhook-id, webhook-timestamp, "
     "webhook-signature and every other webhook-* header are set by django_outbox (Standard "
     "Webhooks)."),
    ("Webhook-Id in another case", {"Webhook-Id": "msg_1"}, "The header 'Webhook-Id' is reserved"),
    ("webhook-timestamp", {"webhook-timestamp": "1"}, "The header 'webhook-timestamp' is reserved"),
    ("another webhook- header", {"webhook-version": "2"}, "The header 'webhook-version' is "
     "reserved"),
    ("content-type", {"Content-Type": "text/plain"},
     f"The header 'Content-Type' is reserved: it is set by django_outbox or its HTTP client for "
     f"every request ({RESERVED}expect, host, keep-alive, proxy-authorization, "
     "proxy-connection, te, trailer, transfer-encoding, upgrade, user-agent)."),
    ("host", {"Host": "evil.example.com"}, "The header 'Host' is reserved"),
    ("content-length", {"content-length": "0"}, "The header 'content-length' is reserved"),
    ("transfer-encoding", {"Transfer-Encoding": "chunked"},
     "The header 'Transfer-Encoding' is reserved"),
    ("connection", {"Connection": "close"}, "The header 'Connection' is reserved"),
    ("a value with CR LF", {"X-A": "1\r\nX-Injected: yes"},
     "The value of the header 'X-A' holds a line break (CR or LF), which would end the header."),
    ("a value with LF", {"X-A": "1\nb"}, "The value of the header 'X-A' holds a line break"),
    ("a value with NUL", {"X-A": "a\x00b"},
     "The value of the header 'X-A' holds a control character."),
    ("a value with DEL", {"X-A": "a\x7fb"},
     "The value of the header 'X-A' holds a control character."),
    ("a value outside ASCII", {"X-A": "café"},
     "The value of the header 'X-A' holds a character outside ASCII (encode it first, e.g. "
     "percent-encoding)."),
    ("a value with a leading space", {"X-A": " 1"},
     "The value of the header 'X-A' starts or ends with a space or tab."),
    ("a value that is a number", {"X-A": 1},
     "The value of the header 'X-A' must be a string, not int."),
    ("a 1,025-character value", {"X-A": "v" * 1025},
     "The value of the header 'X-A' has 1,025 characters; at most 1,024."),
    ("21 headers", {f"X-{n}": "1" for n in range(21)},
     "An endpoint may set at most 20 headers of its own, not 21."),
    ("one header twice", {"X-Api-Key": "1", "x-api-key": "2"},
     "The headers 'X-Api-Key' and 'x-api-key' are the same header: header names are "
     "case-insensitive. Set it once."),
    ("5,000 characters in all", {f"X-{n}": "v" * 1000 for n in range(5)},
     "An endpoint's headers may hold at most 4,096 characters in all (names and values), not "
     "5,015."),
]  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "says"), [c[1:] for c in BAD_HEADERS], ids=[c[0] for c in BAD_HEADERS]
)
def test_a_bad_header_is_refused_and_changes_nothing(stored, headers, says):
    with pytest.raises(ValidationError) as caught:
        webhooks.create_endpoint("https://other.example.com/in", headers=headers)
    assert caught.value.messages[0].startswith(says), caught.value.messages
    endpoint = Endpoint.objects.get()
    with pytest.raises(ValidationError) as caught:
        webhooks.update_endpoint(endpoint, headers=headers, description="changed too")
    assert caught.value.messages[0].startswith(says)
    assert stored()
    # A value is never repeated: it may be a credential.
    assert "X-Injected" not in caught.value.messages[0]


def test_headers_that_are_allowed_are_kept_as_given():
    headers = {
        "Authorization": "Bearer a.b-c_d~e+f/g=",
        "X-Trace": "a\tb",
        "x-odd!#$%&'*+.^`|~": "v",
    }
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", headers=headers)
    endpoint.refresh_from_db()
    assert endpoint.headers == headers


def test_an_endpoint_inserted_without_the_new_columns_is_v1_without_headers(
    receiver, webhook_worker
):
    """As code older than migration 0015 inserts one during a rolling upgrade."""
    from django.db import connection

    table = connection.ops.quote_name(Endpoint._meta.db_table)
    secret = webhooks.create_endpoint("https://hooks.example.com/x").secret
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (url, tenant, description, event_types, secret, "
            "previous_secret, active, disabled_reason, consecutive_failures, created_at) "
            f"VALUES (%s, 'old', '', '[]', %s, '', %s, '', 0, CURRENT_TIMESTAMP)",
            [receiver.url(), secret, True],
        )
    endpoint = Endpoint.objects.get(tenant="old")
    assert (endpoint.signature_scheme, endpoint.headers) == ("v1", {})
    message = webhooks.send("invoice.paid", {"id": 1}, tenant="old")
    webhook_worker()
    assert settled(message)[0].status == DeliveryStatus.SUCCEEDED
    (request,) = receiver.at("/hook")
    assert Webhook(secret).verify(request.body, request.headers)["data"] == {"id": 1}
