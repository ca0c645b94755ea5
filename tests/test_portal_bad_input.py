"""Every bad input to the portal's API is a problem that says what was wrong, and changes
nothing: bad and refused URLs, unknown fields, wrong types, malformed bodies, bad query
parameters and cursors."""

from __future__ import annotations

from typing import Any

import pytest

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, Endpoint, Job, Message
from tests.portal import Api, problem

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"
MODELS = (Job, Endpoint, Message, Delivery, Attempt)


def _snapshot() -> dict[str, list[dict[str, Any]]]:
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in MODELS}


@pytest.fixture
def api() -> Api:
    return Api("acme")


@pytest.fixture
def endpoint(api) -> Endpoint:
    """An endpoint of the tenant's with a message sent to it; nothing else may change."""
    endpoint = webhooks.create_endpoint(URL, tenant="acme", event_types=["invoice.*"])
    webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    return endpoint


BODIES = [
    # (method, path, body, status, the field named, words of the detail)
    ("POST", "endpoints/", {"url": "ftp://example.com/in"}, 422, "url", "not a valid"),
    ("POST", "endpoints/", {"url": "https://10.1.2.3/in"}, 422, "url", "private"),
    ("POST", "endpoints/", {"url": "https://169.254.169.254/x"}, 422, "url", "link-local"),
    ("POST", "endpoints/", {"url": "https://u:p@hooks.example.com/"}, 422, "url", "credentials"),
    ("POST", "endpoints/", {}, 422, "url", "Required"),
    ("POST", "endpoints/", {"url": 5}, 422, "url", "Must be a string"),
    ("POST", "endpoints/", {"url": URL, "colour": "red"}, 422, "colour", "Not a field"),
    ("POST", "endpoints/", {"url": URL, "secret": "whsec_x"}, 422, "secret", "Not a field"),
    ("POST", "endpoints/", {"url": URL, "event_types": "invoice.*"}, 422, "event_types", "list"),
    ("POST", "endpoints/", {"url": URL, "event_types": ["a b"]}, 422, "event_types", "filter"),
    ("POST", "endpoints/", {"url": URL, "rate_limit": 0}, 422, "rate_limit", "above 0"),
    ("POST", "endpoints/", {"url": URL, "rate_limit": "5"}, 422, "rate_limit", "Must be"),
    ("POST", "endpoints/", {"url": URL, "rate_limit": True}, 422, "rate_limit", "Must be"),
    ("POST", "endpoints/", {"url": URL, "timeout": 3600}, 422, "timeout", "below"),
    ("POST", "endpoints/", {"url": URL, "description": None}, 422, "description", "string"),
    ("PATCH", "endpoints/{e}/", {"url": "https://10.1.2.3/in"}, 422, "url", "private"),
    ("PATCH", "endpoints/{e}/", {"active": False}, 422, "active", "Not a field"),
    ("PATCH", "endpoints/{e}/", {"event_types": [1]}, 422, "event_types", "filter"),
    ("POST", "endpoints/{e}/rotate-secret/", {"grace_seconds": -1}, 422, "grace_seconds", "from 0"),
    ("POST", "endpoints/{e}/rotate-secret/", {"grace_seconds": "1h"}, 422, "grace_seconds", ""),
    ("POST", "endpoints/{e}/rotate-secret/", {"grace_seconds": 4e7}, 422, "grace_seconds", ""),
    ("POST", "endpoints/{e}/rotate-secret/", {"grace": 5}, 422, "grace", "Not a field"),
    ("POST", "endpoints/{e}/recover/", {}, 422, "since", "Required"),
    ("POST", "endpoints/{e}/recover/", {"since": "yesterday"}, 422, "since", "ISO 8601"),
    ("POST", "endpoints/{e}/recover/", {"since": "2026-01-01T00:00:00"}, 422, "since", "zone"),
    ("POST", "endpoints/{e}/recover/", {"since": "0001-01-01T00:00+09:00"}, 422, "since", "range"),
    ("POST", "endpoints/{e}/enable/", {"now": True}, 422, "now", "Not a field"),
    ("POST", "endpoints/{e}/test/", {"payload": {}}, 422, "payload", "Not a field"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "field", "says"), BODIES)
def test_a_bad_body_is_a_problem_naming_the_field_and_changes_nothing(
    api, endpoint, method, path, body, status, field, says
):
    before = _snapshot()
    answer = problem(api.call(method, path.format(e=endpoint.pk), body), status)
    errors = {error["field"]: error["detail"] for error in answer["errors"]}
    assert field in errors and says in errors[field], answer
    assert "Nothing was changed" in answer["detail"]
    assert _snapshot() == before


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "says"),
    [
        ("{not json", "application/json", 400, "not valid JSON"),
        ("[1, 2]", "application/json", 400, "must be a JSON object, not list"),
        ('"url"', "application/json", 400, "must be a JSON object, not str"),
        ("url=https://hooks.example.com/in", "application/x-www-form-urlencoded", 415, "JSON"),
        ('{"url": "https://hooks.example.com/in"}', "text/plain", 415, "Content-Type"),
    ],
)
def test_a_malformed_body_is_a_problem_and_changes_nothing(
    api, endpoint, raw, content_type, status, says
):
    before = _snapshot()
    answer = api.call("POST", "endpoints/", raw, content_type=content_type)
    assert says in problem(answer, status)["detail"]
    assert _snapshot() == before


@pytest.mark.parametrize(
    ("path", "query", "says"),
    [
        ("endpoints/", {"colour": "red"}, "Unknown query parameter 'colour'"),
        ("endpoints/", {"limit": 0}, "limit: must be a whole number"),
        ("endpoints/", {"limit": 251}, "at most 250"),
        ("endpoints/", {"limit": "ten"}, "limit: must be a whole number"),
        ("endpoints/", {"active": "yes"}, "must be one of true, false"),
        ("endpoints/", {"cursor": "junk"}, "The cursor cannot be used"),
        ("endpoints/", {"limit": [1, 2]}, "given 2 times"),
        ("deliveries/", {"status": "lost"}, "must be one of pending, succeeded"),
        ("deliveries/", {"endpoint": "abc"}, "endpoint: must be a whole number"),
        ("deliveries/", {"endpoint": -1}, "endpoint: must be a whole number"),
        ("deliveries/", {"endpoint": 2**63}, "endpoint: must be a whole number"),
        ("deliveries/", {"since": "yesterday"}, "is not a time"),
        ("deliveries/", {"until": "2026-01-01T00:00:00"}, "with a time zone"),
        ("deliveries/", {"event_type": "a b"}, "is not an event type"),
        ("deliveries/", {"since": "0311-08-09T22:54:05+19:22"}, "out of range"),
        ("messages/", {"until": "1969-12-31T23:59:59Z"}, "from 1970 to 9999"),
        ("messages/", {"event_type": "x" * 256}, "is not an event type"),
        ("attempts/", {"status": "maybe"}, "must be one of succeeded, failed"),
        ("attempts/", {"delivery": "1.5"}, "delivery: must be a whole number"),
    ],
)
def test_a_bad_query_parameter_is_a_400_naming_it_and_changes_nothing(
    api, endpoint, path, query, says
):
    before = _snapshot()
    answer = problem(api.get(path, **query), 400)
    assert says in answer["detail"], answer
    assert answer["errors"] and _snapshot() == before


@pytest.mark.parametrize(
    "path", ["endpoints/abc/", "endpoints/0/", "deliveries/1e3/", "attempts/-1/", "messages/nope/"]
)
def test_an_id_that_is_not_one_is_a_404_problem(api, path):
    assert "There is no" in problem(api.get(path), 404)["detail"]
