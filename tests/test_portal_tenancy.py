"""Who the tenant is: bearer tokens, portal links and their sessions, the host's function;
CSRF for callers by cookie only."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings

from django_outbox import webhooks
from django_outbox.models import Endpoint
from tests.portal import BASE, Api, problem

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"
ENDPOINTS = f"{BASE}/endpoints/"
HOST_FUNCTION = {
    "WEBHOOKS": {"PORTAL_TENANT": "tests.portal.tenant_for", "ALLOW_HTTP": True},
    "REDIS_ALIAS": "redis",
}
CSRF = "a" * 32


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_request_without_a_tenant_is_401_saying_how_to_get_one(caplog):
    caplog.set_level("INFO", logger="django_outbox.portal")
    answer = Client().get(ENDPOINTS)
    detail = problem(answer, 401)["detail"]
    # The caller is the tenant's script: it is told what to send, not the host's functions.
    assert "'Authorization: Bearer <token>'" in detail and "the application gave you" in detail
    assert "webhooks." not in detail and "OUTBOX" not in detail
    assert answer["WWW-Authenticate"].startswith("Bearer")
    # The application's developers find the ways in in the log.
    assert f"GET {ENDPOINTS} has no tenant" in caplog.text
    assert "webhooks.portal_token()" in caplog.text and "webhooks.portal_url()" in caplog.text


def test_a_token_made_with_another_secret_key_says_so_in_the_log_only(caplog):
    caplog.set_level("INFO", logger="django_outbox.portal")
    with override_settings(SECRET_KEY="another-secret-key-" + "x" * 40):
        token = webhooks.portal_token("acme")
    detail = problem(Client().get(ENDPOINTS, headers=bearer(token)), 401)["detail"]
    assert "is not valid" in detail and "SECRET_KEY" not in detail
    assert "another SECRET_KEY" in caplog.text


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("Basic dXNlcjpwYXNz", "must be 'Bearer <token>'"),
        ("Bearer ", "must be 'Bearer <token>'"),
        ("Bearer not-a-token", "is not valid"),
    ],
)
def test_a_bad_authorization_header_is_401(header, says):
    assert (
        says in problem(Client().get(ENDPOINTS, headers={"Authorization": header}), 401)["detail"]
    )


def test_a_changed_token_is_401_and_never_falls_back_to_the_session():
    token = webhooks.portal_token("acme")
    client = Client()
    client.get(webhooks.portal_url("acme"))  # a session for acme
    changed = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert "is not valid" in problem(client.get(ENDPOINTS, headers=bearer(changed)), 401)["detail"]
    assert client.get(ENDPOINTS).status_code == 200


def test_an_expired_token_is_401_saying_when_it_expired():
    token = webhooks.portal_token("acme", expires_in=1)
    assert Client().get(ENDPOINTS, headers=bearer(token)).status_code == 200
    time.sleep(2.1)
    assert "expired at" in problem(Client().get(ENDPOINTS, headers=bearer(token)), 401)["detail"]


def test_a_link_is_not_a_bearer_token():
    link = webhooks.portal_url("acme")
    token = link.rstrip("/").rsplit("/", 1)[1]
    assert "is not valid" in problem(Client().get(ENDPOINTS, headers=bearer(token)), 401)["detail"]


@pytest.mark.parametrize(
    ("tenant", "expires_in", "says"),
    [
        ("", 60, "tenant must be a string of 1 to 255"),
        (None, 60, "tenant must be"),
        ("x" * 256, 60, "tenant must be"),
        ("acme", 0, "expires_in must be"),
        ("acme", -5, "expires_in must be"),
        ("acme", True, "expires_in must be"),
        ("acme", "1h", "expires_in must be"),
        ("acme", 400 * 86400, "at most 366 days"),
    ],
)
def test_tokens_and_links_refuse_bad_arguments(tenant, expires_in, says):
    for make in (webhooks.portal_token, webhooks.portal_url):
        with pytest.raises(ValueError, match=says):
            make(tenant, expires_in=expires_in)


def test_a_link_opens_a_session_and_the_token_leaves_the_address():
    webhooks.create_endpoint(URL, tenant="acme")
    webhooks.create_endpoint(URL, tenant="globex")
    client = Client()
    link = webhooks.portal_url("acme", base="https://app.example.com")
    assert link.startswith("https://app.example.com/webhooks/open/")
    opened = client.get(link.removeprefix("https://app.example.com"))
    assert opened.status_code == 302 and opened["Location"] == "/webhooks/"
    assert opened["Referrer-Policy"] == "no-referrer"
    listed = client.get(ENDPOINTS).json()["data"]
    assert {row["url"] for row in listed} == {URL} and len(listed) == 1
    assert Endpoint.objects.get(pk=listed[0]["id"]).tenant == "acme"


def test_an_expired_or_changed_link_is_a_page_for_people_and_opens_nothing(caplog):
    caplog.set_level("INFO", logger="django_outbox.portal")
    client = Client()
    link = webhooks.portal_url("acme", expires_in=1)
    time.sleep(2.1)
    good = webhooks.portal_url("acme")
    for opened, title in [
        (client.get(link), "This link has expired"),
        (client.get(good[:-3] + "xx/"), "This link does not work"),
    ]:
        # A person clicked it: an HTML page in their terms, not JSON about the signing key.
        page = opened.content.decode()
        assert opened.status_code == 403 and opened["Content-Type"].startswith("text/html")
        assert f"<h1>{title}</h1>" in page and "open its webhooks page again" in page
        assert "SECRET_KEY" not in page and "token" not in page
    assert "a link was refused: The token expired at" in caplog.text
    assert "another SECRET_KEY" in caplog.text
    problem(client.get(ENDPOINTS), 401)


def test_the_session_of_a_link_lasts_portal_session_seconds():
    client = Client()
    with override_settings(OUTBOX={"WEBHOOKS": {"PORTAL_SESSION_SECONDS": 1}}):
        client.get(webhooks.portal_url("acme"))
    assert client.get(ENDPOINTS).status_code == 200
    time.sleep(1.1)
    problem(client.get(ENDPOINTS), 401)


@override_settings(OUTBOX=HOST_FUNCTION)
def test_the_host_function_names_the_tenant_and_csrf_applies_to_it():
    alice = User.objects.create_user("alice", password="x")
    client = Client(enforce_csrf_checks=True)
    problem(client.get(ENDPOINTS), 401)  # not signed in: the function says None
    client.force_login(alice)
    assert client.get(ENDPOINTS).status_code == 200
    refused = problem(client.post(ENDPOINTS, {"url": URL}, content_type="application/json"), 403)
    assert "CSRF" in refused["detail"] and not Endpoint.objects.exists()
    client.cookies["csrftoken"] = CSRF
    created = client.post(
        ENDPOINTS, {"url": URL}, content_type="application/json", headers={"X-CSRFToken": CSRF}
    )
    assert created.status_code == 201, created.content
    assert Endpoint.objects.get().tenant == "alice"


def test_a_link_session_needs_csrf_for_unsafe_methods():
    client = Client(enforce_csrf_checks=True)
    client.get(webhooks.portal_url("acme"))
    answer = client.post(ENDPOINTS, {"url": URL}, content_type="application/json")
    assert "CSRF" in problem(answer, 403)["detail"]
    assert not Endpoint.objects.exists()


def test_a_bearer_token_needs_no_csrf():
    api = Api("acme", Client(enforce_csrf_checks=True))
    assert api.post("endpoints/", {"url": URL}).status_code == 201


@override_settings(OUTBOX={"WEBHOOKS": {"PORTAL_TENANT": "tests.portal.wrong_tenant_for"}})
def test_a_host_function_that_returns_no_string_is_a_configuration_error():
    with pytest.raises(ImproperlyConfigured, match="returned 42"):
        Client().get(ENDPOINTS)


@override_settings(OUTBOX={"WEBHOOKS": {"PORTAL_TENANT": "tests.portal.missing"}})
def test_a_host_function_that_does_not_import_is_a_configuration_error():
    with pytest.raises(ImproperlyConfigured, match="cannot be imported"):
        Client().get(ENDPOINTS)


def test_a_wrong_portal_setting_is_a_system_check_error():
    from django_outbox import conf

    errors = conf.settings_errors({"WEBHOOKS": {"PORTAL_TENANT": "not a path", "PORTAL_RATE": 0}})
    assert any("PORTAL_TENANT" in e and "dotted path" in e for e in errors)
    assert any("PORTAL_RATE" in e for e in errors)
