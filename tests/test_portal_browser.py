"""The portal in a real browser (headless Chromium, Playwright), against a live server,
a real receiver and a webhook worker, with an event-type catalogue declared: open a portal
link, read the event types, add an endpoint with the keyboard (picking a type by its
checkbox, with a header of its own), send a test event, see its attempt, rotate the secret.

Screenshots go to the test's temporary directory, or to ``docs/img/`` when
OUTBOX_SCREENSHOTS names it (``make screenshots``)."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_outbox import webhooks
from django_outbox.models import Endpoint
from tests.conftest import wait_until
from tests.test_admin_browser import page, screenshots  # noqa: F401 (fixtures)
from tests.test_webhook_catalogue import CATALOGUE, outbox

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_customer_adds_an_endpoint_tests_it_sees_the_attempt_and_rotates_the_secret(
    page,  # noqa: F811
    screenshots,  # noqa: F811
    live_server,
    receiver,
    webhook_worker,
):
    # A fresh connection: in CI's PostgreSQL and MariaDB runs this test's first statement
    # met a connection an earlier test had cut ("terminating connection due to
    # administrator command", "Lost connection to server"), as the dashboard's did.
    connection.close()
    with outbox(EVENT_TYPES=CATALOGUE):  # the live server and the worker run in this process
        _a_customer_at_work(page, screenshots, live_server, receiver, webhook_worker)


def _a_customer_at_work(page, screenshots, live_server, receiver, webhook_worker):  # noqa: F811
    webhook_worker()
    page.goto(live_server.url + webhooks.portal_url("acme"))
    assert page.url == f"{live_server.url}/webhooks/"  # the token has left the address
    assert page.locator("h1").inner_text() == "Endpoints"

    # With the keyboard: the skip link first.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"

    # The event types the application sends, from the navigation.
    navigation = page.get_by_role("navigation", name="Portal")
    navigation.get_by_role("link", name="Event types").click()
    page.wait_for_url("**/webhooks/event-types/")
    assert page.locator(".event-type h2").all_inner_texts() == sorted(CATALOGUE)
    paid = page.locator("section", has=page.get_by_role("heading", name="invoice.paid"))
    assert '"amount": "12.00"' in paid.locator("pre").first.inner_text()
    paid.get_by_text("JSON Schema").click()  # opens the schema
    assert '"required": [' in paid.locator("details pre").inner_text()
    page.screenshot(path=str(screenshots / "portal-event-types.png"), full_page=True)

    # Then the way to the form, and the form, with the keyboard.
    navigation.get_by_role("link", name="Endpoints").click()
    page.get_by_role("link", name="Add an endpoint").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/endpoints/new/")
    page.get_by_label("URL").fill(receiver.url("/in"))
    page.get_by_label("Description").fill("Orders")

    def focused() -> str:
        return page.evaluate("document.activeElement.value || document.activeElement.textContent")

    page.keyboard.press("Tab")  # from the description to the first event type
    assert focused() == "invoice.created"
    page.keyboard.press("Tab")
    assert focused() == "invoice.paid"
    page.keyboard.press("Space")
    assert page.get_by_role("checkbox", name="invoice.paid").is_checked()
    assert not page.get_by_role("checkbox", name="invoice.created").is_checked()
    page.keyboard.press("Tab")
    assert focused() == "user.deleted"
    page.keyboard.press("Tab")  # the link to the event types page, under the checkboxes
    assert focused() == "What each event type holds"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "id_headers"
    page.keyboard.type("X-Api-Key: 4f2a9c")
    page.get_by_label("Description").press("Enter")  # submits the form
    page.wait_for_selector("#secret")
    secret = page.locator("#secret").inner_text().strip()
    endpoint = Endpoint.objects.get()
    assert secret == endpoint.secret and endpoint.tenant == "acme"
    assert endpoint.event_types == ["invoice.paid"]
    assert endpoint.headers == {"X-Api-Key": "4f2a9c"}
    assert page.locator("code.header").inner_text() == "X-Api-Key: 4f2a9c"

    page.get_by_role("button", name="Send a test event").click()
    page.wait_for_selector("text=A webhook.test event is on its way")
    wait_until(lambda: receiver.received, what="the test event")
    arrived = receiver.received[0]
    assert webhooks.verify(arrived.headers, arrived.body, secret)["type"] == "webhook.test"
    assert arrived.headers["x-api-key"] == "4f2a9c"

    def delivered() -> bool:
        page.reload()
        return page.locator("td .badge", has_text="succeeded").count() == 1

    wait_until(delivered, what="the delivery to show as succeeded")
    page.locator("a", has_text=":").first.click()  # the delivery's time
    page.wait_for_selector(".attempt")
    assert "HTTP 200" in page.locator(".attempt").first.inner_text()
    page.screenshot(path=str(screenshots / "portal-delivery.png"), full_page=True)

    page.go_back()
    page.get_by_label("Old secret keeps signing for").select_option("3600")
    page.get_by_role("button", name="Rotate the secret").click()
    page.wait_for_selector("text=The new signing secret")
    rotated = page.locator("#secret").inner_text().strip()
    endpoint.refresh_from_db()
    assert rotated == endpoint.secret != secret and endpoint.previous_secret == secret
    # Post/redirect/get: the address is the endpoint's page, not the form's.
    assert page.url.endswith(f"/webhooks/endpoints/{endpoint.pk}/?done=rotated")
    page.screenshot(path=str(screenshots / "portal-endpoint.png"), full_page=True)
    page.reload()  # repeats no rotation, and the secret is not shown again
    assert page.locator("#secret").count() == 0
    endpoint.refresh_from_db()
    assert endpoint.secret == rotated

    page.goto(f"{live_server.url}/webhooks/")
    assert "100% of 1" in page.locator("tbody tr").first.inner_text()
    page.screenshot(path=str(screenshots / "portal-endpoints.png"))


def test_a_link_that_expired_is_a_page_in_the_customers_terms(
    page,  # noqa: F811
    screenshots,  # noqa: F811
    live_server,
):
    connection.close()
    link = webhooks.portal_url("acme", expires_in=1)
    time.sleep(2.1)  # expiries are whole seconds
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 844})
        answer = page.goto(live_server.url + link)
        assert answer is not None and answer.status == 403
        assert page.locator("h1").inner_text() == "This link has expired"
        said = page.locator("main").inner_text()
        assert "open its webhooks page again" in said
        assert "SECRET_KEY" not in said and "token" not in said.lower()
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(screenshots / f"portal-link-expired-{width}.png"))
