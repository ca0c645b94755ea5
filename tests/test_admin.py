import html
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox import webhooks, workflows
from django_outbox.lib.resultids import parse_result_id, result_id
from django_outbox.models import Delivery, Job, JobStatus, Worker
from tests import tasks
from tests.statements import names

pytestmark = pytest.mark.django_db


def test_staff_see_jobs_in_the_admin(admin_client):
    result = tasks.add.enqueue(1, 2)
    page = admin_client.get("/admin/django_outbox/job/")
    assert page.status_code == 200
    assert "tests.tasks.add" in page.content.decode()
    pk = parse_result_id(result.id).pk
    detail = admin_client.get(f"/admin/django_outbox/job/{pk}/change/")
    assert detail.status_code == 200
    assert result.id in detail.content.decode()  # the result id, as an app would log it
    assert admin_client.get("/admin/django_outbox/worker/").status_code == 200


def test_a_result_id_or_a_primary_key_finds_its_job_in_the_admin(admin_client):
    wanted, other = tasks.add.enqueue(1, 2), tasks.add.enqueue(3, 4)
    pk = parse_result_id(wanted.id).pk

    def found(term: str) -> list[int]:
        page = admin_client.get("/admin/django_outbox/job/", {"q": term})
        assert page.status_code == 200
        return [job.pk for job in page.context["cl"].result_list]

    assert found(wanted.id) == [pk]
    assert found(str(pk)) == [pk]  # a bare number is a primary key, as before
    stale = result_id(pk, parse_result_id(other.id).token)  # its key, another job's token
    assert found(stale) == []


def test_the_admin_does_not_offer_to_add_jobs(admin_client):
    assert admin_client.get("/admin/django_outbox/job/add/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_staff_see_webhooks_and_each_deliverys_attempts_but_no_secret(admin_client):
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox import webhooks
    from django_outbox.models import Attempt

    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    Attempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=timezone.now() - timedelta(seconds=1),
        duration=0.2,
        status_code=503,
        error_class="",
    )
    for path in ("endpoint", "message", "delivery", "attempt"):
        assert admin_client.get(f"/admin/django_outbox/{path}/").status_code == 200
    page = admin_client.get(f"/admin/django_outbox/delivery/{delivery.pk}/change/").content.decode()
    assert "503" in page
    endpoint_page = admin_client.get(f"/admin/django_outbox/endpoint/{endpoint.pk}/change/")
    assert endpoint.secret not in endpoint_page.content.decode()


def a_job(status: str = JobStatus.QUEUED, **fields) -> Job:
    values = {"task_path": "tests.tasks.add", "args": [1, 2], "queue": "default"} | fields
    return Job.objects.create(status=status, **values)


def failed_job(error: str = "ValueError: bad input", **fields) -> Job:
    now = timezone.now()
    return a_job(
        JobStatus.FAILED,
        attempts=3,
        max_attempts=3,
        finished_at=now,
        last_attempted_at=now - timedelta(seconds=1),
        errors=[{"exception_class_path": "builtins.ValueError", "traceback": f"Tb\n{error}"}],
        **fields,
    )


def act(client, model: str, action: str, pks, follow: bool = True, **extra):
    return client.post(
        f"/admin/django_outbox/{model}/",
        {"action": action, "_selected_action": [str(pk) for pk in pks], **extra},
        follow=follow,
    )


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def messages_with_levels(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def staff_user(*perms: str) -> User:
    user = User.objects.create_user("watcher", password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def test_the_job_list_shows_coloured_statuses_and_the_last_error_line(admin_client):
    failed_job("KeyError: 'sku'")
    page = admin_client.get("/admin/django_outbox/job/").content.decode()
    assert "KeyError: &#x27;sku&#x27;" in page  # the traceback's last line, escaped
    assert 'class="outbox-status outbox-status-failed"' in page  # failed: red (admin.css)
    assert "3/3" in page  # attempts used of allowed


def test_payloads_and_tracebacks_are_pretty_printed_and_escaped(admin_client):
    job = failed_job("RuntimeError: <script>alert(1)</script>", kwargs={"note": "<b>hi</b>"})
    page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;note&quot;: &quot;&lt;b&gt;hi&lt;/b&gt;&quot;" in page  # indented JSON


def test_a_job_page_says_unique_key_as_the_docs_and_the_api_do(admin_client):
    job = a_job(dedup_key="report-42")
    page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert "Unique key:" in page and "report-42" in page
    assert "Dedup key" not in page


def test_endpoint_and_message_pages_label_the_url_and_uid_in_capitals(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 7})
    pages = [
        admin_client.get(f"/admin/django_outbox/{model}/{pk}/change/").content.decode()
        for model, pk in (("endpoint", endpoint.pk), ("message", message.pk))
    ]
    assert ">URL:<" in pages[0] and "Url:" not in pages[0]
    assert ">UID:<" in pages[1] and "Uid:" not in pages[1]


def test_a_message_page_shows_the_body_as_signed_byte_for_byte_and_indented(admin_client):
    webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 7, "note": "<b>hi</b>"})
    page = admin_client.get(f"/admin/django_outbox/message/{message.pk}/change/").content.decode()
    signed = page.split("byte for byte")[1].split("</pre>")[0]
    assert html.escape(message.body, quote=True) in signed  # the signed text, unchanged
    assert "&quot;note&quot;: &quot;&lt;b&gt;hi&lt;/b&gt;&quot;" in page  # and indented


