"""Pausing and resuming queues: the API (django_outbox.queues), ``outbox_queue``, the admin's
actions and the dashboard's button, and what real workers do about a paused queue."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import Client, override_settings
from django.utils import timezone

import django_outbox
from django_outbox import queues
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job, JobStatus, QueueState
from django_outbox.wake import notify
from django_outbox.wake.notify import Coalescer
from django_outbox.worker import Worker
from django_outbox.worker.process import start_in_thread
from tests import tasks
from tests.conftest import stop_pool, wait_until
from tests.models import Execution
from tests.test_admin import act, messages_of, staff_user
from tests.test_admin_browser import (  # noqa: F401  (fixtures)
    assert_no_horizontal_scroll,
    log_in,
    page,
    screenshots,
)
from tests.test_wake import Recording, require

# -- the API ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_and_resume_say_whether_they_changed_anything():
    assert queues.paused() == {}
    assert queues.pause("emails") is True
    assert queues.pause("emails") is False  # paused already: its time is kept
    first = queues.paused()["emails"]
    assert queues.pause("emails") is False
    assert queues.paused() == {"emails": first}
    assert timezone.now() - first < timedelta(seconds=5)
    assert queues.paused(["emails", "default"]) == {"emails": first}
    assert queues.paused(["default"]) == {}
    assert queues.paused([]) == {}
    assert queues.resume("emails") is True
    assert queues.resume("emails") is False
    assert queues.resume("never-paused") is False
    assert queues.paused() == {}
    # The row stays, as running: the admin lists it, and it can be paused again.
    assert QueueState.objects.get(name="emails").paused_at is None
    assert django_outbox.pause("emails") is True  # the package's own names
    assert django_outbox.resume("emails") is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "error", "says"),
    [
        ("", ValueError, "must not be empty"),
        ("   ", ValueError, "must not be empty"),
        ("x" * 101, ValueError, "at most 100 characters; 'xxxxxxxxxxxxxxxxxxxx'… has 101"),
        (None, TypeError, "A queue's name is a str, not NoneType"),
        (7, TypeError, "A queue's name is a str, not int (7)"),
        (["emails"], TypeError, "not list"),
    ],
)
def test_a_bad_queue_name_is_refused_and_changes_nothing(name, error, says):
    for call in (queues.pause, queues.resume, django_outbox.pause):
        with pytest.raises(error, match=says.replace("(", r"\(").replace(")", r"\)")):
            call(name)
    with pytest.raises(error):
        queues.paused(["emails", name])
    assert not QueueState.objects.exists()


@pytest.mark.django_db
def test_a_name_of_100_characters_is_a_queue_name():
    assert queues.pause("q" * 100) is True
    assert list(queues.paused()) == ["q" * 100]


@pytest.mark.django_db
def test_an_unknown_backend_alias_is_refused():
    with pytest.raises(ValueError, match="No TASKS alias 'nope'; the aliases are: 'default'"):
        queues.pause("emails", backend="nope")
    with pytest.raises(TypeError, match="backend is a TASKS alias"):
        queues.paused(backend=3)  # type: ignore[arg-type]
    assert not QueueState.objects.exists()


@pytest.mark.django_db(databases=["default", "jobs2"])
def test_a_queue_is_paused_in_the_database_its_aliases_jobs_are_in():
    assert queues.pause("default", backend="elsewhere") is True
    assert list(QueueState.objects.using("jobs2").values_list("name", flat=True)) == ["default"]
    assert not QueueState.objects.using("default").exists()
    assert queues.paused() == {}
    assert list(queues.paused(backend="elsewhere")) == ["default"]
    assert queues.resume("default", backend="elsewhere") is True


@pytest.mark.django_db(transaction=True)
def test_a_resume_signals_the_queues_workers_on_commit_and_only_then():
    recording = Recording()
    notify.reset()
    notify._coalescers["default"] = Coalescer(recording)
    try:
        queues.pause("emails")
        assert recording.sent == []  # a pause wakes nobody
        with pytest.raises(RuntimeError), transaction.atomic():
            queues.resume("emails")
            raise RuntimeError("rolled back")
        assert recording.sent == []
        assert list(queues.paused()) == ["emails"]
        with transaction.atomic():
            queues.resume("emails")
            assert recording.sent == []  # not before the commit
        assert [sorted(sent) for _at, sent in recording.sent] == [["emails"]]
        queues.resume("emails")  # not paused: no signal
        assert len(recording.sent) == 1
    finally:
        notify.reset()


@pytest.mark.django_db
def test_enqueueing_into_a_paused_queue_works():
    queues.pause("slow")
    result = tasks.record_run.enqueue("while paused")
    job = Job.objects.for_result(result.id).get()
    assert job.queue == "slow" and job.status == JobStatus.QUEUED


# -- the command -----------------------------------------------------------------------


def outbox_queue(*args: str) -> str:
    out = StringIO()
    call_command("outbox_queue", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_command_pauses_lists_and_resumes():
    assert outbox_queue("pause", "emails", "reports", "emails") == (
        "emails: paused: workers claim none of its jobs from within a second\n"
        "reports: paused: workers claim none of its jobs from within a second\n"
    )
    assert outbox_queue("pause", "emails") == "emails: paused already\n"
    lines = outbox_queue("list").splitlines()
    # Each configured queue, and any other with a row, paused or not.
    by_name = {line.split()[0]: line for line in lines}
    assert set(by_name) >= {"default", "emails", "reports", "slow", "limited", "rated"}
    assert "paused since" in by_name["emails"] and "0 live workers" in by_name["emails"]
    assert by_name["default"].endswith("running; 0 live workers")
    assert outbox_queue("resume", "emails") == "emails: resumed: its due jobs run now\n"
    assert outbox_queue("resume", "emails") == "emails: was not paused\n"
    assert list(queues.paused()) == ["reports"]
    queues.pause("unconfigured")
    assert "unconfigured" in outbox_queue("list")


@pytest.mark.django_db
def test_the_list_counts_the_live_workers_serving_each_queue(worker_factory):
    worker_factory(queues=["default", "emails"])
    worker_factory(queues=["emails"])
    worker_factory(queues=["emails"], heartbeat_at=timezone.now() - timedelta(hours=1))
    worker_factory(queues=["unlisted"])
    lines = {line.split()[0]: line for line in outbox_queue("list").splitlines()}
    assert lines["emails"].endswith("running; 2 live workers")
    assert lines["default"].endswith("running; 1 live worker")
    assert lines["unlisted"].endswith("running; 1 live worker")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["pause"], "Name the queues to pause: outbox_queue pause NAME ..."),
        (["resume"], "Name the queues to resume"),
        (["list", "emails"], "outbox_queue list takes no queue names."),
        (["pause", ""], "A queue's name must not be empty. (given: '')"),
        (["pause", "ok", "x" * 101], "at most 100 characters"),
        (["pause", "emails", "--backend", "nope"], "No TASKS alias 'nope'"),
        (["stop", "emails"], "invalid choice: 'stop'"),
    ],
)
def test_the_command_refuses_bad_input_and_changes_nothing(args, says):
    with pytest.raises(CommandError) as refused:
        outbox_queue(*args)
    assert says in str(refused.value)
    assert not QueueState.objects.exists()


# -- the admin -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_list_pauses_and_resumes_the_selected_queues(admin_client):
    queues.pause("emails")
    queues.resume("emails")
    queues.pause("reports")
    html = admin_client.get("/admin/django_outbox/queuestate/").content.decode()
    assert "emails" in html and "reports" in html and ">paused<" in html and ">running<" in html
    for state, shown in (("paused", ["reports"]), ("running", ["emails"])):
        listed = admin_client.get("/admin/django_outbox/queuestate/", {"state": state})
        assert [row.name for row in listed.context["cl"].result_list] == shown
    response = act(admin_client, "queuestate", "pause", ["emails", "reports"])
    assert messages_of(response) == [
        "Paused 1 queue: emails. reports left as it was (already paused)."
    ]
    assert set(queues.paused()) == {"emails", "reports"}
    response = act(admin_client, "queuestate", "resume", ["emails", "reports"])
    assert messages_of(response) == ["Resumed 2 queues: emails, reports."]
    assert queues.paused() == {}
    response = act(admin_client, "queuestate", "resume", ["emails"])
    assert messages_of(response) == ["Resumed 0 queues. emails left as it was (not paused)."]
    # No add, change or delete: the actions are the way to change a queue.
    assert admin_client.get("/admin/django_outbox/queuestate/add/").status_code == 403
    assert "delete_selected" not in html


@pytest.mark.django_db
def test_a_user_who_may_only_view_cannot_pause_a_queue(client):
    queues.pause("emails")
    client.force_login(staff_user("view_queuestate", "view_dashboard"))
    html = client.get("/admin/django_outbox/queuestate/").content.decode()
    assert "emails" in html and 'value="resume"' not in html  # no action offered
    act(client, "queuestate", "resume", ["emails"])
    assert list(queues.paused()) == ["emails"]  # and none done if posted anyway
    dashboard = client.get("/admin/django_outbox/dashboard/").content.decode()
    assert 'data-queue="emails" class="outbox-paused"' in dashboard
    assert 'name="do"' not in dashboard  # no button
    response = client.post(
        "/admin/django_outbox/dashboard/queue/", {"queue": "emails", "do": "resume"}
    )
    assert response.status_code == 403
    assert list(queues.paused()) == ["emails"]


@pytest.mark.django_db
def test_the_dashboard_shows_paused_queues_with_a_button_to_resume_them(admin_client):
    queues.pause("reports")
    queues.pause("not-configured")
    html = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    assert "Queues (2 paused)" in html
    reports = html.split('data-queue="reports"')[1].split("</tr>")[0]
    assert ">paused<" in reports and 'value="Resume"' in reports
    assert re.search(r'<span title="paused [-0-9: ]+">for \d+ ms</span>', reports), reports
    assert 'data-queue="not-configured"' in html  # a paused queue has its line, jobs or not
    default = html.split('data-queue="default"')[1].split("</tr>")[0]
    assert '"state">running<' in default and 'value="Pause"' in default
    partial = admin_client.get("/admin/django_outbox/dashboard/?partial=1").content.decode()
    assert 'value="Resume"' in partial and "csrfmiddlewaretoken" in partial


@pytest.mark.django_db
def test_the_dashboards_button_pauses_and_resumes_a_queue(admin_client):
    response = admin_client.post(
        "/admin/django_outbox/dashboard/queue/", {"queue": "emails", "do": "pause"}, follow=True
    )
    assert response.redirect_chain == [("/admin/django_outbox/dashboard/", 302)]
    assert list(queues.paused()) == ["emails"]
    assert messages_of(response) == [
        "Paused queue 'emails': workers claim none of its jobs from within a second; jobs "
        "running now finish. Jobs can still be enqueued into it."
    ]
    response = admin_client.post(
        "/admin/django_outbox/dashboard/queue/", {"queue": "emails", "do": "pause"}, follow=True
    )
    assert messages_of(response) == ["Queue 'emails' was paused already."]
    response = admin_client.post(
        "/admin/django_outbox/dashboard/queue/", {"queue": "emails", "do": "resume"}, follow=True
    )
    assert messages_of(response) == ["Resumed queue 'emails': its due jobs run now."]
    assert queues.paused() == {}


@pytest.mark.django_db
def test_the_dashboards_button_refuses_what_it_cannot_do(admin_client, client):
    url = "/admin/django_outbox/dashboard/queue/"
    assert admin_client.get(url).status_code == 405
    assert admin_client.post(url, {"queue": "emails", "do": "stop"}).status_code == 400
    assert admin_client.post(url, {"queue": "", "do": "pause"}).status_code == 400
    assert admin_client.post(url, {"queue": "x" * 101, "do": "pause"}).status_code == 400
    assert admin_client.post(url, {"do": "pause"}).status_code == 400
    # Not logged in: to the login page. Without the CSRF token: refused.
    assert client.post(url, {"queue": "emails", "do": "pause"}).status_code == 302
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff_user("change_queuestate", "view_dashboard"))
    assert strict.post(url, {"queue": "emails", "do": "pause"}).status_code == 403
    assert not QueueState.objects.exists()


@pytest.mark.django_db
def test_a_user_who_may_change_queues_gets_the_buttons(client):
    client.force_login(staff_user("change_queuestate", "view_dashboard"))
    assert 'value="Pause"' in client.get("/admin/django_outbox/dashboard/").content.decode()
    response = client.post(
        "/admin/django_outbox/dashboard/queue/", {"queue": "emails", "do": "pause"}
    )
    assert response.status_code == 302
    assert list(queues.paused()) == ["emails"]


@pytest.mark.django_db(transaction=True)
def test_the_dashboards_buttons_in_a_browser(page, live_server, screenshots):  # noqa: F811
    # A fresh connection: in CI's MariaDB runs this test's first statement met "Lost
    # connection to server" (2013), from something an earlier test left behind.
    connection.close()
    Job.objects.bulk_create(
        Job(task_path="shop.tasks.send_receipt", queue="emails", run_at=timezone.now())
        for _ in range(3)
    )
    queues.pause("reports")
    QueueState.objects.update(paused_at=timezone.now() - timedelta(minutes=42))
    log_in(page, live_server, "/admin/django_outbox/dashboard/")
    row = page.locator('tr[data-queue="emails"]')
    assert row.locator(".state").inner_text() == "running"
    row.locator('input[value="Pause"]').click()
    page.wait_for_selector(".messagelist")
    assert "Paused queue 'emails'" in page.inner_text(".messagelist")
    row = page.locator('tr[data-queue="emails"]')
    assert row.locator(".state").inner_text().startswith("paused")
    assert row.locator(".queued").inner_text() == "3"  # its jobs wait
    assert set(queues.paused()) == {"emails", "reports"}
    assert_no_horizontal_scroll(page, "the dashboard")
    page.locator("#outbox-queues").screenshot(path=str(screenshots / "queues.png"))
    assert (screenshots / "queues.png").stat().st_size > 5_000
    page.locator('tr[data-queue="reports"] input[value="Resume"]').click()
    page.wait_for_selector(".messagelist")
    assert "Resumed queue 'reports'" in page.inner_text(".messagelist")
    assert list(queues.paused()) == ["emails"]
    # The queue list: each queue that was ever paused, its state, the actions.
    page.goto(f"{live_server.url}/admin/django_outbox/queuestate/")
    assert page.locator("#result_list tbody tr").count() == 2
    assert_no_horizontal_scroll(page, "the queue list")
    page.screenshot(path=str(screenshots / "queue-list.png"))


# -- what workers do -------------------------------------------------------------------


def key_of(result) -> int:
    return parse_result_id(result.id).pk


def status_of(result) -> str:
    return Job.objects.get(pk=key_of(result)).status


def ran(*keys: str) -> bool:
    return Execution.objects.filter(key__in=keys, finished__isnull=False).count() == len(keys)


#: Workers that look by themselves only every 30 s: a pickup within seconds is a wake-up
#: or the paused worker's own read of the state (at most a second apart).
SLOW_POLLS = {"OUTBOX_TEST_POLL_INTERVAL": "30", "OUTBOX_TEST_STALLED_CHECK_SECONDS": "30"}


@pytest.mark.django_db(transaction=True)
def test_a_worker_claims_nothing_from_a_paused_queue_and_runs_it_promptly_on_resume(
    start_worker,
):
    queues.pause("slow")
    waiting = [tasks.record_run.enqueue(f"slow-{n}") for n in range(3)]
    worker = start_worker("--queues", "slow,emails", extra_env=SLOW_POLLS)
    wait_until(lambda: "queue(s) slow paused" in worker.log(), 20, "the worker to see the pause")
    # Another queue's jobs run meanwhile, enqueued before and after the worker started.
    others = [tasks.record_run.using(queue_name="emails").enqueue(f"emails-{n}") for n in range(2)]
    wait_until(lambda: ran("emails-0", "emails-1"), 20, "the other queue's jobs")
    time.sleep(1.5)  # more than the worker's refresh: it has looked again, and again
    assert [status_of(result) for result in waiting] == [JobStatus.QUEUED] * 3
    assert not Execution.objects.filter(key__startswith="slow-").exists()
    assert all(status_of(result) == JobStatus.SUCCEEDED for result in others)

    resumed_at = time.monotonic()
    assert queues.resume("slow") is True
    wait_until(lambda: ran("slow-0", "slow-1", "slow-2"), 20, "the resumed queue's jobs")
    # Well under the 30 s poll: the resume's wake-up (or the worker's next read) did it.
    assert time.monotonic() - resumed_at < 5, worker.log()
    assert "queue(s) slow resumed" in worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
def test_a_job_running_when_its_queue_is_paused_finishes_and_no_new_one_starts(start_worker):
    long = tasks.record_run.enqueue("long", seconds=2.0)
    worker = start_worker("--queues", "slow", "--concurrency", "2", extra_env=SLOW_POLLS)
    wait_until(lambda: Execution.objects.filter(key="long").exists(), 20, "the long job")
    queues.pause("slow")
    # The worker has a job running, so it loops, and reads the state within a second.
    wait_until(lambda: "queue(s) slow paused" in worker.log(), 5, "the worker to see the pause")
    later = tasks.record_run.enqueue("later")  # enqueueing into a paused queue works
    wait_until(lambda: ran("long"), 20, "the long job to finish")
    wait_until(lambda: status_of(long) == JobStatus.SUCCEEDED, 10, "its outcome")
    time.sleep(1.5)
    assert status_of(later) == JobStatus.QUEUED
    assert not Execution.objects.filter(key="later").exists()
    queues.resume("slow")
    wait_until(lambda: ran("later"), 10, "the job enqueued while paused")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.django_db(transaction=True)
def test_a_burst_worker_leaves_the_jobs_of_a_paused_queue_queued(run_worker):
    queues.pause("slow")
    waiting = tasks.record_run.enqueue("waits")
    done = tasks.add.enqueue(1, 2)
    stats = run_worker(queues=["default", "slow"])
    assert stats.succeeded == 1
    assert status_of(waiting) == JobStatus.QUEUED
    assert status_of(done) == JobStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["poll", "postgres", "redis"])
def test_due_jobs_of_a_paused_queue_do_not_keep_a_worker_busy(mode):
    """A worker whose queue is paused reads the state once a second, and does not look
    for the paused queue's due jobs over and over (nor ask when they fall due)."""
    require(mode)
    queues.pause("slow")
    django_outbox.enqueue_many(tasks.record_run, [(("due",), {})] * 5)
    with override_settings(
        OUTBOX=settings.OUTBOX
        | {
            "WAKE": mode,
            "POLL_INTERVAL": 30.0,
            "STALLED_CHECK_SECONDS": 30.0,
            "HEARTBEAT_SECONDS": 10.0,  # no rescue every half second
            "LEASE_SECONDS": 30.0,
        }
    ):
        worker = Worker(queues=["slow", "emails"], concurrency=1)
        thread = start_in_thread(worker)
        try:
            assert worker.ready.wait(15), "the worker did not start"
            wait_until(lambda: worker.pauses.paused, 10, "the worker to read the pause")
            time.sleep(0.5)
            before, began = worker.stats.statements, time.monotonic()
            time.sleep(3.0)
            sent, seconds = worker.stats.statements - before, time.monotonic() - began
            # One read a second (and one more statement, a heartbeat, on the way);
            # hundreds if it looked for the paused queue's due jobs each time round.
            assert sent <= seconds + 2, sent
            assert worker.stats.claimed == 0
        finally:
            worker.request_stop("test done")
            thread.join(15)
            stop_pool(worker.pool)
    assert Job.objects.filter(queue="slow", status=JobStatus.QUEUED).count() == 5
