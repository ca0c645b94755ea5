"""Real ``runworker`` processes against the test database, and real signals."""

import contextlib
import signal
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

import django_outbox
from django_outbox import webhooks
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Job, JobStatus, Worker
from testproject.shop.models import Customer, Order
from tests import tasks
from tests.conftest import wait_until
from tests.models import Execution, Once
from tests.receiver import Answer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_2000_jobs_through_2_processes_of_4_threads_each_run_exactly_once(start_worker):
    django_outbox.enqueue_many(tasks.record_once, [((f"key-{i}",), {}) for i in range(2000)])
    worker = start_worker("--processes", "2", "--concurrency", "4", "--burst")
    assert worker.wait(timeout=240) == 0, worker.log()
    assert Once.objects.count() == 2000
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 2000
    assert not Job.objects.filter(attempts__gt=1).exists()
    assert len({w for ids in Job.objects.values_list("worker_ids", flat=True) for w in ids}) == 2


def test_a_request_enqueues_in_its_transaction_and_a_worker_runs_the_job(start_worker):
    client = Client()
    assert client.post("/signup/", {"email": "ada@example.com"}).status_code == 201
    assert client.post("/signup/", {"email": "ada@example.com"}).status_code == 409
    assert Job.objects.count() == 1  # the refused signup enqueued nothing
    response = client.post("/orders/", {"email": "ada@example.com", "amount": "12.50"})
    assert response.status_code == 201
    worker = start_worker("--queues", "reports", "--burst")
    assert worker.wait() == 0, worker.log()
    order = Order.objects.get()
    assert order.invoice_number == f"INV-{order.pk:06d}"
    assert Customer.objects.get().welcomed_at is None  # the emails queue was not asked for


def test_kill_9_mid_job_runs_the_job_again_after_its_lease_and_loses_nothing(start_worker):
    victim = tasks.record_run.enqueue("victim", seconds=1.0)
    # At least once: jobs the dead worker ran but had not yet recorded run again, so the
    # others are idempotent here.
    others = django_outbox.enqueue_many(tasks.add, [((i, 1), {}) for i in range(50)])
    first = start_worker("--concurrency", "2")
    wait_until(lambda: Execution.objects.filter(key="victim").exists(), what="the victim to start")
    first.send(signal.SIGKILL)
    first.wait()
    lease_at_kill = Job.objects.for_result(victim.id).get().lease_until
    assert Job.objects.for_result(victim.id).get().status == JobStatus.RUNNING

    second = start_worker("--concurrency", "2")
    wait_until(
        lambda: Job.objects.for_result(victim.id).get().status == JobStatus.SUCCEEDED,
        what="the victim to run again",
    )
    runs = list(Execution.objects.filter(key="victim").order_by("attempt"))
    assert [(r.attempt, r.finished is not None) for r in runs] == [(1, False), (2, True)]
    assert runs[1].started >= lease_at_kill  # not before the dead worker's lease ran out
    job = Job.objects.for_result(victim.id).get()
    assert job.errors[0]["exception_class_path"] == "django_outbox.exceptions.WorkerLost"
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 51,
        what="every other job to succeed",
    )
    assert sorted(
        Job.objects.filter(task_path="tests.tasks.add").values_list("return_value", flat=True)
    ) == [i + 1 for i in range(len(others))]
    second.send(signal.SIGTERM)
    assert second.wait() == 0


def test_sigterm_lets_the_running_job_finish_and_puts_unstarted_ones_back(start_worker):
    jobs = django_outbox.enqueue_many(tasks.record_run, [(("drain",), {"seconds": 1.5})] * 4)
    worker = start_worker("--concurrency", "1", "--batch-size", "4", "--queues", "slow")
    wait_until(lambda: Execution.objects.exists(), what="the first job to start")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
    statuses = sorted(Job.objects.values_list("status", "attempts"))
    assert statuses == [("queued", 0)] * 3 + [("succeeded", 1)]
    assert Execution.objects.get().finished is not None
    log = worker.log()
    assert "received SIGTERM" in log
    assert "put 3 claimed, unstarted jobs back" in log
    assert len(jobs) == 4


