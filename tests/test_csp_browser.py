"""The admin's and the portal's pages under a strict Content-Security-Policy (no
'unsafe-inline'), in headless Chromium: the browser refuses nothing, and the pages are
styled by their stylesheets (a failed job's status is still white on red)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import override_settings

from django_outbox import webhooks, workflows
from django_outbox.models import Delivery, Endpoint, Message, Workflow
from tests import tasks
from tests.csp import STRICT
from tests.test_admin_browser import a_failed_job, log_in, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def strict():
    with override_settings(TEST_STRICT_CSP=True):
        yield


@pytest.fixture
def refused(page):  # noqa: F811
    """What the browser said it refused, page by page."""
    seen: list[str] = []
    page.on(
        "console",
        lambda message: (
            seen.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text
            else None
        ),
    )
    return seen


def some_of_everything() -> dict[str, Any]:
    failed = a_failed_job()
    tasks.noop.enqueue()
    workflows.chain(workflows.step(tasks.noop), workflows.step(tasks.noop)).enqueue()
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", tenant="acme")
    message = webhooks.send("invoice.paid", {"id": 7}, tenant="acme")
    return {
        "failed": failed,
        "endpoint": endpoint,
        "message": message,
        "delivery": Delivery.objects.get(message=message),
        "workflow": Workflow.objects.get(),
    }


def test_every_admin_and_portal_page_serves_under_a_strict_policy(
    page,  # noqa: F811
    live_server,
    strict,
    refused,
):
    connection.close()  # a fresh connection (see test_portal_browser.py)
    rows = some_of_everything()
    admin = "/admin/django_outbox"
    log_in(page, live_server, "/admin/")
    pages = [
        f"{admin}/dashboard/",
        f"{admin}/job/",
        f"{admin}/job/?status__exact=failed",
        f"{admin}/job/{rows['failed'].pk}/change/",
        f"{admin}/workflow/",
        f"{admin}/workflow/{rows['workflow'].pk}/change/",
        f"{admin}/endpoint/",
        f"{admin}/endpoint/{rows['endpoint'].pk}/change/",
        f"{admin}/message/",
        f"{admin}/message/{rows['message'].pk}/change/",
        f"{admin}/delivery/",
        f"{admin}/delivery/{rows['delivery'].pk}/change/",
        f"{admin}/attempt/",
        f"{admin}/worker/",
        f"{admin}/queuestate/",
        f"{admin}/schedulestate/",
    ]
    for path in pages:
        response = page.goto(live_server.url + path)
        assert response is not None and response.status == 200, path
        assert response.headers["content-security-policy"] == STRICT
    assert refused == []
    page.goto(f"{live_server.url}{admin}/job/?status__exact=failed")
    badge = page.locator(".outbox-status").first
    assert badge.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(180, 35, 24)"
    assert badge.evaluate("e => getComputedStyle(e).color") == "rgb(255, 255, 255)"

    page.goto(live_server.url + webhooks.portal_url("acme"))
    portal = [
        "/webhooks/",
        f"/webhooks/endpoints/{Endpoint.objects.get().pk}/",
        f"/webhooks/deliveries/{rows['delivery'].pk}/",
        "/webhooks/messages/",
        f"/webhooks/messages/{Message.objects.get().uid}/",
        "/webhooks/event-types/",
        "/webhooks/endpoints/new/",
    ]
    for path in portal:
        response = page.goto(live_server.url + path)
        assert response is not None and response.status == 200, path
    button = page.locator("button, .button").first
    if button.count():
        assert button.evaluate("e => getComputedStyle(e).borderRadius") == "6px"
    assert refused == []