def test_retry_now_requeues_failed_jobs_and_reports_what_it_left(admin_client):
    failed = failed_job()
    running = a_job(JobStatus.RUNNING)
    response = act(admin_client, "job", "retry_now", [failed.pk, running.pk])
    failed.refresh_from_db()
    assert failed.status == JobStatus.QUEUED
    assert failed.max_attempts == 4  # one more run than it has used
    assert failed.run_at <= timezone.now() and failed.finished_at is None
    assert len(failed.errors) == 1  # its history is kept
    assert Job.objects.get(pk=running.pk).status == JobStatus.RUNNING
    assert messages_of(response) == [
        "Jobs queued to run now: 1. 1 left as it was (the action does not apply to it)."
    ]


def test_retry_now_skips_a_job_whose_dedup_key_an_active_job_holds(admin_client):
    old = failed_job(dedup_key="report-1")
    a_job(dedup_key="report-1")
    response = act(admin_client, "job", "retry_now", [old.pk])
    assert Job.objects.get(pk=old.pk).status == JobStatus.FAILED
    assert "Jobs queued to run now: 0." in messages_of(response)[0]


def test_cancel_cancels_queued_jobs_and_asks_running_ones_to_stop(admin_client):
    queued, running, done = a_job(), a_job(JobStatus.RUNNING), a_job(JobStatus.SUCCEEDED)
    response = act(admin_client, "job", "cancel", [queued.pk, running.pk, done.pk])
    assert Job.objects.get(pk=queued.pk).status == JobStatus.CANCELLED
    running.refresh_from_db()
    assert running.status == JobStatus.RUNNING and running.cancel_requested_at is not None
    assert Job.objects.get(pk=done.pk).status == JobStatus.SUCCEEDED
    assert messages_of(response) == [
        "Jobs cancelled: 1. Running jobs asked to stop: 1. 1 left as it was (finished, or "
        "already asked to stop)."
    ]
    # The running job was asked already: left as it was, with the finished one.
    response = act(admin_client, "job", "cancel", [running.pk, done.pk])
    assert messages_with_levels(response) == [
        ("warning", "Jobs cancelled: 0. 2 left as they were (finished, or already asked to stop).")
    ]


def test_action_counts_have_thousands_separators(admin_client):
    Job.objects.bulk_create(Job(task_path="tests.tasks.noop") for _ in range(1234))
    # Every job of the list, as "Select all 1,234" does (posting 1,234 ids is too many fields).
    response = act(admin_client, "job", "cancel", [Job.objects.first().pk], select_across="1")
    assert messages_of(response) == ["Jobs cancelled: 1,234."]


def test_delete_asks_then_deletes(admin_client):
    job = a_job()
    act(admin_client, "job", "delete_selected", [job.pk], post="yes")
    assert not Job.objects.filter(pk=job.pk).exists()


def test_a_staff_user_who_may_only_view_sees_but_cannot_act(client):
    client.force_login(staff_user("view_job", "view_dashboard"))
    job = failed_job()
    page = client.get("/admin/django_outbox/job/")
    assert page.status_code == 200 and "tests.tasks.add" in page.content.decode()
    assert "retry_now" not in page.content.decode()  # the action is not offered
    act(client, "job", "retry_now", [job.pk])
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED  # and not run if posted
    assert client.get("/admin/django_outbox/dashboard/").status_code == 200


def test_a_user_who_is_not_staff_cannot_reach_the_dashboard(client):
    client.force_login(User.objects.create_user("customer", password="pw"))
    response = client.get("/admin/django_outbox/dashboard/")
    assert response.status_code == 302 and "/admin/login/" in response["location"]


def test_staff_without_a_permission_for_it_cannot_see_the_dashboard(client):
    client.force_login(staff_user())
    assert client.get("/admin/django_outbox/dashboard/").status_code == 403


def test_the_dashboard_is_linked_from_the_admin_index_and_the_app(admin_client):
    for url in ("/admin/", "/admin/django_outbox/"):
        assert 'href="/admin/django_outbox/dashboard/"' in admin_client.get(url).content.decode()


