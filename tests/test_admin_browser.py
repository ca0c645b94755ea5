"""The admin in a real browser: headless Chromium (Debian's package) driven by Playwright,
against a live server, at a laptop's 1400 x 900.

It takes screenshots of the dashboard, a job list, a failed job and a delivery: into the
test's temporary directory, or into ``docs/img/`` (the one the docs show) when run by
``make screenshots``, which sets OUTBOX_SCREENSHOTS to that directory, so a plain test run
leaves the tree as it was."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import django
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from django_outbox import webhooks, workflows
from django_outbox.models import Attempt, Delivery, Job, JobStatus, ScheduleState, Worker
from tests import tasks

CHROMIUM = os.environ.get("OUTBOX_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("OUTBOX_REQUIRE_SERVICES") == "1"
#: A laptop's screen: what the lists must fit without a horizontal scroll.
LAPTOP = {"width": 1400, "height": 900}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(monkeypatch):
    if django.VERSION < (6, 0) and connection.vendor != "sqlite":
        # Chromium costs CI more CPU than any other test: the Django 5.2 row drives the
        # pages on SQLite, the 6.1 row on every database (the pages' queries are the same
        # under both versions, and the tests without a browser run everywhere).
        pytest.skip("browser tests: the Django 5.2 row runs them on SQLite only")
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
            yield browser.new_page(viewport=LAPTOP)
        finally:
            browser.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    folder = Path(os.environ.get("OUTBOX_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_in(page, live_server, then: str) -> None:
    User.objects.create_superuser("admin", "admin@example.com", "secret-pw")
    page.goto(f"{live_server.url}/admin/login/?next={then}")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}{then}")


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


def test_the_dashboard_live_in_a_browser(page, live_server, screenshots):
    for minutes_ago in range(0, 40, 3):
        finished(JobStatus.SUCCEEDED, 5 + minutes_ago % 7, minutes_ago)
    finished(JobStatus.FAILED, 2, 4)
    Job.objects.bulk_create(
        Job(task_path="shop.tasks.send_receipt", run_at=timezone.now()) for _ in range(4)
    )
    Job.objects.bulk_create(
        [Job(task_path="shop.tasks.render_page", status=JobStatus.WAITING)] * 3
        + [Job(task_path="shop.tasks.sync_stock", status=JobStatus.HELD, limit_key="k")]
    )
    log_in(page, live_server, "/admin/django_outbox/dashboard/")
    page.wait_for_selector("#outbox-queues")

    # The numbers are the database's; a configured queue without jobs has its line too.
    row = page.locator('tr[data-queue="default"]')
    assert row.locator(".queued").inner_text() == "4"
    assert row.locator(".failed").inner_text() == "2"
    assert (row.locator(".waiting").inner_text(), row.locator(".held").inner_text()) == ("3", "1")
    assert page.locator('tr[data-queue="emails"] .queued').inner_text() == "0"
    total = Job.objects.exclude(finished_at=None).count()
    assert page.locator("svg.outbox-chart").get_attribute("data-total") == str(total)
    chart = page.locator("svg.outbox-chart").bounding_box()
    card = page.locator("svg.outbox-chart").locator("xpath=..").bounding_box()
    assert chart["width"] > 0.9 * card["width"], (chart, card)  # the whole card, not 600 px
    assert "TimeoutError: the mail server did not answer" in page.inner_text("#outbox-failures")
    assert_no_horizontal_scroll(page, "the dashboard")
    page.screenshot(path=str(screenshots / "dashboard.png"), full_page=True)
    assert (screenshots / "dashboard.png").stat().st_size > 10_000
    width = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    # At a phone's width the tables scroll within their cards, never the page.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    queues = page.locator("#outbox-queues")
    assert queues.evaluate("card => card.scrollWidth > card.clientWidth")  # it scrolls
    page.screenshot(path=str(screenshots / "dashboard-390.png"), full_page=True)
    page.set_viewport_size(width)

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


def a_failed_job() -> Job:
    """A receipt job that failed its last attempt two seconds ago, with its traceback."""
    now = timezone.now()
    return Job.objects.create(
        task_path="shop.tasks.send_receipt",
        args=[1042],
        status=JobStatus.FAILED,
        attempts=3,
        max_attempts=3,
        finished_at=now,
        last_attempted_at=now - timedelta(seconds=2),
        errors=[
            {
                "exception_class_path": "builtins.TimeoutError",
                "traceback": "Traceback (most recent call last):\n  ...\n"
                "TimeoutError: the mail server did not answer",
            }
        ],
    )


def test_a_failed_jobs_page_retries_it_with_one_button(page, live_server, screenshots):
    job = a_failed_job()
    log_in(page, live_server, f"/admin/django_outbox/job/{job.pk}/change/")
    button = page.locator('input[name="_retry"]').first
    assert button.is_visible() and button.get_attribute("value") == "Retry now"
    page.screenshot(path=str(screenshots / "job.png"))
    button.click()
    page.wait_for_selector(".messagelist")
    assert f"Job #{job.pk} is queued to run now" in page.inner_text(".messagelist")
    assert page.url.endswith(f"/admin/django_outbox/job/{job.pk}/change/")
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.max_attempts == 4
    assert page.locator('input[name="_retry"]').count() == 0  # queued to run now: no button


def laptop_rows() -> None:
    """A row or two in every list, with values as long as real ones get."""
    now = timezone.now()
    error = (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='smtp.mail.example.com',"
        " port=443): Max retries exceeded with url: /v3/messages (Caused by NewConnectionError"
        "('<urllib3.connection.HTTPSConnection object at 0x7f3a>: Failed to establish a new "
        "connection: [Errno 111] Connection refused'))"
    )
    for pk, status, queue in (
        (1_234_567, JobStatus.FAILED, "reports"),
        (1_234_568, JobStatus.QUEUED, "default"),
        (1_234_569, JobStatus.RUNNING, "notifications-high-priority"),
        (1_234_570, JobStatus.SUCCEEDED, "default"),
    ):
        Job.objects.create(
            pk=pk,
            task_path="myshop.billing.tasks.send_overdue_invoice_reminder_email",
            queue=queue,
            status=status,
            attempts=3 if status == JobStatus.FAILED else 1,
            max_attempts=10,
            priority=-20,
            run_at=now + timedelta(minutes=90) if status == JobStatus.QUEUED else now,
            started_at=now - timedelta(seconds=95),
            finished_at=now if status in (JobStatus.FAILED, JobStatus.SUCCEEDED) else None,
            errors=[{"exception_class_path": "ConnectionError", "traceback": f"Tb\n{error}"}]
            if status == JobStatus.FAILED
            else [],
        )
    for n in range(2):
        Worker.objects.create(
            id=f"web-worker-{n}.eu-west-1.prod.internal:{40_000 + n}:a1b2c3",
            hostname=f"web-worker-{n}.eu-west-1.prod.internal",
            pid=40_000 + n,
            queues=["default", "emails", "reports", "webhooks", "notifications-high-priority"],
            concurrency=32,
            started_at=now - timedelta(days=3),
            stopped_at=now if n else None,
        )
    ScheduleState.objects.create(name="nightly-invoice-reminders", last_tick=now)
    workflows.chain(workflows.step(tasks.add, 1, 2), workflows.step(tasks.double)).enqueue(
        "monthly invoices for every customer of the European shops, with reminders"
    )
    endpoint = webhooks.create_endpoint(
        "https://hooks.customer-with-a-long-name.example.com/integrations/outbox/orders/incoming",
        tenant="customer-with-a-long-name-gmbh",
        event_types=["order.placed", "order.payment.captured", "order.refund.*"],
    )
    broken = webhooks.create_endpoint(
        "https://hooks.other.example.com/in", tenant="customer-with-a-long-name-gmbh"
    )
    webhooks.disable(
        broken, "410 Gone: the receiver said it no longer exists (attempt 14, 3 days failing)"
    )
    message = webhooks.send(
        "order.payment.captured",
        {"order": 1042},
        tenant="customer-with-a-long-name-gmbh",
        idempotency_key="order-1042-payment-captured-2024-11-30T12:00:00Z-attempt-2",
    )
    delivery = message.deliveries.get(endpoint=endpoint)
    for number, code in ((1, 503), (2, None)):
        Attempt.objects.create(
            delivery=delivery,
            number=number,
            started_at=now - timedelta(minutes=3 - number),
            duration=15.0,
            status_code=code,
            error_class="" if code else "httpx.ConnectTimeout",
            error_message=error,
        )


#: What the browser measures on a list: the table against the box it scrolls in, and each
#: row's height against its height when nothing in it may wrap.
MEASURE_LIST = """() => {
  const table = document.querySelector('#result_list');
  const box = table.closest('.results');
  const rows = [...table.querySelectorAll('tbody tr')];
  const heights = rows.map(r => r.getBoundingClientRect().height);
  const style = document.createElement('style');
  style.textContent = '#result_list * { white-space: nowrap !important; }';
  document.head.append(style);
  const unwrapped = rows.map(r => r.getBoundingClientRect().height);
  style.remove();
  return {
    scrollWidth: box.scrollWidth,
    clientWidth: box.clientWidth,
    heights: heights,
    unwrapped: unwrapped,
    columns: [...table.querySelectorAll('thead th')].map(
      th => `${th.innerText.trim()} ${Math.round(th.getBoundingClientRect().width)}`),
  };
}"""


def assert_no_horizontal_scroll(page, what: str) -> None:
    page_width = page.evaluate("document.documentElement.scrollWidth")
    assert page_width <= LAPTOP["width"], f"{what} is {page_width} px wide"


def test_every_list_fits_a_laptop_screen(page, live_server, settings, screenshots):
    settings.OUTBOX = settings.OUTBOX | {
        "SCHEDULES": {
            "nightly-invoice-reminders": {
                "task": "myshop.billing.tasks.send_overdue_invoice_reminder_email",
                "cron": "0 3 * * *",
                "timezone": "Europe/Amsterdam",
            }
        }
    }
    laptop_rows()
    log_in(page, live_server, "/admin/django_outbox/job/")
    lists = [
        "job",
        "worker",
        "schedulestate",
        "endpoint",
        "message",
        "delivery",
        "attempt",
        "workflow",
    ]
    for model in lists:
        page.goto(f"{live_server.url}/admin/django_outbox/{model}/")
        seen = page.evaluate(MEASURE_LIST)
        assert seen["heights"], f"the {model} list shows no row"
        assert seen["scrollWidth"] <= seen["clientWidth"], (
            f"the {model} list is {seen['scrollWidth']} px wide in {seen['clientWidth']} px: "
            f"{seen['columns']}"
        )
        wrapped = [
            n
            for n, (h, one) in enumerate(zip(seen["heights"], seen["unwrapped"], strict=True))
            if h > one + 1
        ]
        assert not wrapped, f"rows {wrapped} of the {model} list wrap: {seen}"
        assert_no_horizontal_scroll(page, f"the {model} list")
        if model == "job":
            page.screenshot(path=str(screenshots / "jobs.png"))
    # Long text is cut, whole in its title.
    page.goto(f"{live_server.url}/admin/django_outbox/job/")
    cut = page.locator("td.field-last_error .outbox-cut").first
    assert "Connection refused" in (cut.get_attribute("title") or "")
    assert cut.evaluate("e => e.scrollWidth > e.clientWidth")  # shown with an ellipsis


BREADCRUMBS_STYLE = """() => {
  const crumbs = document.querySelector('nav .breadcrumbs');
  if (!crumbs) { return null; }
  const s = getComputedStyle(crumbs);
  const box = crumbs.getBoundingClientRect();
  return {
    tag: crumbs.tagName,
    background: s.backgroundColor,
    padding: s.padding,
    color: s.color,
    left: box.left,
    width: box.width,
    links: [...crumbs.querySelectorAll('a')].map(a => a.innerText.trim()),
  };
}"""


def test_our_pages_wear_the_admins_breadcrumbs(page, live_server):
    """On Django 5.2 and 6.1 alike (their markup differs: div, then ol), each of our pages
    has the breadcrumbs of a stock admin page: the same bar, the same colours."""
    job = Job.objects.create(task_path="shop.tasks.send_receipt", status=JobStatus.FAILED)
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("order.placed", {"order": 1})
    delivery = message.deliveries.get()
    attempt = Attempt.objects.create(
        delivery=delivery, number=1, started_at=timezone.now(), duration=0.1, status_code=500
    )
    log_in(page, live_server, "/admin/auth/user/")
    stock = page.evaluate(BREADCRUMBS_STYLE)
    assert stock and stock["background"] not in ("rgba(0, 0, 0, 0)", "transparent")
    pages = {
        "/admin/django_outbox/dashboard/": ["Home", "Outbox"],
        f"/admin/django_outbox/job/{job.pk}/change/": ["Home", "Outbox", "Jobs"],
        f"/admin/django_outbox/delivery/{delivery.pk}/change/": ["Home", "Outbox", "Deliveries"],
        f"/admin/django_outbox/attempt/{attempt.pk}/change/": ["Home", "Outbox", "Attempts"],
    }
    for path, links in pages.items():
        page.goto(f"{live_server.url}{path}")
        assert page.evaluate(BREADCRUMBS_STYLE) == stock | {"links": links}, path
    # The form of the "resend failed deliveries since…" action.
    page.goto(f"{live_server.url}/admin/django_outbox/endpoint/")
    page.check(f'input[name="_selected_action"][value="{endpoint.pk}"]')
    page.select_option('select[name="action"]', "recover")
    page.click('button[name="index"]')
    page.wait_for_selector('input[name="since"]')
    assert page.evaluate(BREADCRUMBS_STYLE) == stock | {"links": ["Home", "Outbox", "Endpoints"]}


def test_a_delivery_resent_shows_each_attempt_once_by_round(page, live_server, screenshots):
    webhooks.create_endpoint("https://hooks.example.com/orders", tenant="acme")
    message = webhooks.send("order.placed", {"order": 1042, "total": "12.00"}, tenant="acme")
    delivery = message.deliveries.get()
    now = timezone.now()
    for minutes_ago, number, code, error in (
        (30, 1, 503, ""),
        (29, 2, None, "no answer within 15 s"),
        (28, 3, 503, ""),
        (5, 1, 200, ""),  # resent: a new round, numbered from 1
    ):
        delivery.attempt_log.create(
            number=number,
            started_at=now - timedelta(minutes=minutes_ago),
            duration=0.2 if code else 15.0,
            status_code=code,
            succeeded=code == 200,
            error_class="" if code else "ReadTimeout",
            error_message=error,
        )
    Delivery.objects.filter(pk=delivery.pk).update(
        status="succeeded",
        attempts=1,
        next_attempt_at=None,
        last_attempt_at=now - timedelta(minutes=5),
        resent_at=now - timedelta(minutes=6),
        created_at=now - timedelta(minutes=31),
    )
    log_in(page, live_server, f"/admin/django_outbox/delivery/{delivery.pk}/change/")
    labels = page.locator("#attempts-group tbody th").all_inner_texts()
    assert labels == [
        "round 1, attempt 1",
        "round 1, attempt 2",
        "round 1, attempt 3",
        "round 2, attempt 1",
    ]
    assert "no answer within 15 s" in page.inner_text("#attempts-group")
    page.screenshot(path=str(screenshots / "delivery.png"), full_page=True)
    page.click("text=round 2, attempt 1")
    assert "Round 2, attempt 1 of delivery" in page.inner_text("#content")


def test_a_workflows_page_shows_its_steps_and_retries_it(
    page, live_server, screenshots, run_worker
):
    wf = workflows.Workflow(name="nightly report")
    fetch = wf.add(workflows.step(tasks.add, 2, 3))
    parse = wf.add(workflows.step(tasks.fails_for_good, "the export is empty"), after=[fetch])
    publish = wf.add(workflows.step(tasks.double, 4), after=[parse])
    wf.add(workflows.step(tasks.upstream_seen, "clean-up"), after=[publish], always=True)
    run = wf.enqueue()
    run_worker()
    log_in(page, live_server, f"/admin/django_outbox/workflow/{run.id}/change/")
    table = page.locator("table.outbox-steps")
    assert table.locator("tbody tr").count() == 4
    text = table.inner_text()
    assert "upstream failed" in text and "the export is empty" in text
    assert_no_horizontal_scroll(page, "a workflow's page")
    page.screenshot(path=str(screenshots / "workflow.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/django_outbox/workflow/")
    page.check(f'input[name="_selected_action"][value="{run.id}"]')
    page.select_option('select[name="action"]', "retry_workflows")
    page.click('button[name="index"]')
    assert "Steps to run again: 3." in page.inner_text(".messagelist")
    assert workflows.get(run.id).status == "running"


def test_a_held_jobs_page_says_why_it_waits_with_links(page, live_server, screenshots):
    """A sequence held by its failed job: the next job's page says so, links to the failed
    job, and the failed job's page offers to retry it."""
    Worker.objects.create(
        id="web-1:4242:ab12cd", hostname="web-1", pid=4242, queues=["default"], concurrency=8
    )
    for n in range(3):
        tasks.in_sequence.enqueue(1042, n)
    first, second, _third = Job.objects.order_by("id")
    from django_outbox.models import LimitKey

    Job.objects.filter(pk=first.pk).update(
        status=JobStatus.FAILED,
        attempts=3,
        finished_at=timezone.now(),
        errors=[{"exception_class_path": "builtins.RuntimeError", "traceback": "RuntimeError"}],
    )
    LimitKey.objects.filter(key="sequence:order-1042").update(held_by=first.pk)
    log_in(page, live_server, f"/admin/django_outbox/job/{second.pk}/change/")
    reasons = page.locator(".outbox-reasons")
    assert reasons.is_visible()
    assert "Its sequence 'order-1042' is held by a job that failed" in reasons.inner_text()
    page.screenshot(path=str(screenshots / "why_waiting.png"))
    reasons.locator("a").first.click()
    page.wait_for_url(f"{live_server.url}/admin/django_outbox/job/{first.pk}/change/")
    assert page.locator('input[name="_retry"]').first.is_visible()
    # The failed job's page says what it holds back, and offers to skip it, on a laptop
    # and on a phone.
    held_back = page.locator('[data-reason="holds_sequence"]')
    assert "It holds its sequence 'order-1042'" in held_back.inner_text()
    assert page.locator('input[name="_skip"]').first.is_visible()
    page.screenshot(path=str(screenshots / "job_holds_sequence.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    skip = page.locator('input[name="_skip"]').first
    box = skip.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert held_back.is_visible()
    page.screenshot(path=str(screenshots / "job_holds_sequence-390.png"), full_page=True)
    skip.click()
    page.wait_for_url(f"{live_server.url}/admin/django_outbox/job/{first.pk}/change/")
    assert "goes on without job #" in page.inner_text(".messagelist")
    second.refresh_from_db()
    assert second.status == JobStatus.QUEUED
