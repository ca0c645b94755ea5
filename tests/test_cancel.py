"""Cancelling: a queued job never runs; a running one is asked to stop and sees it through
its context."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test.utils import override_settings

import django_outbox
from django_outbox.compat import TaskResultDoesNotExist, TaskResultStatus
from django_outbox.models import Job, JobStatus
from tests import tasks
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: Heartbeats (which bring cancel requests to the worker) five times a second.
QUICK = {"OUTBOX": settings.OUTBOX | {"HEARTBEAT_SECONDS": 0.2}}


def status_of(result) -> str:
    return Job.objects.for_result(result.id).get().status


def test_a_cancelled_queued_job_never_runs(run_worker):
    result = tasks.add.enqueue(1, 2)
    assert django_outbox.cancel(result) == "cancelled"
    run_worker()
    job = Job.objects.for_result(result.id).get()
    assert job.status == JobStatus.CANCELLED and job.attempts == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED  # django.tasks has no "cancelled"


@override_settings(**QUICK)
def test_a_running_job_asked_to_stop_stops_and_ends_cancelled_not_retried(webhook_worker):
    result = tasks.stops_when_cancelled.enqueue(30)
    webhook_worker(queues=["default"])
    wait_until(lambda: status_of(result) == JobStatus.RUNNING, 10)
    assert django_outbox.cancel(result.id) == "requested"
    wait_until(lambda: status_of(result) == JobStatus.CANCELLED, 10)
    job = Job.objects.for_result(result.id).get()
    assert job.attempts == 1  # not retried, though it had two attempts left
    assert job.errors[-1]["exception_class_path"] == "django_outbox.exceptions.Cancelled"
    assert "asked to stop" in job.errors[-1]["traceback"]


@override_settings(**QUICK)
def test_a_run_that_finishes_its_work_after_the_request_succeeds(webhook_worker):
    result = tasks.finishes_anyway.enqueue(30)
    webhook_worker(queues=["default"])
    wait_until(lambda: status_of(result) == JobStatus.RUNNING, 10)
    assert django_outbox.cancel(result) == "requested"
    assert django_outbox.cancel(result) == "running"  # asked once is enough
    wait_until(lambda: status_of(result) == JobStatus.SUCCEEDED, 10)
    assert (
        Job.objects.for_result(result.id).get().return_value
        == "saw the request: True; finished my work"
    )


def test_a_finished_job_is_left_as_it_is_and_an_unknown_one_is_an_error(run_worker):
    result = tasks.add.enqueue(1, 2)
    run_worker()
    assert django_outbox.cancel(result) == "succeeded"
    with pytest.raises(TaskResultDoesNotExist, match="No job"):
        django_outbox.cancel(10**9)
    with pytest.raises(TaskResultDoesNotExist, match="not a job's result id"):
        django_outbox.cancel("seven")


def test_retry_now_starts_a_fresh_run_without_the_old_stop_request():
    from django_outbox.jobs import operations

    result = tasks.add.enqueue(1, 2)
    Job.objects.for_result(result.id).update(status=JobStatus.RUNNING)
    assert django_outbox.cancel(result) == "requested"
    Job.objects.for_result(result.id).update(status=JobStatus.CANCELLED)
    operations.retry_now(Job.objects.for_result(result.id))
    job = Job.objects.for_result(result.id).get()
    assert job.status == JobStatus.QUEUED and job.cancel_requested_at is None


def test_a_job_asked_to_stop_whose_worker_died_ends_cancelled_not_run_again():
    from datetime import timedelta

    from django.utils import timezone

    from django_outbox.jobs import leases

    result = tasks.add.enqueue(1, 2)
    Job.objects.for_result(result.id).update(
        status=JobStatus.RUNNING, worker_id="gone", lease_until=timezone.now() - timedelta(1)
    )
    django_outbox.cancel(result)
    assert leases.rescue_expired().failed == 1
    job = Job.objects.for_result(result.id).get()
    assert job.status == JobStatus.CANCELLED and job.finished_at is not None