def test_the_dashboard_counts_match_the_database(admin_client):
    now = timezone.now()
    for _ in range(3):
        a_job(run_at=now - timedelta(minutes=2))  # due
    a_job(run_at=now + timedelta(hours=1))  # scheduled
    a_job(JobStatus.RUNNING, last_attempted_at=now)
    failed_job("ZeroDivisionError: division by zero", queue="reports")
    a_job(JobStatus.SUCCEEDED, finished_at=now, last_attempted_at=now - timedelta(seconds=2))
    Worker.objects.create(id="w-alive", hostname="web-1", pid=11, queues=["default"], concurrency=4)
    Worker.objects.create(
        id="w-dead",
        hostname="web-2",
        pid=12,
        queues=["default"],
        concurrency=4,
        heartbeat_at=now - timedelta(minutes=10),
    )
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    row = page.split('data-queue="default"')[1].split("</tr>")[0]
    assert 'queued">3<' in row and 'scheduled">1<' in row and 'running">1<' in row
    reports = page.split('data-queue="reports"')[1].split("</tr>")[0]
    assert 'failed">1<' in reports
    assert "2 min" in row  # the oldest due job has waited two minutes
    assert 'data-total="2"' in page  # one succeeded and one failed this hour, in the chart
    assert "ZeroDivisionError: division by zero" in page  # among the latest failures
    assert "web-1" in page and "web-2" in page and "silent (no heartbeat)" in page
    assert "From the latest 2 jobs finished in the last hour." in page
    partial = admin_client.get("/admin/django_outbox/dashboard/?partial=1").content.decode()
    assert 'data-queue="default"' in partial and "<html" not in partial


def test_the_dashboard_counts_waiting_steps_and_held_jobs_per_queue(admin_client):
    workflows.chain(workflows.step(tasks.add, 1, 2), workflows.step(tasks.double)).enqueue()
    a_job(JobStatus.HELD, limit_key="concurrency:report", queue="reports")
    a_job(JobStatus.HELD, limit_key="concurrency:report", queue="reports")
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    assert ">waiting</abbr>" in page and ">held</abbr>" in page
    default = page.split('data-queue="default"')[1].split("</tr>")[0]
    assert 'queued">1<' in default and 'waiting">1<' in default and 'held">0<' in default
    reports = page.split('data-queue="reports"')[1].split("</tr>")[0]
    assert 'held">2<' in reports and 'waiting">0<' in reports and 'queued">0<' in reports


