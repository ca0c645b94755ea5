"""django_outbox.testing and its pytest plugin, as a user's test suite would use them: in
plain ``django_db`` tests, inside the test's transaction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from django_outbox import webhooks
from django_outbox.compat import TaskResultStatus, task_finished
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Job, JobStatus
from django_outbox.testing import JobsStillDue, assert_enqueued, captured_webhooks, run_jobs
from testproject.shop.models import Customer, Order
from testproject.shop.tasks import render_invoice
from tests import tasks

pytestmark = pytest.mark.django_db


def test_the_worked_example_an_order_gets_its_invoice_and_its_webhook():
    """docs/testing.md's example, against testproject's shop."""
    endpoint = webhooks.create_endpoint("https://hooks.example.com/orders")
    Customer.objects.create(email="ada@example.com")
    client = Client()
    response = client.post("/orders/", {"email": "ada@example.com", "amount": "12.50"})
    order = Order.objects.get(pk=response.json()["order"])

    (queued,) = assert_enqueued(render_invoice, args=[order.pk], queue="reports")
    assert queued.status == TaskResultStatus.READY

    with captured_webhooks() as sent:
        results = run_jobs(queues=["reports", "webhooks"])

    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 2
    order.refresh_from_db()
    assert order.invoice_number == f"INV-{order.pk:06d}"
    (hook,) = sent.of("order.placed")
    assert hook.url == "https://hooks.example.com/orders"
    assert hook.payload == {"order": order.pk, "email": "ada@example.com", "amount": "12.50"}
    assert webhooks.verify(hook.headers, hook.content, endpoint.secret)["type"] == "order.placed"
    assert Delivery.objects.get().status == DeliveryStatus.SUCCEEDED


def test_run_jobs_runs_what_is_due_in_order_and_returns_the_results():
    first = tasks.add.enqueue(1, 2)
    second = tasks.add.using(priority=10).enqueue(3, 4)
    later = tasks.add.using(run_after=timedelta(hours=1)).enqueue(0, 0)
    finished = []
    task_finished.connect(
        receiver := lambda sender, task_result, **kw: finished.append(task_result.id)
    )
    try:
        results = run_jobs()
    finally:
        task_finished.disconnect(receiver)
    assert [r.id for r in results] == [second.id, first.id]  # priority first
    assert [r.return_value for r in results] == [7, 3]
    assert finished == [second.id, first.id]
    assert Job.objects.for_result(later.id).get().status == JobStatus.QUEUED  # not due yet
    assert run_jobs() == []


def test_a_failing_job_is_queued_for_its_retry_not_rerun_and_fails_at_its_last_attempt():
    flaky = tasks.always_fails.enqueue("boom")
    (result,) = run_jobs()  # one run: its retry waits for its time, as with a worker
    assert result.status == TaskResultStatus.READY
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert Job.objects.for_result(flaky.id).get().attempts == 1
    Job.objects.for_result(flaky.id).update(max_attempts=2, run_at=timezone.now())
    (result,) = run_jobs()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2 and "boom" in result.errors[-1].traceback


def test_follow_runs_what_the_jobs_enqueue_round_after_round():
    tasks.countdown.enqueue(3)
    assert [r.return_value for r in run_jobs()] == [3]
    assert [r.return_value for r in run_jobs(follow=True)] == [2, 1, 0]
    assert run_jobs(follow=True) == []


def test_follow_stops_and_says_so_when_jobs_keep_enqueueing_each_other():
    tasks.countdown.enqueue(1000)
    with pytest.raises(JobsStillDue, match="still due after 3 rounds"):
        run_jobs(follow=True, max_rounds=3)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 3


def test_run_jobs_takes_only_the_queues_named():
    tasks.add.enqueue(1, 1)
    emailed = tasks.email.enqueue("ada@example.com")
    assert [r.id for r in run_jobs(queues=[emailed.task.queue_name])] == [emailed.id]
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 1


def test_assert_enqueued_matches_arguments_and_queue_and_counts():
    tasks.add.enqueue(1, 2)
    tasks.add.enqueue(1, 2)
    tasks.echo.using(queue_name="emails").enqueue(when="2026-01-02")
    assert len(assert_enqueued(tasks.add, args=(1, 2))) == 2
    assert_enqueued(tasks.add, args=[1, 2], count=2)
    assert_enqueued("tests.tasks.add")
    assert_enqueued(tasks.echo, kwargs={"when": "2026-01-02"}, queue="emails")


def test_assert_enqueued_says_what_was_enqueued_instead():
    tasks.add.enqueue(1, 3)
    with pytest.raises(AssertionError) as refused:
        assert_enqueued(tasks.add, args=[1, 2], queue="default")
    assert str(refused.value) == (
        "expected add(1, 2) on queue 'default' to be enqueued; found 0 matching. "
        "Enqueued for tests.tasks.add: add(1, 3) on queue 'default' [queued]"
    )
    with pytest.raises(AssertionError, match=r"expected 2 jobs of add\(\.\.\.\) to be"):
        assert_enqueued(tasks.add, count=2)
    with pytest.raises(AssertionError, match=r"Enqueued for tests\.tasks\.noop: nothing$"):
        assert_enqueued(tasks.noop)


def test_captured_webhooks_answer_as_told_and_deliveries_follow_the_answer():
    webhooks.create_endpoint("https://hooks.example.com/a")
    webhooks.create_endpoint("https://hooks.example.com/b")
    webhooks.send("invoice.paid", {"id": 7})
    with captured_webhooks(status=lambda hook: 500 if hook.url.endswith("/b") else 204) as sent:
        run_jobs(queues=["webhooks"])
    assert sorted(h.url for h in sent) == [
        "https://hooks.example.com/a",
        "https://hooks.example.com/b",
    ]
    assert {h.message_id for h in sent} == {sent[0].message_id}
    statuses = dict(Delivery.objects.values_list("endpoint__url", "status"))
    assert statuses == {
        "https://hooks.example.com/a": DeliveryStatus.SUCCEEDED,
        "https://hooks.example.com/b": DeliveryStatus.PENDING,  # its retry is scheduled
    }
    assert sorted(Attempt.objects.values_list("status_code", flat=True)) == [204, 500]


def test_the_pytest_plugin_offers_the_helpers_as_fixtures(
    outbox_run_jobs, outbox_assert_enqueued, outbox_webhooks
):
    webhooks.create_endpoint("https://hooks.example.com/a")
    tasks.add.enqueue(2, 2)
    webhooks.send("invoice.paid", {"id": 8})
    outbox_assert_enqueued(tasks.add, args=[2, 2])
    results = outbox_run_jobs()
    assert sorted(str(r.status) for r in results) == ["SUCCESSFUL", "SUCCESSFUL"]
    assert [h.payload for h in outbox_webhooks] == [{"id": 8}]


@pytest.mark.parametrize("rounds", [0, -1, 2.5, True])
def test_run_jobs_refuses_a_max_rounds_that_runs_nothing_and_runs_nothing(rounds):
    queued = tasks.add.enqueue(1, 1)
    with pytest.raises(ValueError, match="max_rounds must be a whole number of at least 1"):
        run_jobs(follow=True, max_rounds=rounds)
    assert Job.objects.for_result(queued.id).get().status == JobStatus.QUEUED