def test_a_second_sigint_exits_at_once_and_leaves_the_job_leased(start_worker):
    result = tasks.record_run.enqueue("long", seconds=30)
    worker = start_worker("--queues", "slow")
    wait_until(lambda: Execution.objects.exists(), what="the job to start")
    started = time.monotonic()
    worker.send(signal.SIGINT)
    time.sleep(0.3)
    worker.send(signal.SIGINT)
    assert worker.wait(timeout=10) == 130
    assert time.monotonic() - started < 5
    assert Job.objects.for_result(result.id).get().status == JobStatus.RUNNING
    assert "second SIGINT: exiting now" in worker.log()


def test_the_supervisor_replaces_a_worker_process_that_dies(start_worker):
    supervisor = start_worker("--processes", "2")
    wait_until(lambda: Worker.objects.filter(stopped_at=None).count() == 2, what="2 workers")
    victim = Worker.objects.filter(stopped_at=None).first()
    import os

    os.kill(victim.pid, signal.SIGKILL)
    wait_until(lambda: Worker.objects.count() == 3, what="a replacement worker")
    result = tasks.add.enqueue(20, 22)
    wait_until(
        lambda: Job.objects.for_result(result.id).get().status == JobStatus.SUCCEEDED,
        what="the replacement fleet to run a job",
    )
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait() == 0, supervisor.log()
    assert "was killed by SIGKILL; starting another" in supervisor.log()
    alive_after_stop = Worker.objects.filter(stopped_at=None).exclude(pk=victim.pk)
    assert not alive_after_stop.exists()  # both live ones said goodbye


def test_a_process_with_a_thread_stuck_past_a_timeout_drains_and_is_replaced(start_worker):
    stuck = tasks.overruns.enqueue(600)  # timeout 0.2 s: its thread is stuck for good
    supervisor = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(
        lambda: Job.objects.for_result(stuck.id).get().status == JobStatus.FAILED,
        what="the stuck job to be recorded as timed out",
    )
    # The process that ran it leaves, and a fresh one takes its place.
    wait_until(lambda: Worker.objects.count() == 3, what="a replacement worker")
    wait_until(lambda: Worker.objects.filter(stopped_at=None).count() == 2, what="two live workers")
    result = tasks.add.enqueue(20, 22)
    wait_until(
        lambda: Job.objects.for_result(result.id).get().status == JobStatus.SUCCEEDED,
        what="the fleet to run a job",
    )
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait() == 0, supervisor.log()
    log = supervisor.log()
    assert "its thread cannot be stopped and is still running here" in log
    assert "time.sleep(seconds)" in log
    assert "drained after a job's thread got stuck past its timeout; starting a fresh one" in log
    job = Job.objects.for_result(stuck.id).get()
    assert job.errors[0]["exception_class_path"] == "django_outbox.exceptions.JobTimeout"


