"""The portal's pages with Django's test client: forms, their errors, CSRF, the
frame-ancestors header, delivery health. tests/test_portal_browser.py drives them in
Chromium."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, EndpointHour, Job
from tests.test_webhook_catalogue import outbox

pytestmark = pytest.mark.django_db(transaction=True)

URL = "https://hooks.example.com/in"
CSRF = "a" * 32


@pytest.fixture
def browser() -> Client:
    """A client signed in to acme's portal by a link, sending the CSRF token."""
    client = Client(enforce_csrf_checks=True)
    client.get(webhooks.portal_url("acme"))
    client.cookies["csrftoken"] = CSRF
    return client


def post(client: Client, path: str, data: dict | None = None):
    return client.post(path, {"csrfmiddlewaretoken": CSRF, **(data or {})})


def followed(client: Client, answer):
    """The page a POST's 303 (post/redirect/get) leads to, fetched as a browser does."""
    assert answer.status_code == 303, answer.status_code
    return client.get(answer["Location"])


def test_without_a_tenant_the_portal_says_how_to_get_in():
    answer = Client().get("/webhooks/")
    page = answer.content.decode()
    assert answer.status_code == 401 and "<h1>Not signed in</h1>" in page
    assert "open its webhooks page again" in page
    # Nothing of the application's code, nor of tokens, for the customer who sees it.
    assert "webhooks." not in page and "Bearer" not in page and "OUTBOX" not in page


def test_a_page_title_names_the_tenant_and_ends_cleanly_without_one(browser):
    titles = [
        re.search(r"<title>(.*?)</title>", page.content.decode())[1]
        for page in (browser.get("/webhooks/"), Client().get("/webhooks/"))
    ]
    assert titles[0].endswith(" · acme")
    assert not titles[1].rstrip().endswith("·"), titles[1]


def test_adding_an_endpoint_shows_its_secret_once(browser):
    answer = post(
        browser, "/webhooks/endpoints/new/", {"url": URL, "event_types": "invoice.*, order.made"}
    )
    endpoint = Endpoint.objects.get()
    assert answer["Location"] == f"/webhooks/endpoints/{endpoint.pk}/?done=added"
    assert (endpoint.tenant, endpoint.event_types) == ("acme", ["invoice.*", "order.made"])
    shown = followed(browser, answer)
    assert endpoint.secret.encode() in shown.content and b"The endpoint was added." in shown.content
    # A reload of that page shows the secret no more, and adds no second endpoint.
    again = browser.get(answer["Location"])
    assert again.status_code == 200 and endpoint.secret.encode() not in again.content
    assert Endpoint.objects.count() == 1
    assert b"invoice.*" in browser.get("/webhooks/").content


def test_a_caller_by_bearer_token_gets_the_secret_in_the_answer_to_its_post():
    client = Client(headers={"Authorization": f"Bearer {webhooks.portal_token('acme')}"})
    answer = client.post("/webhooks/endpoints/new/", {"url": URL})
    # No session to carry it over a redirect: the page answers the POST itself.
    assert answer.status_code == 200
    assert Endpoint.objects.get().secret.encode() in answer.content


def test_a_refused_url_names_no_setting_of_the_application_and_the_log_does(browser, caplog):
    caplog.set_level("INFO", logger="django_outbox.portal")
    for url, says in [
        ("https://10.1.2.3/in", "10.1.2.3, a private address; webhooks go to public addresses"),
        ("http://hooks.example.com/in", "uses http://; webhooks need https://."),
    ]:
        with outbox(ALLOW_HTTP=False):
            page = post(browser, "/webhooks/endpoints/new/", {"url": url}).content.decode()
        assert says in page and "OUTBOX" not in page
    assert "unless OUTBOX['WEBHOOKS']['ALLOWED_NETWORKS'] allows it" in caplog.text
    assert "unless OUTBOX['WEBHOOKS']['ALLOW_HTTP'] is True" in caplog.text
    assert not Endpoint.objects.exists()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"url": "https://10.1.2.3/in"}, b"private address"),
        ({"url": "ftp://example.com/"}, b"not a valid"),
        ({"url": URL, "rate_limit": "fast"}, b"Must be a number"),
        ({"url": URL, "event_types": "a%b"}, b"is not an event type filter"),
        ({"url": URL, "timeout": "9999"}, b"timeout must be"),
    ],
)
def test_a_bad_form_is_shown_again_with_its_errors_and_saves_nothing(browser, data, says):
    answer = post(browser, "/webhooks/endpoints/new/", data)
    assert answer.status_code == 422 and says in answer.content
    assert b"Nothing was saved" in answer.content and not Endpoint.objects.exists()