@pytest.mark.django_db(transaction=True)  # ANALYZE commits on MariaDB
def test_the_dashboards_waiting_and_held_counts_read_an_index_not_the_table():
    """Finished jobs are most of a table that keeps them: the count reads the partial
    index of waiting and held rows (SQLite, PostgreSQL), or the claim index led by the
    status (MariaDB, MySQL)."""
    from django_outbox.admin.overview import pending_jobs

    now = timezone.now()
    Job.objects.bulk_create(
        [Job(task_path="tests.tasks.add", status=JobStatus.SUCCEEDED, finished_at=now)] * 3000
        + [Job(task_path="tests.tasks.add", status=JobStatus.WAITING)] * 5
        + [Job(task_path="tests.tasks.add", status=JobStatus.HELD, limit_key="k")] * 3
    )
    counts = pending_jobs().values("queue", "status").annotate(total=Count("id"))
    assert sorted((row["status"], row["total"]) for row in counts) == [("held", 3), ("waiting", 5)]
    sql, params = counts.query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING COVERING INDEX outbox_job_pending" in plan, plan
        elif connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {Job._meta.db_table}")
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = " | ".join(row[0] for row in cursor.fetchall())
            assert "outbox_job_pending" in plan and "Seq Scan" not in plan, plan
        else:
            cursor.execute(f"ANALYZE TABLE {Job._meta.db_table}")
            cursor.execute(f"EXPLAIN {sql}", params)
            columns = [column[0] for column in cursor.description]
            (step,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            assert step["key"] == "outbox_job_claim" and "Using index" in step["Extra"], step


def test_the_dashboards_failures_are_failed_jobs_and_its_counts_those_of_the_last_day(
    admin_client,
):
    now = timezone.now()
    failed_job("KeyError: 'recent'", queue="reports")
    older = failed_job("KeyError: 'yesterday'", queue="reports")
    Job.objects.filter(pk=older.pk).update(finished_at=now - timedelta(hours=25))
    cancelled = failed_job("KeyError: 'cancelled'", queue="reports")
    Job.objects.filter(pk=cancelled.pk).update(status=JobStatus.CANCELLED)
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    reports = page.split('data-queue="reports"')[1].split("</tr>")[0]
    assert 'failed">1<' in reports
    assert "KeyError: &#x27;recent&#x27;" in page  # the latest failures, of any day
    assert "KeyError: &#x27;yesterday&#x27;" in page
    assert "cancelled&#x27;" not in page


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's and MySQL's generated column")
@pytest.mark.django_db(transaction=True)  # ANALYZE TABLE commits
def test_the_dashboards_chart_counts_the_last_hour_from_the_index_alone():
    """MariaDB has no partial index: its index of finished rows holds their status as a
    generated column (migration 0020), so the chart's count by minute and status needs no
    row of the table; a queued job keeps NULL there, so a claim never rewrites it."""
    from django_outbox.admin.overview import throughput

    now = timezone.now()
    Job.objects.bulk_create(
        [Job(task_path="tests.tasks.add", status=JobStatus.SUCCEEDED, finished_at=now)] * 40
        + [Job(task_path="tests.tasks.add", status=JobStatus.FAILED, finished_at=now)] * 7
        + [Job(task_path="tests.tasks.add", status=JobStatus.QUEUED)] * 500
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {Job._meta.db_table}")
        cursor.execute(
            f"SELECT finished_status, COUNT(*) FROM {Job._meta.db_table} GROUP BY 1 ORDER BY 1"
        )
        assert cursor.fetchall() == ((None, 500), ("failed", 7), ("succeeded", 40))
    with CaptureQueriesContext(connection) as queries:
        minutes = throughput(now)
    assert (sum(m.succeeded for m in minutes), sum(m.failed for m in minutes)) == (40, 7)
    (chart,) = [q["sql"] for q in queries if "COUNT(" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {chart}")
        columns = [column[0] for column in cursor.description]
        (step,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    assert step["key"] == "outbox_job_finished" and "Using index" in step["Extra"], step


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's and MySQL's generated column")
@pytest.mark.django_db(transaction=True)  # ANALYZE TABLE commits
def test_the_dashboards_failures_are_read_through_the_index_of_failed_rows():
    """MariaDB has no partial index: the one of failed rows is on a generated column, which
    a claim or a completion never changes (migration 0018). A query by ``status`` and
    ``finished_at`` would read every failed row ever kept, or every finished one."""
    from django_outbox.admin.overview import failed_at, failed_jobs

    now = timezone.now()
    Job.objects.bulk_create(
        [Job(task_path="tests.tasks.add", status=JobStatus.SUCCEEDED, finished_at=now)] * 2000
        + [Job(task_path="tests.tasks.add", status=JobStatus.FAILED, finished_at=now)] * 300
    )
    Job.objects.filter(status=JobStatus.FAILED).update(finished_at=now - timedelta(days=2))
    for _ in range(3):
        failed_job()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {Job._meta.db_table}")
    since = now - timedelta(hours=24)
    for query in (
        failed_jobs().order_by(failed_at().desc())[:20],
        failed_jobs(since=since).values("queue").annotate(total=Count("id")),
    ):
        sql, params = query.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}", params)
            columns = [column[0] for column in cursor.description]
            (step,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        assert step["key"] == "outbox_job_failed", step
    assert failed_jobs(since=since).count() == 3


def test_the_dashboard_shows_each_endpoints_health(admin_client, receiver, webhook_worker):
    from tests.receiver import Answer
    from tests.test_webhooks_delivery import settled

    receiver.script("/down", Answer(500), Answer(200))  # fails once, then recovers
    healthy = webhooks.create_endpoint(receiver.url("/ok"))
    shaky = webhooks.create_endpoint(receiver.url("/down"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    assert {d.status for d in settled(message)} == {"succeeded"}
    webhooks.disable(shaky, "moved to a new URL")
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    rows = page.split('id="outbox-endpoints"')[1].split("</tr>")
    down = next(row for row in rows if shaky.url in row)
    assert '"num">2<' in down and '"num">50%<' in down  # two attempts, one succeeded
    assert "disabled: moved to a new URL" in down
    ok = next(row for row in rows if healthy.url in row)
    assert '"num">1<' in ok and '"num">100%<' in ok


def test_the_dashboard_writes_counts_with_separators_and_never_rounds_up_to_100(admin_client):
    from django_outbox.models import EndpointHour

    endpoint = webhooks.create_endpoint("https://hooks.example.com/busy")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    EndpointHour.objects.create(endpoint=endpoint, hour=hour, attempts=12345, succeeded=12344)
    Job.objects.bulk_create(Job(task_path="tests.tasks.noop") for _ in range(1200))
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    rows = page.split('id="outbox-endpoints"')[1].split("</tr>")
    row = next(row for row in rows if endpoint.url in row)
    assert '"num">12,345<' in row and '"num">99.9%<' in row  # 99.99%, floored
    assert 'queued">1,200<' in page.split('data-queue="default"')[1].split("</tr>")[0]
    assert "From the latest 0 jobs finished in the last hour." in page
    failed_job()
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    assert "From the latest 1 job finished in the last hour." in page


@pytest.mark.parametrize(
    ("succeeded", "attempts", "shown"),
    [
        (999, 1000, "99.9%"),
        (1000, 1000, "100%"),
        (1, 3, "33.3%"),
        (0, 5, "0%"),
        (0, 0, "\N{EN DASH}"),
    ],
)
def test_the_dashboards_success_rate_is_floored_to_a_tenth(succeeded, attempts, shown):
    from django_outbox.admin.dashboard import success_rate

    assert success_rate(succeeded, attempts) == shown


@pytest.mark.django_db(transaction=True)
def test_endpoint_actions_disable_enable_rotate_and_test(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    old_secret = endpoint.secret
    act(admin_client, "endpoint", "disable", [endpoint.pk])
    endpoint.refresh_from_db()
    assert not endpoint.active and endpoint.disabled_reason == "in the admin by admin"
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    assert "disabled: in the admin by admin" in page
    response = act(admin_client, "endpoint", "send_test_event", [endpoint.pk])
    assert messages_of(response) == ["Test events queued: 0. 1 disabled endpoint was skipped."]
    act(admin_client, "endpoint", "enable", [endpoint.pk])
    response = act(admin_client, "endpoint", "send_test_event", [endpoint.pk])
    assert messages_of(response) == ["Test events queued: 1."]
    assert Delivery.objects.filter(endpoint=endpoint, message__event_type="webhook.test").exists()
    response = act(admin_client, "endpoint", "rotate_secret", [endpoint.pk])
    endpoint.refresh_from_db()
    assert endpoint.secret != old_secret and endpoint.previous_secret == old_secret
    assert endpoint.secret in messages_of(response)[0]  # shown once, here
    until = timezone.localtime(endpoint.previous_secret_expires_at)
    assert messages_of(response)[0] == (
        f"New secret of {endpoint.url} (shown once; the previous one also signs for 1 day, "
        f"until {until:%Y-%m-%d %H:%M}): {endpoint.secret}"
    )
    page = admin_client.get(f"/admin/django_outbox/endpoint/{endpoint.pk}/change/")
    assert endpoint.secret not in page.content.decode()
    assert old_secret not in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_recover_asks_since_when_then_resends_the_failed_deliveries(admin_client):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    Job.objects.filter(queue="webhooks").update(status=JobStatus.FAILED)
    Delivery.objects.filter(pk=delivery.pk).update(status="failed", attempts=8)
    form = act(admin_client, "endpoint", "recover", [endpoint.pk], follow=False)
    assert form.status_code == 200 and 'name="since"' in form.content.decode()
    since = (timezone.localtime() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = act(admin_client, "endpoint", "recover", [endpoint.pk], since=since)
    assert messages_of(response) == ["Failed deliveries queued again: 1."]
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 0
    response = act(admin_client, "endpoint", "recover", [endpoint.pk], since=since)
    assert messages_with_levels(response) == [("warning", "Failed deliveries queued again: 0.")]


@pytest.mark.django_db(transaction=True)
def test_resend_and_replay_queue_deliveries_again(admin_client):
    webhooks.create_endpoint("https://a.example.com/in")
    webhooks.create_endpoint("https://b.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    first, second = message.deliveries.order_by("pk")
    # While their first jobs are queued, a resend changes nothing, and says so.
    response = act(admin_client, "delivery", "resend", [first.pk])
    assert messages_of(response) == [
        "Deliveries queued again: 0. 1 delivery already being delivered was left as it was."
    ]
    Job.objects.filter(queue="webhooks").update(status=JobStatus.SUCCEEDED)
    Delivery.objects.update(status="succeeded", attempts=1)
    response = act(admin_client, "delivery", "resend", [first.pk])
    assert messages_of(response) == ["Deliveries queued again: 1."]
    response = act(admin_client, "message", "replay", [message.pk])
    assert messages_of(response) == [
        "Deliveries queued again: 1. 1 delivery already being delivered was left as it was."
    ]
    assert {d.status for d in message.deliveries.all()} == {"pending"}
    page = admin_client.get(f"/admin/django_outbox/message/{message.pk}/change/").content.decode()
    assert f"/admin/django_outbox/delivery/{second.pk}/change/" in page  # linked


def test_the_list_filters_offer_live_and_recent_values_and_filter_by_them(admin_client):
    failed_job(queue="reports")  # finished just now
    a_job(task_path="tests.tasks.echo", queue="mail")
    old = failed_job(queue="archive")
    Job.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=3))
    page = admin_client.get("/admin/django_outbox/job/").content.decode()
    assert "?queue=reports" in page and "?queue=mail" in page
    assert "?queue=archive" not in page  # finished days ago: not read for the choices
    only_mail = admin_client.get("/admin/django_outbox/job/?queue=mail").context["cl"]
    assert [job.task_path for job in only_mail.result_list] == ["tests.tasks.echo"]


@pytest.mark.django_db(transaction=True)
def test_attempts_filter_by_the_class_of_their_answer(admin_client):
    webhooks.create_endpoint("https://hooks.example.com/in")
    delivery = webhooks.send("invoice.paid", {"id": 1}).deliveries.get()
    now = timezone.now()
    for number, code in ((1, 503), (2, None), (3, 200)):
        delivery.attempt_log.create(
            number=number, started_at=now, duration=0.1, status_code=code, succeeded=code == 200
        )
    listed = {}
    for answer in ("5xx", "none", "2xx"):
        page = admin_client.get(f"/admin/django_outbox/attempt/?answer={answer}")
        listed[answer] = [a.number for a in page.context["cl"].result_list]
    assert listed == {"5xx": [1], "none": [2], "2xx": [3]}


@pytest.mark.django_db(transaction=True)  # MariaDB's ANALYZE TABLE commits
def test_an_unfiltered_large_list_is_counted_from_the_servers_estimate(admin_client, monkeypatch):
    from django.db import connection

    from django_outbox.admin import lists

    if connection.vendor == "sqlite":
        pytest.skip("SQLite keeps no estimate (it counts: its tables are local)")
    for _ in range(30):
        a_job()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE django_outbox_job")
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE relname = 'django_outbox_job'"
            )
        else:
            cursor.execute("ANALYZE TABLE django_outbox_job")
            cursor.execute(
                "SELECT TABLE_ROWS FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'django_outbox_job'"
            )
        assert cursor.fetchone()[0] == 30
    Job.objects.filter(pk__in=list(Job.objects.values_list("pk", flat=True)[:10])).delete()
    # ... and the estimate lags
    monkeypatch.setattr(lists, "EXACT_BELOW", 1)
    with CaptureQueriesContext(connection) as queries:
        unfiltered = admin_client.get("/admin/django_outbox/job/").context["cl"]
    # PostgreSQL's estimate waits for the next ANALYZE; InnoDB's follows inserts and
    # deletes: either way it is the estimate, not a count of the table.
    assert unfiltered.result_count == (30 if connection.vendor == "postgresql" else 20)
    assert "row-estimate" in names(queries)
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"] and "WHERE" not in q["sql"]]
    assert counts == []
    filtered = admin_client.get("/admin/django_outbox/job/?status__exact=queued").context["cl"]
    assert filtered.result_count == 20  # filtered lists are counted exactly


def test_the_schedules_list_shows_each_schedules_task_cron_and_next_tick(admin_client, settings):
    from django_outbox import schedules
    from django_outbox.models import ScheduleState

    settings.OUTBOX = settings.OUTBOX | {
        "SCHEDULES": {"nightly": {"task": "tests.tasks.noop", "cron": "0 3 * * *"}}
    }
    schedules.enqueue_due()  # a first look records the schedule
    ScheduleState.objects.create(name="retired", last_tick=timezone.now())
    page = admin_client.get("/admin/django_outbox/schedulestate/").content.decode()
    assert "tests.tasks.noop" in page and "0 3 * * * (UTC)" in page and "03:00:00 (in " in page
    assert "(no longer in OUTBOX[&#x27;SCHEDULES&#x27;])" in page


def test_the_date_hierarchy_drills_down_without_reading_the_tables_dates(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    today = timezone.localdate()
    empty = admin_client.get("/admin/django_outbox/job/").content.decode()
    assert "enqueued_at__year=" not in empty  # no rows: no year to offer
    old = a_job()
    first = timezone.localtime(timezone.now() - timedelta(days=400))
    Job.objects.filter(pk=old.pk).update(enqueued_at=first)
    recent = a_job()
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get("/admin/django_outbox/job/").content.decode()
    # The years from the first row's to this one, by the calendar: none before it.
    for year in range(first.year, today.year + 1):
        assert f"?enqueued_at__year={year}" in page
    assert f"?enqueued_at__year={first.year - 1}" not in page
    sql = " ".join(q["sql"] for q in queries).upper()
    assert "TRUNC" not in sql and "MIN(" not in sql  # no scan of the table's dates
    in_first_year = admin_client.get(f"/admin/django_outbox/job/?enqueued_at__year={first.year}")
    offered = in_first_year.content.decode()
    months = {int(m) for m in re.findall(r'href="\?enqueued_at__month=(\d+)&', offered)}
    # From the first row's month: none before it.
    assert months == set(range(first.month, 13 if first.year < today.year else today.month + 1))
    months = admin_client.get(f"/admin/django_outbox/job/?enqueued_at__year={today.year}")
    assert f"enqueued_at__month={today.month}" in months.content.decode()
    assert f"enqueued_at__month={today.month + 1}&" not in months.content.decode()  # no future
    day = (
        f"/admin/django_outbox/job/?enqueued_at__year={today.year}"
        f"&enqueued_at__month={today.month}&enqueued_at__day={today.day}"
    )
    listed = [job.pk for job in admin_client.get(day).context["cl"].result_list]
    assert listed == [recent.pk]  # Django's own filtering by the chosen day


# --- The pages' frame: the admin's breadcrumbs, on Django 5.2 and 6.1 alike -------------


def breadcrumbs(html: str) -> tuple[str, str]:
    """The breadcrumbs' element as the page writes it ('ol' on Django 6.1, 'div' before,
    as its stylesheet expects) and what is in it."""
    found = re.search(r'<(\w+) class="breadcrumbs">(.*?)</\1>', html, re.S)
    assert found, "no breadcrumbs"
    return found.group(1), found.group(2)


@pytest.mark.django_db(transaction=True)
def test_our_pages_write_their_breadcrumbs_as_the_admins_own_pages_do(admin_client):
    stock, _ = breadcrumbs(admin_client.get("/admin/auth/user/").content.decode())
    job = failed_job()
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    delivery = webhooks.send("invoice.paid", {"id": 1}).deliveries.get()
    attempt = delivery.attempt_log.create(number=1, started_at=timezone.now(), duration=0.1)
    pages = {
        "dashboard": admin_client.get("/admin/django_outbox/dashboard/"),
        "recover": act(admin_client, "endpoint", "recover", [endpoint.pk], follow=False),
        "job": admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/"),
        "attempt": admin_client.get(f"/admin/django_outbox/attempt/{attempt.pk}/change/"),
    }
    for name, response in pages.items():
        tag, crumbs = breadcrumbs(response.content.decode())
        assert tag == stock, name
        assert 'href="/admin/">Home</a>' in crumbs and 'href="/admin/django_outbox/"' in crumbs


def test_the_dashboard_shows_every_configured_queue_even_without_jobs(admin_client, settings):
    settings.OUTBOX = settings.OUTBOX | {"QUEUES": {"bulk": {"concurrency": 2}}}
    page = admin_client.get("/admin/django_outbox/dashboard/").content.decode()
    # TASKS' queues (the tests' settings), the webhook deliveries' and OUTBOX["QUEUES"]'.
    for queue in ("default", "emails", "reports", "slow", "webhooks", "bulk"):
        row = page.split(f'data-queue="{queue}"')[1].split("</tr>")[0]
        assert 'queued">0<' in row and 'failed">0<' in row, queue


# --- Lists that fit a laptop ------------------------------------------------------------


def test_long_values_in_a_list_are_cut_and_whole_in_their_title(admin_client):
    error = "requests.exceptions.ConnectionError: " + "refused " * 40
    failed_job(error, task_path="myshop.billing.tasks.send_overdue_invoice_reminder_email")
    page = admin_client.get("/admin/django_outbox/job/").content.decode()
    cell = page.split('class="field-last_error"')[1].split("</td>")[0]
    assert f'title="{error.strip()}"' in cell  # whole, on hover
    assert ">ConnectionError: refused" in cell  # shown without its module
    task = page.split('class="field-task"')[1].split("</td>")[0]
    assert 'title="myshop.billing.tasks.send_overdue_invoice_reminder_email"' in task
    assert ">send_overdue_invoice_reminder_email<" in task


# --- A delivery's attempts, by round -----------------------------------------------------


def test_rounds_begin_where_the_attempt_number_does_not_go_up():
    from django_outbox.admin.rounds import rounds

    assert rounds([(10, 1), (11, 2), (12, 3), (13, 1), (14, 1), (15, 2)]) == {
        10: 1,
        11: 1,
        12: 1,
        13: 2,
        14: 3,
        15: 3,
    }
    assert rounds([]) == {}


@pytest.mark.django_db(transaction=True)
def test_a_resent_deliverys_attempts_are_labelled_once_each_by_round(admin_client):
    webhooks.create_endpoint("https://hooks.example.com/in")
    delivery = webhooks.send("invoice.paid", {"id": 1}).deliveries.get()
    now = timezone.now()

    def attempt(number: int, minutes_ago: int, code: int):
        return delivery.attempt_log.create(
            number=number,
            started_at=now - timedelta(minutes=minutes_ago),
            duration=0.1,
            status_code=code,
            succeeded=code == 200,
        )

    attempt(1, 30, 503)
    attempt(2, 29, 503)
    Job.objects.filter(queue="webhooks").update(status=JobStatus.FAILED)
    assert webhooks.resend(delivery)  # a new round, numbered from 1
    again = attempt(1, 1, 200)

    page = admin_client.get(f"/admin/django_outbox/delivery/{delivery.pk}/change/")
    html = page.content.decode()
    labels = re.findall(r">(round \d+, attempt \d+)</a>", html)
    assert labels == ["round 1, attempt 1", "round 1, attempt 2", "round 2, attempt 1"]
    assert "attempt 1 of delivery" not in html  # the title that repeated
    detail = admin_client.get(f"/admin/django_outbox/attempt/{again.pk}/change/").content.decode()
    assert f"<h2>Round 2, attempt 1 of delivery #{delivery.pk}</h2>" in detail
    assert f"<title>Round 2, attempt 1 of delivery #{delivery.pk} |" in detail
    listed = admin_client.get("/admin/django_outbox/attempt/").content.decode()
    assert re.findall(r">(round \d+, attempt \d+)</a>", listed) == [
        "round 2, attempt 1",
        "round 1, attempt 2",
        "round 1, attempt 1",
    ]


# --- The "Retry now" button of a job's page ----------------------------------------------


def retry_url(job: Job) -> str:
    return f"/admin/django_outbox/job/{job.pk}/retry/"


def test_a_failed_jobs_page_has_a_retry_button_that_queues_it_again(admin_client):
    job = failed_job()
    page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert f'name="_retry" value="Retry now" formaction="{retry_url(job)}"' in page
    response = admin_client.post(retry_url(job), follow=True)
    assert response.redirect_chain == [(f"/admin/django_outbox/job/{job.pk}/change/", 302)]
    assert messages_of(response) == [f"Job #{job.pk} is queued to run now (attempt 4 of 4)."]
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and job.max_attempts == 4  # as the action does
    assert len(job.errors) == 1
    assert 'name="_retry"' not in response.content.decode()  # due now: nothing to offer


def test_the_retry_button_is_offered_only_where_it_does_something(admin_client):
    offered = {
        "failed": failed_job(),
        "cancelled": a_job(JobStatus.CANCELLED, finished_at=timezone.now()),
        "queued for later": a_job(run_at=timezone.now() + timedelta(hours=1)),
    }
    not_offered = {
        "queued and due": a_job(),
        "running": a_job(JobStatus.RUNNING),
        "succeeded": a_job(JobStatus.SUCCEEDED, finished_at=timezone.now()),
    }
    for name, job in {**offered, **not_offered}.items():
        page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
        assert ('name="_retry"' in page) == (name in offered), name
    later = admin_client.get(f"/admin/django_outbox/job/{offered['queued for later'].pk}/change/")
    assert 'value="Run now"' in later.content.decode()
    succeeded = not_offered["succeeded"]
    response = admin_client.post(retry_url(succeeded), follow=True)
    assert messages_of(response) == [
        f"Job #{succeeded.pk} was left as it was: it is succeeded now."
    ]


def test_the_retry_button_leaves_a_job_whose_dedup_key_an_active_job_holds(admin_client):
    old = failed_job(dedup_key="report-1")
    a_job(dedup_key="report-1")
    response = admin_client.post(retry_url(old), follow=True)
    assert Job.objects.get(pk=old.pk).status == JobStatus.FAILED
    assert "holds its unique key (report-1)" in messages_of(response)[0]


def test_the_retry_button_needs_a_post_the_csrf_token_and_the_change_permission(client):
    job = failed_job()
    client.force_login(staff_user("view_job"))
    page = client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert 'name="_retry"' not in page  # not offered to a user who may only view
    assert client.post(retry_url(job)).status_code == 403
    admin = User.objects.create_superuser("boss", "boss@example.com", "pw")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin)
    assert strict.get(retry_url(job)).status_code == 405
    assert strict.post(retry_url(job)).status_code == 403  # no CSRF token
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


def test_an_attempts_page_shows_how_long_it_took_as_people_read_it(admin_client):
    webhooks.create_endpoint("https://hooks.example.com/in")
    delivery = webhooks.send("invoice.paid", {"id": 1}).deliveries.get()
    attempt = delivery.attempt_log.create(
        number=1, started_at=timezone.now(), duration=0.07032319600001176, status_code=200
    )
    page = admin_client.get(f"/admin/django_outbox/attempt/{attempt.pk}/change/").content.decode()
    assert "70 ms" in page
    assert "0.0703" not in page


def test_the_delivery_list_costs_the_same_queries_for_a_few_deliveries_or_a_page(admin_client):
    """A page's messages and endpoints are read in one query each, whatever their number,
    and the deliveries themselves newest first without a join (MariaDB sorted every
    delivery of a joined read to show a page)."""

    def queries_for_the_list() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get("/admin/django_outbox/delivery/")
        assert page.status_code == 200
        return [q["sql"] for q in queries]

    webhooks.create_endpoint("https://hooks.example.com/a")
    webhooks.send("invoice.paid", {"id": 0})
    few = queries_for_the_list()
    for n in range(4):
        webhooks.create_endpoint(f"https://hooks.example.com/more-{n}")
    for n in range(1, 6):
        webhooks.send("invoice.paid", {"id": n})
    page = admin_client.get("/admin/django_outbox/delivery/").content.decode()
    assert page.count("hooks.example.com/more-") >= 5 * 4  # each row names its endpoint
    many = queries_for_the_list()
    assert len(many) == len(few)
    listing = [
        sql for sql in many if re.search(r"^SELECT .* FROM \W?django_outbox_delivery\W? ", sql)
    ]
    assert listing and not any(" JOIN " in sql for sql in listing), listing


def test_a_cell_is_cut_only_at_a_width_the_stylesheet_has():
    from django_outbox.admin import display

    assert 'class="outbox-cut outbox-w12"' in display.cut("shop.tasks.send_receipt", 12)
    with pytest.raises(ValueError, match=r"admin\.css"):
        display.cut("shop.tasks.send_receipt", 11)
