"""CORS for the tenant API: the origins of ``OUTBOX["PORTAL"]["CORS_ORIGINS"]`` may call it
from a browser with a bearer token; any other origin is refused its preflight and gets no
``Access-Control-Allow-Origin``; the portal's own origin passes as before."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client, override_settings

from django_outbox import conf, webhooks
from tests.portal import BASE, Api

pytestmark = pytest.mark.django_db(transaction=True)

APP = "https://app.example.com"


@pytest.fixture(autouse=True)
def _cors():
    with override_settings(OUTBOX={**settings.OUTBOX, "PORTAL": {"CORS_ORIGINS": [APP]}}):
        yield


def preflight(origin: str, method: str = "POST") -> object:
    return Client().options(
        f"{BASE}/endpoints/",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


def test_a_listed_origins_preflight_is_told_the_routes_methods_and_headers():
    answer = preflight(APP)
    assert answer.status_code == 204
    assert answer["Access-Control-Allow-Origin"] == APP
    assert answer["Access-Control-Allow-Methods"] == "GET, POST"
    assert answer["Access-Control-Allow-Headers"] == "Authorization, Content-Type"
    assert "Origin" in answer["Vary"]
    assert "Access-Control-Allow-Credentials" not in answer  # never the session cookie


def test_another_origins_preflight_is_refused_saying_why():
    answer = preflight("https://evil.example.net")
    assert answer.status_code == 403
    assert "Access-Control-Allow-Origin" not in answer
    assert "https://evil.example.net may not call this API" in answer.json()["detail"]


def test_a_call_from_a_listed_origin_may_be_read_by_its_page_and_others_may_not():
    webhooks.create_endpoint("https://hooks.example.com/in", tenant="acme")
    api = Api("acme")
    ours = api.call("GET", "endpoints/", headers={"Origin": APP})
    assert ours.status_code == 200 and len(ours.json()["data"]) == 1
    assert ours["Access-Control-Allow-Origin"] == APP
    assert ours["Access-Control-Expose-Headers"] == "Retry-After"
    theirs = api.call("GET", "endpoints/", headers={"Origin": "https://evil.example.net"})
    assert "Access-Control-Allow-Origin" not in theirs  # the browser hides the answer
    assert "Origin" in theirs["Vary"]


def test_the_portals_own_origin_is_no_cross_origin_call():
    api = Api("acme")
    same = api.call("GET", "endpoints/", headers={"Origin": "http://testserver"})
    assert same.status_code == 200
    assert "Access-Control-Allow-Origin" not in same


@pytest.mark.parametrize(
    "origins, says",
    [
        (["https://app.example.com/"], "'https://app.example.com/', which is not an origin"),
        (["*"], "'*', which is not an origin"),
        ("https://app.example.com", "must be a list of origins"),
    ],
)
def test_an_origin_that_is_not_one_is_a_settings_error(origins, says):
    errors = conf.settings_errors({"PORTAL": {"CORS_ORIGINS": origins}})
    assert any(says in error and "OUTBOX['PORTAL']['CORS_ORIGINS']" in error for error in errors)
    assert conf.check_id("PORTAL") == "django_outbox.E011"
