"""The dashboard in a real browser: headless Chromium (Debian's package) driven by
Playwright, against a live server.

It takes a screenshot of the dashboard: into the test's temporary directory, or into
``docs/img/`` (the one the docs show) when run by ``make screenshots``, which sets
OUTBOX_SCREENSHOTS to that directory, so a plain test run leaves the tree as it was."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.models import Job, JobStatus

CHROMIUM = os.environ.get("OUTBOX_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(monkeypatch):
    # Playwright's sync API runs an event loop on this thread; the ORM calls the test makes
    # between browser steps are still plain synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        if REQUIRED:
            raise
        pytest.skip(f"Playwright is not installed ({exc})")
    if not shutil.which(CHROMIUM):
        if REQUIRED:
            pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 1400})
        finally:
            browser.close()


def finished(status: str, count: int, minutes_ago: float = 0) -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    Job.objects.bulk_create(
        Job(
            task_path="shop.tasks.send_receipt",
            status=status,
            enqueued_at=at - timedelta(seconds=3),
            run_at=at - timedelta(seconds=2),
            last_attempted_at=at - timedelta(seconds=1),
            finished_at=at,
            attempts=1,
            errors=[{"traceback": "Traceback\nTimeoutError: the mail server did not answer"}]
            if status == JobStatus.FAILED
            else [],
        )
        for _ in range(count)
    )


def test_the_dashboard_live_in_a_browser(page, live_server, tmp_path):
    User.objects.create_superuser("admin", "admin@example.com", "secret-pw")
    for minutes_ago in range(0, 40, 3):
        finished(JobStatus.SUCCEEDED, 5 + minutes_ago % 7, minutes_ago)
    finished(JobStatus.FAILED, 2, 4)
    Job.objects.bulk_create(
        Job(task_path="shop.tasks.send_receipt", run_at=timezone.now()) for _ in range(4)
    )

    page.goto(f"{live_server.url}/admin/login/?next=/admin/django_outbox/dashboard/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#outbox-queues")

    # The numbers are the database's.
    row = page.locator('tr[data-queue="default"]')
    assert row.locator(".queued").inner_text() == "4"
    assert row.locator(".failed").inner_text() == "2"
    total = Job.objects.exclude(finished_at=None).count()
    assert page.locator("svg.outbox-chart").get_attribute("data-total") == str(total)
    assert "TimeoutError: the mail server did not answer" in page.inner_text("#outbox-failures")
    screenshots = Path(os.environ.get("OUTBOX_SCREENSHOTS") or tmp_path)
    screenshots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshots / "dashboard.png"), full_page=True)
    assert (screenshots / "dashboard.png").stat().st_size > 10_000

    # Jobs that finish now show up in the chart at the next refresh, without a reload.
    finished(JobStatus.SUCCEEDED, 25)
    page.wait_for_function(
        f"document.querySelector('svg.outbox-chart').dataset.total === '{total + 25}'",
        timeout=12_000,
    )

    # Retry a failed job from its list: it is queued again.
    failed = Job.objects.filter(status=JobStatus.FAILED).first()
    assert failed is not None
    page.goto(f"{live_server.url}/admin/django_outbox/job/?status__exact=failed")
    page.check(f'input[name="_selected_action"][value="{failed.pk}"]')
    page.select_option('select[name="action"]', "retry_now")
    page.click('button[name="index"]')
    assert "Jobs queued to run now: 1." in page.inner_text(".messagelist")
    failed.refresh_from_db()
    assert failed.status == JobStatus.QUEUED
    page.screenshot(path=str(screenshots / "jobs.png"))

    # A delivery's page: its message, its endpoint, and every attempt.
    webhooks.create_endpoint("https://hooks.example.com/orders", tenant="acme")
    message = webhooks.send("order.placed", {"order": 1042, "total": "12.00"}, tenant="acme")
    delivery = message.deliveries.get()
    now = timezone.now()
    for number, code, error in ((1, 503, ""), (2, None, "no answer within 15 s"), (3, 200, "")):
        delivery.attempt_log.create(
            number=number,
            started_at=now - timedelta(minutes=10 - number),
            duration=0.2 if code else 15.0,
            status_code=code,
            succeeded=code == 200,
            error_class="" if code else "ReadTimeout",
            error_message=error,
        )
    page.goto(f"{live_server.url}/admin/django_outbox/delivery/{delivery.pk}/change/")
    assert "no answer within 15 s" in page.inner_text("body")
    page.screenshot(path=str(screenshots / "delivery.png"), full_page=True)
