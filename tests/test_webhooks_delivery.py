"""Deliveries end to end: a worker on a thread, a real HTTP receiver on 127.0.0.1.

Test settings: http:// and 127.0.0.1/32 allowed, a 2 s request timeout, and a retry
schedule of [0, 0.2, 0.2, 0.2] (four attempts, retries within 0.2 s).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from itertools import pairwise

import pytest
from django.conf import settings
from django.test import override_settings
from standardwebhooks import Webhook

from django_outbox import conf, webhooks
from django_outbox.models import Attempt, Delivery, DeliveryStatus, Endpoint, Job, JobStatus
from django_outbox.webhooks import recording, signals
from tests.conftest import wait_until
from tests.receiver import Answer
from tests.statements import job_threads_reading, statements_in_every_thread

pytestmark = pytest.mark.django_db(transaction=True)


def settled(delivery_or_message, timeout: float = 20.0) -> list[Delivery]:
    """Wait until every delivery of a message (or this delivery) is no longer pending and
    its job is done; return them fresh."""
    if isinstance(delivery_or_message, Delivery):
        query = Delivery.objects.filter(pk=delivery_or_message.pk)
    else:
        query = Delivery.objects.filter(message=delivery_or_message)

    def done():
        rows = list(query.all())  # a fresh query each time
        active = Job.objects.filter(
            queue="webhooks", status__in=[JobStatus.QUEUED, JobStatus.RUNNING]
        )
        if rows and all(d.status != DeliveryStatus.PENDING for d in rows) and not active.exists():
            return rows
        return None

    return wait_until(done, timeout=timeout, what="the deliveries to settle")


def attempts_of(delivery: Delivery) -> list[Attempt]:
    return list(Attempt.objects.filter(delivery=delivery).order_by("number"))


@pytest.fixture
def caught():
    """Every webhook signal sent during the test, as (name, kwargs)."""
    seen = []
    names = [
        "webhook_delivery_failed",
        "webhook_delivery_exhausted",
        "webhook_delivery_recovered",
        "webhook_endpoint_disabled",
    ]
    receivers = {}
    for name in names:

        def receive(sender, _name=name, **kwargs):
            seen.append((_name, kwargs))

        receivers[name] = receive
        getattr(signals, name).connect(receive)
    yield seen
    for name, receive in receivers.items():
        getattr(signals, name).disconnect(receive)


def test_a_delivery_arrives_signed_and_is_logged(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 7, "amount": "12.00"})
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempts == 1
    (request,) = receiver.at("/hook")
    assert request.body == message.body.encode()
    assert Webhook(endpoint.secret).verify(request.body, request.headers) == {
        "type": "invoice.paid",
        "timestamp": json.loads(message.body)["timestamp"],
        "data": {"id": 7, "amount": "12.00"},
    }
    assert request.headers["webhook-id"] == message.uid
    assert request.headers["content-type"] == "application/json"
    (attempt,) = attempts_of(delivery)
    assert (attempt.number, attempt.status_code, attempt.succeeded) == (1, 200, True)
    assert attempt.response_body == "ok" and attempt.duration > 0
    assert Job.objects.get(queue="webhooks").status == JobStatus.SUCCEEDED


def test_a_500_is_retried_and_the_recovery_signalled(receiver, webhook_worker, caught):
    receiver.script("/hook", Answer(500, body=b"down"), Answer(503), Answer(200))
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.SUCCEEDED
    log = attempts_of(delivery)
    assert [(a.number, a.status_code, a.succeeded) for a in log] == [
        (1, 500, False),
        (2, 503, False),
        (3, 200, True),
    ]
    assert log[0].response_body == "down"
    assert all(later.started_at > earlier.started_at for earlier, later in pairwise(log))
    requests = receiver.at("/hook")
    assert len({r.headers["webhook-id"] for r in requests}) == 1  # the same id each time
    # Signals follow the commit of the attempt and its job's outcome, on the worker's thread.
    wait_until(lambda: len(caught) == 3, what="three signals")
    assert [name for name, _ in caught] == [
        "webhook_delivery_failed",
        "webhook_delivery_failed",
        "webhook_delivery_recovered",
    ]
    # Each signal carries the attempt as it was stored.
    sent = [kwargs["attempt"] for _, kwargs in caught]
    assert [(a.pk, a.number, a.status_code, a.succeeded) for a in sent] == [
        (a.pk, a.number, a.status_code, a.succeeded) for a in log
    ]
    assert sent[0].response_body == "down" and sent[0].delivery == delivery


def test_a_retried_deliverys_job_says_why_in_one_line_and_counts_the_schedules_attempts(
    receiver, webhook_worker, admin_client, caplog
):
    caplog.set_level(logging.WARNING, "django_outbox.worker")
    receiver.script("/hook", Answer(500), Answer(200))
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    settled(message)
    job = Job.objects.get(queue="webhooks")
    (retried,) = job.errors
    assert retried["exception_class_path"] == "django_outbox.exceptions.RetryAt"
    assert retried["traceback"].startswith("django_outbox.exceptions.RetryAt: attempt 1 to ")
    assert ": HTTP 500; next attempt in " in retried["traceback"]
    assert retried["traceback"].count("\n") == 1  # the one line, not the worker's frames
    schedule = len(conf.get().WEBHOOKS.RETRY_SCHEDULE)
    listed = admin_client.get("/admin/django_outbox/job/").content.decode()
    assert f'title="2 of {schedule} attempts used">2/{schedule}<' in listed
    page = admin_client.get(f"/admin/django_outbox/job/{job.pk}/change/").content.decode()
    assert f"{schedule}, as the webhook retry schedule says" in page
    assert "HTTP 500; next attempt in" in page
    (logged,) = [r.getMessage() for r in caplog.records if "runs again" in r.getMessage()]
    assert (
        "(django_outbox.webhooks.tasks.deliver) runs again when it asked: "
        f"attempt 1 to {receiver.url()}: HTTP 500; next attempt in" in logged
    )
    assert " of 18" not in caplog.text


def test_a_delivery_that_keeps_failing_is_failed_after_the_schedule(
    receiver, webhook_worker, caught
):
    receiver.script("/hook", Answer(500))
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)

    schedule = settings.OUTBOX["WEBHOOKS"]["RETRY_SCHEDULE"]
    assert delivery.status == DeliveryStatus.FAILED
    assert len(attempts_of(delivery)) == len(receiver.at("/hook")) == len(schedule)
    assert delivery.next_attempt_at is None
    job = Job.objects.get(queue="webhooks")
    assert job.status == JobStatus.FAILED and "last attempt" in job.errors[-1]["traceback"]
    wait_until(lambda: len(caught) == len(schedule), what="a signal per attempt")
    assert [name for name, _ in caught][-1] == "webhook_delivery_exhausted"


def test_a_timeout_and_a_refused_connection_are_logged_and_retried(receiver, webhook_worker):
    receiver.script("/slow", Answer(200, delay=1.5), Answer(200))
    slow = webhooks.create_endpoint(receiver.url("/slow"), timeout=0.5)
    with socket.socket() as spare:  # a port nobody listens on
        spare.bind(("127.0.0.1", 0))
        closed_port = spare.getsockname()[1]
    webhooks.create_endpoint(f"http://127.0.0.1:{closed_port}/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    deliveries = {d.endpoint_id: d for d in settled(message)}

    first, second = attempts_of(deliveries[slow.pk])
    assert first.error_class == "ReadTimeout" and first.status_code is None
    assert "0.5 s" in first.error_message and first.duration < 1.4
    assert second.succeeded
    refused = next(d for pk, d in deliveries.items() if pk != slow.pk)
    assert refused.status == DeliveryStatus.FAILED
    assert {a.error_class for a in attempts_of(refused)} == {"ConnectError"}


def test_redirects_are_not_followed(receiver, webhook_worker):
    receiver.script("/moved", Answer(301, headers={"location": receiver.url("/elsewhere")}))
    webhooks.create_endpoint(receiver.url("/moved"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    assert delivery.status == DeliveryStatus.FAILED
    assert {a.status_code for a in attempts_of(delivery)} == {301}
    assert receiver.at("/elsewhere") == []


def test_a_cookie_one_receiver_sets_is_never_sent_to_the_next(receiver, webhook_worker):
    # Two tenants' endpoints on one host: what the first one's answer sets must not travel.
    receiver.script("/a", Answer(headers={"set-cookie": "session=tenant-a; Path=/"}))
    on_a_host = receiver.url("").replace("127.0.0.1", "localhost")
    webhooks.create_endpoint(f"{on_a_host}/a", tenant="a")
    webhooks.create_endpoint(f"{on_a_host}/b", tenant="b")
    first = webhooks.send("invoice.paid", {"id": 1}, tenant="a")
    webhook_worker()
    assert [d.status for d in settled(first)] == [DeliveryStatus.SUCCEEDED]
    second = webhooks.send("invoice.paid", {"id": 2}, tenant="b")
    assert [d.status for d in settled(second)] == [DeliveryStatus.SUCCEEDED]
    (to_b,) = receiver.at("/b")
    assert "cookie" not in to_b.headers
    assert attempts_of(settled(first)[0])[0].response_headers["set-cookie"].startswith("session")


def test_410_gone_disables_the_endpoint_at_once(receiver, webhook_worker, caught):
    receiver.script("/gone", Answer(410))
    endpoint = webhooks.create_endpoint(receiver.url("/gone"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)

    assert delivery.status == DeliveryStatus.FAILED and len(attempts_of(delivery)) == 1
    # The endpoint's health follows the commit of the attempt, on the worker's thread.
    wait_until(lambda: "webhook_endpoint_disabled" in dict(caught), what="the endpoint disabled")
    endpoint.refresh_from_db()
    assert not endpoint.active and "410" in endpoint.disabled_reason
    assert (
        "webhook_endpoint_disabled",
        {"endpoint": endpoint, "reason": endpoint.disabled_reason},
    ) in [(name, {k: v for k, v in kw.items() if k != "signal"}) for name, kw in caught]
    # Nothing more goes to it, and what is sent is refused with a clear reason.
    later = webhooks.send("invoice.paid", {"id": 2})
    assert not later.deliveries.exists()


def test_a_huge_body_is_cut_at_4_kib_and_a_slow_one_at_the_timeout(receiver, webhook_worker):
    receiver.script("/huge", Answer(200, body=b"x" * (10 * 1024 * 1024)))
    receiver.script("/drip", Answer(200, body=b"y" * 4000, pieces=40, piece_delay=0.1))
    receiver.script("/bytes", Answer(500, body=b"\xff\xfe\x00bad"), Answer(200))
    huge = webhooks.create_endpoint(receiver.url("/huge"))
    drip = webhooks.create_endpoint(receiver.url("/drip"), timeout=1.0)
    raw = webhooks.create_endpoint(receiver.url("/bytes"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    deliveries = {d.endpoint_id: d for d in settled(message)}

    (big,) = attempts_of(deliveries[huge.pk])
    assert big.succeeded and big.response_body == "x" * 4096
    slow = attempts_of(deliveries[drip.pk])[0]
    assert slow.status_code == 200 and len(slow.response_body) < 4000 and slow.duration < 2.5
    odd = attempts_of(deliveries[raw.pk])[0]
    assert odd.response_body == "\ufffd\ufffd\\x00bad"


def test_retry_after_is_honoured_within_the_schedule(receiver, webhook_worker):
    receiver.script("/busy", Answer(429, headers={"retry-after": "1"}), Answer(200))
    webhooks.create_endpoint(receiver.url("/busy"))
    # The schedule alone would retry within 0.2 s; Retry-After asks for 1 s, which the
    # schedule's largest step (3 s) allows.
    schedule = [0, 0.2, 3]
    outbox = settings.OUTBOX | {
        "WEBHOOKS": settings.OUTBOX["WEBHOOKS"] | {"RETRY_SCHEDULE": schedule}
    }
    with override_settings(OUTBOX=outbox):
        message = webhooks.send("invoice.paid", {"id": 1})
        webhook_worker()
        settled(message)
    first, second = receiver.at("/busy")
    assert 0.9 <= second.started - first.started < 2.5, "waited for Retry-After, within bounds"


def test_a_secret_rotation_sends_both_signatures(receiver, webhook_worker):
    endpoint = webhooks.create_endpoint(receiver.url())
    old = endpoint.secret
    new = webhooks.rotate_secret(endpoint)
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    settled(message)
    (request,) = receiver.at("/hook")
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert Webhook(secret).verify(request.body, request.headers)


def test_a_hostname_that_resolves_to_a_private_address_is_refused_on_every_attempt(
    webhook_worker, monkeypatch
):
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):  # the DNS answer is the edge we do not own
        if host == "internal.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 443))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    webhooks.create_endpoint("https://internal.example/hook")  # a hostname: checked later
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    attempts = attempts_of(delivery)
    # Refused each time, retried on the schedule (what a host resolves to can change).
    assert delivery.status == DeliveryStatus.FAILED
    assert len(attempts) == len(settings.OUTBOX["WEBHOOKS"]["RETRY_SCHEDULE"])
    assert {a.error_class for a in attempts} == {"UnsafeDestination"}
    assert attempts[0].error_message.startswith(
        "internal.example resolves to 10.0.0.1, a private address; refused"
    )


def test_a_refused_destination_is_retried_and_goes_out_once_the_settings_allow_it(
    receiver, webhook_worker
):
    webhooks.create_endpoint(receiver.url("/hook"))  # 127.0.0.1: the test settings allow it
    refusing = settings.OUTBOX["WEBHOOKS"] | {
        "ALLOWED_NETWORKS": [],
        "RETRY_SCHEDULE": [0, 2, 2, 2],
    }
    with override_settings(OUTBOX=settings.OUTBOX | {"WEBHOOKS": refusing}):
        message = webhooks.send("invoice.paid", {"id": 1})
        webhook_worker()
        wait_until(lambda: Attempt.objects.exists(), what="the first attempt")
        delivery = Delivery.objects.get(message=message)
        assert delivery.status == DeliveryStatus.PENDING  # not failed for good
    (delivery,) = settled(message)  # the settings allow it again: the retry goes out
    attempts = attempts_of(delivery)
    assert delivery.status == DeliveryStatus.SUCCEEDED
    assert attempts[0].error_class == "UnsafeDestination"
    assert attempts[0].error_message.startswith(
        "the host is 127.0.0.1, a loopback address; refused"
    )
    assert attempts[-1].succeeded and len(receiver.at("/hook")) == 1


def test_the_connection_goes_to_the_address_checked_no_second_lookup(
    receiver, webhook_worker, monkeypatch
):
    """DNS rebinding: the first answer passes the check; a second lookup would say
    10.0.0.1. The request reaches the receiver, so no second lookup happened."""
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"] + ["10.0.0.1"] * 10)

    def resolver(host, port, *args, **kwargs):
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    webhooks.create_endpoint(f"http://rebind.example:{receiver.port}/hook")
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED
    (request,) = receiver.at("/hook")
    assert request.headers["host"] == f"rebind.example:{receiver.port}"


def test_an_attempt_that_succeeded_before_a_crash_is_not_sent_again(receiver, webhook_worker):
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    # As if a worker sent it, logged the attempt, and died before completing the job.
    Attempt.objects.create(
        delivery=delivery,
        number=1,
        started_at=delivery.created_at,
        duration=0.01,
        succeeded=True,
        status_code=200,
    )
    # Its job's run was counted when it was claimed; the rescue queued it again.
    Job.objects.filter(queue="webhooks").update(attempts=1, worker_ids=["a-dead-worker"])
    webhook_worker()
    (delivery,) = settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED
    assert receiver.at("/hook") == []
    assert Job.objects.get(queue="webhooks").return_value == (
        "attempt 1 had succeeded already: not sent again"
    )


WORKER_LOST = {
    "exception_class_path": "django_outbox.exceptions.WorkerLost",
    "traceback": "WorkerLost: the worker stopped renewing its lease",
}


def _as_if_its_first_run_was_cut() -> None:
    """The delivery job's state after a worker claimed it, died, and the rescue took it
    back: one run counted, WorkerLost in its errors."""
    Job.objects.filter(queue="webhooks").update(
        attempts=1, worker_ids=["a-dead-worker"], errors=[WORKER_LOST]
    )


def test_a_run_cut_before_it_logged_its_attempt_is_logged_as_interrupted(receiver, webhook_worker):
    """The dead worker may have sent the request: the log says so, as attempt 1, and the
    next request is attempt 2."""
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    _as_if_its_first_run_was_cut()
    webhook_worker()
    (delivery,) = settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.attempts == 2
    logged = [(a.number, a.succeeded, a.status_code, a.error_class) for a in attempts_of(delivery)]
    assert logged == [(1, False, None, "Interrupted"), (2, True, 200, "")]
    assert "may or may not have got the request" in attempts_of(delivery)[0].error_message
    assert len(receiver.at("/hook")) == 1


def test_a_run_cut_after_it_logged_its_attempt_adds_nothing_to_the_log(receiver, webhook_worker):
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    delivery = message.deliveries.get()
    Attempt.objects.create(
        delivery=delivery, number=1, started_at=delivery.created_at, duration=0.01,
        status_code=500,
    )  # fmt: skip
    _as_if_its_first_run_was_cut()
    webhook_worker()
    (delivery,) = settled(message)
    logged = [(a.number, a.status_code, a.error_class) for a in attempts_of(delivery)]
    assert logged == [(1, 500, ""), (2, 200, "")]


def test_retries_that_ended_normally_log_no_interrupted_attempt(receiver, webhook_worker):
    receiver.script("/hook", Answer(500), Answer(500), Answer(200))
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    logged = [(a.number, a.status_code, a.error_class) for a in attempts_of(delivery)]
    assert logged == [(1, 500, ""), (2, 500, ""), (3, 200, "")]


def test_an_endpoint_failing_for_its_window_is_disabled(receiver, webhook_worker, caught):
    receiver.script("/down", Answer(500))
    endpoint = webhooks.create_endpoint(receiver.url("/down"))
    hooks = settings.OUTBOX["WEBHOOKS"] | {
        # The schedule's three jittered waits (each below 0.2 s) sum to more than this but
        # for a chance of about 1 in 50,000; 0.3 s was within their range, and failed at times.
        "DISABLE_AFTER_SECONDS": 0.01,
        "DISABLE_AFTER_ATTEMPTS": 3,
    }
    with override_settings(OUTBOX=settings.OUTBOX | {"WEBHOOKS": hooks}):
        first = webhooks.send("invoice.paid", {"id": 1})
        webhook_worker()
        (delivery,) = settled(first)  # 4 attempts over more than 0.01 s
        # The endpoint's health follows the commit of the attempt, on the worker's thread.
        wait_until(lambda: "webhook_endpoint_disabled" in dict(caught), what="the disabling")
        assert not webhooks.send("invoice.paid", {"id": 2}).deliveries.exists()
    assert delivery.status == DeliveryStatus.FAILED
    endpoint.refresh_from_db()
    assert not endpoint.active
    assert endpoint.disabled_reason == "every attempt failed for 10 ms, 3 or more in a row"
    assert endpoint.consecutive_failures >= 3
    assert "webhook_endpoint_disabled" in [name for name, _ in caught]


def test_the_failing_reason_reads_as_a_duration_and_a_count():
    from django_outbox.webhooks.recording import failing_reason

    assert failing_reason() == "every attempt failed for 5 days, 20 or more in a row"
    hooks = {"DISABLE_AFTER_SECONDS": 3600, "DISABLE_AFTER_ATTEMPTS": 1_000_000}
    with override_settings(OUTBOX={"WEBHOOKS": hooks}):
        assert failing_reason() == "every attempt failed for 1 h, 1,000,000 or more in a row"


def test_a_success_resets_the_failure_count(receiver, webhook_worker):
    receiver.script("/flaky", Answer(500), Answer(200))
    endpoint = webhooks.create_endpoint(receiver.url("/flaky"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    settled(message)
    # The endpoint's health follows the commit of the attempt, on the worker's thread.
    wait_until(
        lambda: Endpoint.objects.filter(pk=endpoint.pk, consecutive_failures=0).exists(),
        what="the count reset",
    )
    endpoint.refresh_from_db()
    assert (endpoint.failing_since, endpoint.consecutive_failures) == (None, 0)


def test_two_workers_never_send_the_same_delivery_at_the_same_time(receiver, webhook_worker):
    receiver.script("/hook", Answer(200, delay=0.2))
    Endpoint.objects.bulk_create(
        Endpoint(url=receiver.url(), secret=webhooks.signing.generate_secret()) for _ in range(20)
    )
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker(concurrency=8)
    webhook_worker(concurrency=8)
    deliveries = settled(message)
    assert {d.status for d in deliveries} == {DeliveryStatus.SUCCEEDED}
    requests = receiver.at("/hook")
    assert len(requests) == 20 == Attempt.objects.count()
    # One request per endpoint: the signature differs per endpoint secret.
    assert len({r.headers["webhook-signature"] for r in requests}) == 20


def test_a_claimed_batch_shares_its_lookups_and_writes_and_so_do_its_retries(
    receiver, webhook_worker, monkeypatch
):
    stored: list[str] = []  # the thread that stored each batch of attempts
    store = recording.store
    monkeypatch.setattr(
        recording,
        "store",
        lambda records: (
            stored.extend([threading.current_thread().name] * len(records)) or store(records)
        ),
    )

    count = 16
    for i in range(count):  # each fails once, then succeeds
        receiver.script(f"/hook/{i}", Answer(500), Answer(200))
    Endpoint.objects.bulk_create(
        Endpoint(url=receiver.url(f"/hook/{i}"), secret=webhooks.signing.generate_secret())
        for i in range(count)
    )
    message = webhooks.send("invoice.paid", {"id": 1})
    with statements_in_every_thread() as statements:
        webhook_worker(concurrency=count)
        deliveries = settled(message)
    assert {d.status for d in deliveries} == {DeliveryStatus.SUCCEEDED}
    assert Attempt.objects.count() == 2 * count
    # 32 attempts: the first 16, started at once, share a few loads (the first to look
    # loads for those started with it); the 16 retries, falling due over 0.2 s, gather
    # for 50 ms each: a few more loads, each with one lookup of the latest attempts. Far
    # fewer than one per attempt either way.
    loads = job_threads_reading(Delivery._meta.db_table, statements)
    lookups = job_threads_reading(Attempt._meta.db_table, statements)
    assert len(loads) <= 4 + 6, len(loads)
    assert len(lookups) <= 6, len(lookups)
    # Every attempt was logged with its job's outcome, by the worker, in shared batches:
    # none by a job thread on its own (outside a worker's run).
    assert len(stored) == 2 * count, stored
    assert not [thread for thread in stored if thread.startswith("outbox-job-")], stored


def test_first_attempts_queued_behind_the_threads_are_loaded_ahead_by_those_before_them(
    receiver, webhook_worker
):
    count = 60
    Endpoint.objects.bulk_create(
        Endpoint(url=receiver.url(f"/many/{i}"), secret=webhooks.signing.generate_secret())
        for i in range(count)
    )
    message = webhooks.send("invoice.paid", {"id": 1})
    with statements_in_every_thread() as statements:
        webhook_worker(concurrency=4)
        deliveries = settled(message)
    assert {d.status for d in deliveries} == {DeliveryStatus.SUCCEEDED}
    assert len(receiver.received) == count
    # A load takes the jobs behind it that the worker holds, up to two rounds of its 4
    # threads: 8 at a time, 8 loads, a few more when a claim or a slow round splits them.
    # Gathering the threads' own lookups could do no better than 4 at a time, 15 loads.
    loads = job_threads_reading(Delivery._meta.db_table, statements)
    assert len(loads) <= 12, len(loads)
    assert job_threads_reading(Attempt._meta.db_table, statements) == []  # first attempts


def test_one_process_sends_at_most_max_per_endpoint_requests_to_an_endpoint_at_once(
    receiver, webhook_worker
):
    receiver.script("/narrow", Answer(200, delay=0.3))
    webhooks.create_endpoint(receiver.url("/narrow"))
    hooks = settings.OUTBOX["WEBHOOKS"] | {"MAX_PER_ENDPOINT": 2}
    with override_settings(OUTBOX=settings.OUTBOX | {"WEBHOOKS": hooks}):
        from django_outbox.webhooks import http

        http._per_endpoint.clear()  # slots are sized when first used
        messages = [webhooks.send("invoice.paid", {"id": n}) for n in range(6)]
        webhook_worker(concurrency=6)
        for message in messages:
            settled(message)
        http._per_endpoint.clear()
    requests = receiver.at("/narrow")
    assert len(requests) == 6
    most = max(
        sum(1 for other in requests if other.started <= r.started < other.finished)
        for r in requests
    )
    assert most <= 2, most


def test_an_odd_retry_after_header_neither_breaks_a_success_nor_a_retry(receiver, webhook_worker):
    receiver.script("/odd-ok", Answer(200, headers={"retry-after": "\u00b2"}))
    receiver.script("/odd-busy", Answer(503, headers={"retry-after": "\u00b2"}), Answer(200))
    webhooks.create_endpoint(receiver.url("/odd-ok"))
    webhooks.create_endpoint(receiver.url("/odd-busy"))
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    deliveries = settled(message)
    assert {d.status for d in deliveries} == {DeliveryStatus.SUCCEEDED}
    assert len(receiver.at("/odd-ok")) == 1 and len(receiver.at("/odd-busy")) == 2
    assert Attempt.objects.count() == 3


def test_resending_a_delivered_message_sends_it_again_as_a_new_round(receiver, webhook_worker):
    webhooks.create_endpoint(receiver.url())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    assert webhooks.resend(delivery) is True
    wait_until(lambda: len(receiver.at("/hook")) == 2, what="the resend to arrive")
    (delivery,) = settled(message)
    assert delivery.status == DeliveryStatus.SUCCEEDED and delivery.resent_at is not None
    assert [a.number for a in attempts_of(delivery)] == [1, 1]  # a new round


def test_response_headers_are_kept_as_httpx_would_show_them():
    from django_outbox.webhooks.http import MAX_HEADERS, _kept_headers

    raw = [(b"X-Seen", b"1"), (b"x-seen", b"2"), (b"X-Odd", b"\xb2"), (b"X-Nul", b"a\x00b")]
    assert _kept_headers(raw) == {"x-seen": "1, 2", "x-odd": "\u00b2", "x-nul": "a\\x00b"}
    many = [(f"x-{n}".encode(), b"v") for n in range(MAX_HEADERS + 10)]
    assert len(_kept_headers(many)) == MAX_HEADERS


def test_a_stale_run_never_undoes_what_a_newer_run_wrote():
    """A run that lost its lease (its worker cut off for longer) writes its attempt late:
    the attempt is logged, but the delivery keeps what the newer run wrote."""
    from django.utils import timezone

    from django_outbox.webhooks import recording
    from django_outbox.webhooks.http import Response
    from django_outbox.webhooks.policy import Decision, Verdict

    webhooks.create_endpoint("https://hooks.example.com/in")
    done, waiting = (webhooks.send("invoice.paid", {"id": n}).deliveries.get() for n in (1, 2))
    Delivery.objects.filter(pk=done.pk).update(status=DeliveryStatus.SUCCEEDED, attempts=2)
    Delivery.objects.filter(pk=waiting.pk).update(attempts=3)  # a newer run is at attempt 3

    def stale(delivery: Delivery, number: int) -> recording.Record:
        answer = Response(started_at=timezone.now(), status_code=500)
        return recording.Record(delivery, number, answer, Decision(Verdict.RETRY, 60.0))

    recording.write([stale(done, 1), stale(waiting, 2)])
    done.refresh_from_db()
    waiting.refresh_from_db()
    assert (done.status, done.attempts) == (DeliveryStatus.SUCCEEDED, 2)
    assert (waiting.status, waiting.attempts) == (DeliveryStatus.PENDING, 3)
    assert Attempt.objects.filter(status_code=500).count() == 2  # both are in the log

    recording.write([stale(waiting, 4)])  # a current run still writes
    waiting.refresh_from_db()
    assert waiting.attempts == 4


def test_an_endpoint_url_no_request_can_go_to_fails_at_once(webhook_worker):
    # Stored past the checks (a raw insert, an old row): no later attempt could send it.
    Endpoint.objects.create(url="ftp://example.com/hook", secret=webhooks.signing.generate_secret())
    message = webhooks.send("invoice.paid", {"id": 1})
    webhook_worker()
    (delivery,) = settled(message)
    (attempt,) = attempts_of(delivery)
    assert delivery.status == DeliveryStatus.FAILED
    assert attempt.error_class == "UnsupportedProtocol"


def test_each_worker_thread_sends_through_its_own_connections():
    """No lock shared by every thread on each request's start and end: each thread has its
    own pool (and keeps it), all of them guarded, with one TLS setup for the process."""
    import threading

    from django_outbox.webhooks import http
    from django_outbox.webhooks.guard import GuardedBackend

    seen = []

    def look():
        seen.append((http.pool(), http.pool()))

    threads = [threading.Thread(target=look) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(first is second for first, second in seen)  # kept by its thread
    assert len({id(first) for first, _ in seen}) == 3  # one per thread
    assert all(isinstance(p._network_backend, GuardedBackend) for p, _ in seen)
    assert len({id(p._ssl_context) for p, _ in seen}) == 1


def test_a_delivery_to_an_endpoint_disabled_since_it_was_sent_says_why(webhook_worker):
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in")
    message = webhooks.send("invoice.paid", {"id": 1})
    webhooks.disable(endpoint, "in the admin by alice")
    webhook_worker()
    (delivery,) = settled(message)
    (attempt,) = attempts_of(delivery)
    assert delivery.status == DeliveryStatus.FAILED
    assert attempt.error_message == (
        "The endpoint is disabled (in the admin by alice): nothing is sent to it until it is "
        "enabled again."
    )
