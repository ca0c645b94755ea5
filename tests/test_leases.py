from datetime import timedelta

import pytest
from django.utils import timezone

from django_outbox.jobs import leases
from django_outbox.jobs.claim import claim
from django_outbox.models import Job, JobStatus, Worker
from tests.statements import names, update_returning

pytestmark = pytest.mark.django_db


def test_heartbeat_renews_every_lease_the_worker_holds_in_one_statement(
    job_factory, django_assert_num_queries
):
    soon = timezone.now() + timedelta(seconds=1)
    mine = job_factory.create_batch(3, running=True, worker_id="w1", lease_until=soon)
    theirs = job_factory(running=True, worker_id="w2", lease_until=soon)
    Worker.objects.create(id="w1", hostname="h", pid=1, concurrency=1)
    renew = update_returning("heartbeat")
    # The leases, the worker's heartbeat time.
    with django_assert_num_queries(len(renew) + 1) as queries:
        assert leases.heartbeat("w1", 60).count == 3
    assert names(queries)[: len(renew)] == renew
    for job in Job.objects.filter(pk__in=[j.pk for j in mine]):
        assert job.lease_until > timezone.now() + timedelta(seconds=55)
    assert Job.objects.get(pk=theirs.pk).lease_until == soon


def test_rescue_requeues_expired_leases_and_fails_jobs_out_of_attempts_in_one_statement(
    job_factory, django_assert_num_queries
):
    past = timezone.now() - timedelta(seconds=1)
    retry = job_factory(running=True, lease_until=past, attempts=1, max_attempts=3)
    last = job_factory(running=True, lease_until=past, attempts=3, max_attempts=3)
    alive = job_factory(running=True, lease_until=timezone.now() + timedelta(seconds=30))
    with django_assert_num_queries(len(update_returning("rescue"))) as queries:
        rescued = leases.rescue_expired()
    assert names(queries) == update_returning("rescue")
    assert (rescued.requeued, rescued.failed) == (1, 1)

    retry.refresh_from_db()
    assert retry.status == JobStatus.QUEUED and retry.worker_id is None
    assert retry.run_at > past and retry.finished_at is None
    assert retry.errors[-1]["exception_class_path"] == "django_outbox.exceptions.WorkerLost"
    last.refresh_from_db()
    assert last.status == JobStatus.FAILED and last.finished_at is not None
    assert "stopped renewing its lease" in last.errors[-1]["traceback"]
    alive.refresh_from_db()
    assert alive.status == JobStatus.RUNNING


def test_rescue_never_touches_a_job_that_just_finished(job_factory):
    past = timezone.now() - timedelta(seconds=1)
    done = job_factory(status=JobStatus.SUCCEEDED, lease_until=past, attempts=1)
    assert leases.rescue_expired() == leases.Rescued(requeued=0, failed=0)
    done.refresh_from_db()
    assert done.status == JobStatus.SUCCEEDED and done.errors == []


def test_release_puts_unstarted_jobs_back_as_if_never_claimed(job_factory):
    job_factory.create_batch(2)
    claimed = claim("w1", ["default"], 2, 30)
    assert leases.release("w1", [job.id for job in claimed]) == 2
    for job in Job.objects.all():
        assert job.status == JobStatus.QUEUED
        assert (job.attempts, job.worker_ids, job.started_at, job.worker_id) == (0, [], None, None)


def test_workers_register_and_unregister(db):
    leases.register_worker("w1", ["default"], 4, 123)
    worker = Worker.objects.get()
    assert (worker.pid, worker.queues, worker.concurrency, worker.stopped_at) == (
        123,
        ["default"],
        4,
        None,
    )
    leases.unregister_worker("w1")
    assert Worker.objects.get().stopped_at is not None