def test_a_form_without_its_csrf_token_is_refused(browser):
    answer = browser.post("/webhooks/endpoints/new/", {"url": URL})
    assert answer.status_code == 403 and not Endpoint.objects.exists()


def test_editing_disabling_enabling_rotating_and_deleting(browser):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    path = f"/webhooks/endpoints/{endpoint.pk}/"
    saved = post(browser, path, {"url": URL + "/2", "description": "billing"})
    assert saved.status_code == 302 and saved["Location"] == path + "?done=saved"
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.description) == (URL + "/2", "billing")
    refused = post(browser, path, {"url": "https://10.0.0.1/"})
    assert refused.status_code == 422 and Endpoint.objects.get().url == URL + "/2"
    post(browser, path + "disable/")
    assert b"in the portal" in browser.get(path).content
    assert b"enable it first" in post(browser, path + "test/").content
    post(browser, path + "enable/")
    old = Endpoint.objects.get().secret
    rotated = post(browser, path + "rotate-secret/", {"grace_seconds": "3600"})
    new = Endpoint.objects.get()
    assert rotated["Location"] == path + "?done=rotated"
    assert new.secret != old and new.secret.encode() in followed(browser, rotated).content
    assert new.secret.encode() not in browser.get(rotated["Location"]).content
    assert Endpoint.objects.get().secret == new.secret  # the reload rotated nothing
    assert new.previous_secret_expires_at - timezone.now() <= timedelta(hours=1)
    assert post(browser, path + "delete/")["Location"] == "/webhooks/?done=deleted"
    assert not Endpoint.objects.exists()


def test_the_endpoint_page_shows_its_health_and_last_failures(browser):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    now = timezone.now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    EndpointHour.objects.create(endpoint=endpoint, hour=hour, attempts=4, succeeded=3)
    Attempt.objects.create(
        delivery=delivery, number=1, started_at=now, duration=0.1, status_code=503
    )
    Endpoint.objects.filter(pk=endpoint.pk).update(consecutive_failures=1)
    page = browser.get(f"/webhooks/endpoints/{endpoint.pk}/").content.decode()
    assert "75% of 4 attempts" in page and "HTTP 503" in page
    assert "75%" in browser.get("/webhooks/").content.decode()
    assert "1 in a row" in browser.get("/webhooks/").content.decode()
    Job.objects.all().delete()
    resent = post(browser, f"/webhooks/deliveries/{delivery.pk}/")
    assert resent["Location"].endswith("?done=resent")
    assert Delivery.objects.get().status == "pending"


def test_pages_may_be_framed_by_the_origins_of_the_setting(browser):
    answer = browser.get("/webhooks/")
    assert answer["Content-Security-Policy"] == "frame-ancestors 'self'"
    assert answer["X-Frame-Options"] == "SAMEORIGIN"
    origins = {"WEBHOOKS": {"PORTAL_FRAME_ANCESTORS": ["https://app.example.com"]}}
    with override_settings(OUTBOX=origins):
        framed = browser.get("/webhooks/")
    assert framed["Content-Security-Policy"] == "frame-ancestors 'self' https://app.example.com"
    assert "X-Frame-Options" not in framed


