"""The portal in a real browser (headless Chromium, Playwright), against a live server,
a real receiver and a webhook worker: open a portal link, add an endpoint with the
keyboard, send a test event, see its attempt, rotate the secret.

Screenshots go to the test's temporary directory, or to ``docs/img/`` when
OUTBOX_SCREENSHOTS names it (``make screenshots``)."""

from __future__ import annotations

import pytest

from django_outbox import webhooks
from django_outbox.models import Endpoint
from tests.conftest import wait_until
from tests.test_admin_browser import page, screenshots  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_customer_adds_an_endpoint_tests_it_sees_the_attempt_and_rotates_the_secret(
    page,  # noqa: F811
    screenshots,  # noqa: F811
    live_server,
    receiver,
    webhook_worker,
):
    webhook_worker()
    page.goto(live_server.url + webhooks.portal_url("acme"))
    assert page.url == f"{live_server.url}/webhooks/"  # the token has left the address
    assert page.locator("h1").inner_text() == "Endpoints"

    # With the keyboard: the skip link first, then the way to the form.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.get_by_role("link", name="Add an endpoint").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/endpoints/new/")
    page.get_by_label("URL").fill(receiver.url("/in"))
    page.get_by_label("Description").fill("Orders")
    page.get_by_label("Description").press("Enter")  # submits the form
    page.wait_for_selector("#secret")
    secret = page.locator("#secret").inner_text().strip()
    endpoint = Endpoint.objects.get()
    assert secret == endpoint.secret and endpoint.tenant == "acme"

    page.get_by_role("button", name="Send a test event").click()
    page.wait_for_selector("text=A webhook.test event is on its way")
    wait_until(lambda: receiver.received, what="the test event")
    arrived = receiver.received[0]
    assert webhooks.verify(arrived.headers, arrived.body, secret)["type"] == "webhook.test"

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
    page.screenshot(path=str(screenshots / "portal-endpoint.png"), full_page=True)

    page.goto(f"{live_server.url}/webhooks/")
    assert "100% of 1" in page.locator("tbody tr").first.inner_text()
    page.screenshot(path=str(screenshots / "portal-endpoints.png"))