def _terminate_the_other_connections() -> None:
    """Cut every other connection to the test database, as an administrator would."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return
        cursor.execute(
            "SELECT ID FROM information_schema.PROCESSLIST "
            "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
        )
        for (pid,) in cursor.fetchall():
            with contextlib.suppress(Exception):  # it left meanwhile
                cursor.execute(f"KILL CONNECTION {int(pid)}")


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite has no connections to cut")
def test_a_worker_survives_its_connections_being_terminated(start_worker):
    django_outbox.enqueue_many(
        tasks.record_run, [((f"job-{i}",), {"seconds": 0.02}) for i in range(200)]
    )
    worker = start_worker("--queues", "slow", "--concurrency", "4")
    for _ in range(3):
        wait_until(lambda: Execution.objects.exists(), what="jobs to start")
        time.sleep(0.3)
        _terminate_the_other_connections()
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 200,
        timeout=60,
        what="every job to succeed despite the lost connections",
    )
    assert worker.process.poll() is None, worker.log()
    assert "database error" in worker.log()
    assert set(Execution.objects.filter(finished__isnull=False).values_list("key", flat=True)) == {
        f"job-{i}" for i in range(200)
    }
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()


def test_a_job_that_never_returns_does_not_keep_the_worker_from_exiting(start_worker):
    result = tasks.overruns.enqueue(60)
    worker = start_worker("--burst", "--shutdown-timeout", "1")
    started = time.monotonic()
    assert worker.wait(timeout=20) == 1, worker.log()  # 1: a thread was left running
    assert time.monotonic() - started < 10
    # Failed at its timeout (max_attempts 1), not left leased to the stuck thread.
    job = Job.objects.for_result(result.id).get()
    assert (job.status, job.worker_id) == (JobStatus.FAILED, None)
    assert "over its 200 ms timeout" in worker.log()


def test_delayed_and_prioritised_jobs_run_in_order_and_not_early(start_worker):
    worker = start_worker("--queues", "slow", "--concurrency", "1", "--batch-size", "1")
    wait_until(lambda: Worker.objects.exists(), what="the worker to start")
    now = timezone.now()
    with transaction.atomic():
        # Both due from the same instant: a claim that began between two enqueues of this
        # transaction (on SQLite it then waits for the write lock) takes only the jobs due
        # at its instant, and `high`, enqueued a moment later, would not yet be one of them.
        low = tasks.record_run.using(priority=-10, run_after=now).enqueue("low")
        high = tasks.record_run.using(priority=10, run_after=now).enqueue("high")
        soon = tasks.record_run.using(priority=-20, run_after=now + timedelta(seconds=0.7))
        soon = soon.enqueue("soon")
        later = tasks.record_run.using(priority=-20, run_after=now + timedelta(seconds=1.5))
        later = later.enqueue("later")
    wait_until(lambda: Execution.objects.filter(finished__isnull=False).count() == 4, what="4 runs")
    runs = {r.key: r for r in Execution.objects.all()}
    assert runs["high"].started < runs["low"].started < runs["soon"].started < runs["later"].started
    for result, key in [(soon, "soon"), (later, "later")]:
        assert runs[key].started >= Job.objects.for_result(result.id).get().run_at  # never early
    assert runs["later"].started - Job.objects.for_result(later.id).get().run_at < timedelta(
        seconds=1
    )
    ran = {r.job_id for r in runs.values()}
    assert {parse_result_id(high.id).pk, parse_result_id(low.id).pk} <= ran
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_request_in_flight_when_its_worker_is_killed_is_in_the_attempt_log(
    start_worker, receiver
):
    """kill -9 while the endpoint holds the request: the next worker logs that attempt as
    interrupted before it sends again, so the log holds every request the endpoint got."""
    receiver.script("/hook", Answer(delay=10), Answer())
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    first = start_worker("--queues", "webhooks")
    wait_until(lambda: receiver.at("/hook"), what="the first request to arrive")
    first.send(signal.SIGKILL)
    first.wait()
    start_worker("--queues", "webhooks")
    delivery = message.deliveries.get()
    wait_until(
        lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.SUCCEEDED,
        what="the delivery to succeed on the second worker",
    )
    logged = Attempt.objects.filter(delivery=delivery).order_by("number")
    assert [(a.number, a.status_code, a.error_class) for a in logged] == [
        (1, None, "Interrupted"),
        (2, 200, ""),
    ]
    requests = receiver.at("/hook")
    assert len(requests) == 2 == logged.count()
    assert {r.headers["webhook-id"] for r in requests} == {message.uid}


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_burst_worker_whose_claim_the_database_refuses_says_so_and_exits_non_zero(
    start_worker, processes
):
    """Not "nothing is due" and exit 0: the job table is missing, as before `migrate`."""
    from django_outbox.worker.supervisor import CANNOT_CLAIM_STATUS

    tasks.add.enqueue(1, 2)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE django_outbox_job RENAME TO django_outbox_job_away")
    try:
        worker = start_worker("--burst", "--processes", processes)
        status = worker.wait(timeout=60)
        log = worker.log()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE django_outbox_job_away RENAME TO django_outbox_job")
    assert status == CANNOT_CLAIM_STATUS, log
    # PostgreSQL refuses the claim (ProgrammingError); SQLite's "no such table" comes as an
    # OperationalError, like a lost connection: the burst gives up after its tries.
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert errors and all("django_outbox_job" in line for line in errors), log
    assert "cannot claim jobs" in errors[0] or "cannot look for due jobs" in errors[0], log
    assert "nothing is due" not in log
    assert Job.objects.get().status == JobStatus.QUEUED  # nothing lost