def test_every_form_field_has_a_label(browser):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    page = browser.get(f"/webhooks/endpoints/{endpoint.pk}/").content.decode()
    ids = re.findall(r'<(?:input|select|textarea)[^>]*\sid="([^"]+)"', page)
    assert ids and all(f'for="{i}"' in page for i in ids), ids


def test_messages_are_listed_newest_first_with_older_pages_and_read_with_payload(
    browser, monkeypatch
):
    from django_outbox.portal import pages

    monkeypatch.setattr(pages, "MAX_MESSAGES", 2)
    webhooks.create_endpoint(URL, tenant="acme")
    sent = [webhooks.send("invoice.paid", {"n": n}, tenant="acme") for n in range(3)]
    webhooks.send("invoice.paid", {"n": "theirs"}, tenant="globex")
    first = browser.get("/webhooks/messages/").content.decode()
    assert sent[2].uid in first and sent[1].uid in first and sent[0].uid not in first
    older = re.search(r'href="\?before=(\d+)', first)
    assert older is not None
    second = browser.get(f"/webhooks/messages/?before={older[1]}").content.decode()
    assert sent[0].uid in second and sent[1].uid not in second
    none = browser.get("/webhooks/messages/?event_type=order.made").content.decode()
    assert "No messages of order.made" in none
    page = browser.get(f"/webhooks/messages/{sent[0].uid}/").content.decode()
    assert "&quot;n&quot;: 0" in page and URL in page  # the payload, escaped
    theirs = webhooks.send("invoice.paid", {}, tenant="globex")
    assert browser.get(f"/webhooks/messages/{theirs.uid}/").status_code == 404


def test_recovering_redirects_so_a_reload_sends_nothing_again(browser):
    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    webhooks.send("invoice.paid", {"id": 1}, tenant="acme")
    Job.objects.all().delete()  # its attempts are over
    Delivery.objects.update(status=DeliveryStatus.FAILED)
    path = f"/webhooks/endpoints/{endpoint.pk}/"
    answer = post(browser, path + "recover/", {"since": "2000-01-01T00:00"})
    assert answer["Location"] == path + "?recovered=1"
    assert b"1 failed delivery sent again." in followed(browser, answer).content
    assert Delivery.objects.get().status == DeliveryStatus.PENDING
    jobs = Job.objects.count()
    browser.get(answer["Location"])  # a reload is a GET: nothing is queued again
    assert Job.objects.count() == jobs


def test_a_secret_not_fetched_soon_after_its_redirect_is_not_shown_later(browser, monkeypatch):
    from django_outbox.portal import pages

    endpoint = webhooks.create_endpoint(URL, tenant="acme")
    monkeypatch.setattr(pages, "SHOW_SECRET_SECONDS", -1)  # as if the redirect waited
    late = post(browser, f"/webhooks/endpoints/{endpoint.pk}/rotate-secret/", {})
    endpoint.refresh_from_db()
    assert endpoint.secret.encode() not in browser.get(late["Location"]).content


@override_settings(
    OUTBOX={"REDIS_ALIAS": "redis", "WEBHOOKS": {"PORTAL_RATE": 0.01, "PORTAL_BURST": 2}}
)
def test_pages_share_the_apis_rate_limit_and_say_when_to_come_back():
    # Tenants of this run only: Redis keeps buckets from one run to the next.
    run = uuid.uuid4().hex[:8]
    tenant = f"acme-{run}"
    client = Client()
    client.get(webhooks.portal_url(tenant))
    assert client.get("/webhooks/").status_code == 200
    api = client.get("/webhooks/api/v1/endpoints/")  # the same budget, by the session
    assert api.status_code == 200
    refused = client.get("/webhooks/messages/")
    assert refused.status_code == 429
    assert "Too many requests" in refused.content.decode()
    assert int(refused["Retry-After"]) >= 1
    assert "<html" in refused.content.decode()  # a page for people, not JSON
    assert Client().get(webhooks.portal_url(f"globex-{run}"), follow=True).status_code == 200
