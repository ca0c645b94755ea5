"""Rate limits: token buckets shared by every worker, in Redis or in the database; per queue
(jobs per second) and per webhook endpoint (requests per second). Held back is not failed.

Every bucket test runs against both stores, both real: the test database and the Redis at
OUTBOX_TEST_REDIS_URL.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from datetime import timedelta
from itertools import pairwise

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.test.utils import override_settings
from django.utils import timezone

from django_outbox import conf, ratelimits, webhooks
from django_outbox.jobs.claim import claim_batch
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Delivery, DeliveryStatus, Job, JobStatus, RateBucket
from django_outbox.ratelimits import Rate
from tests import tasks
from tests.conftest import wait_until
from tests.models import Execution
from tests.receiver import Answer

STORES = ["database", "redis"]


@pytest.fixture(autouse=True)
def _fresh_buckets():
    """Each test starts with empty buckets (the database's are emptied by the test run;
    Redis's here), and a test that breaks Redis does not leave the next on the database."""
    from django_redis import get_redis_connection

    client = get_redis_connection(settings.OUTBOX["REDIS_ALIAS"])
    for key in client.scan_iter(match="*:django_outbox:*:rate:*"):
        client.delete(key)
    ratelimits._redis_down_until = 0.0
    yield
    ratelimits._redis_down_until = 0.0


def outbox(**extra):
    return override_settings(OUTBOX=settings.OUTBOX | extra)


def unique_key() -> str:
    return f"test:{time.monotonic_ns()}"


# -- the buckets -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_a_fresh_bucket_gives_its_burst_then_says_when_the_next_token_comes(store):
    with outbox(RATE_LIMIT_STORE=store):
        assert ratelimits.store_name() == store
        key, rate = unique_key(), Rate.of(10, burst=3)
        first = ratelimits.take(key, rate, 5)
        assert first.granted == 3
        # A token every 0.1 s: the next one is 0.1 s after the bucket's clock read, less
        # what passed before the answer was read (MariaDB's take is two statements).
        assert 0.05 < first.retry_in <= 0.101
        began = time.monotonic()
        second = ratelimits.take(key, rate, 5)
        assert second.granted == 0
        assert 0.0 < second.retry_in <= 0.101
        time.sleep(0.25)  # 2.5 tokens' worth at 10/s
        third = ratelimits.take(key, rate, 5).granted

        # The next token came second.retry_in after the second take, then one every 0.1 s,
        # never more than the burst. The takes' clocks read at least 0.25 s apart, and at
        # most what this process measured (a loaded box oversleeps: CI saw 3 here).
        def tokens(seconds: float) -> int:
            return min(3, 1 + int((seconds - second.retry_in) * 10))

        assert tokens(0.25) <= third <= tokens(time.monotonic() - began)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_tokens_given_back_can_be_taken_again(store):
    with outbox(RATE_LIMIT_STORE=store):
        key, rate = unique_key(), Rate.of(1, burst=4)
        assert ratelimits.take(key, rate, 4).granted == 4
        ratelimits.give_back(key, rate, 3)
        assert ratelimits.take(key, rate, 4).granted == 3
        assert ratelimits.take(key, rate, 1).granted == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_reservations_line_up_one_interval_apart(store):
    with outbox(RATE_LIMIT_STORE=store):
        key, rate = unique_key(), Rate.of(20, burst=2)
        # Each reservation's moment lies between "before the call + wait" and "after the
        # call + wait": a slow call (a loaded machine) widens the window, never the gap.
        slots, waits = [], []
        for _ in range(6):
            before = time.monotonic()
            wait = ratelimits.reserve(key, rate)
            after = time.monotonic()
            waits.append(wait)
            slots.append((before + wait, after + wait))
        assert waits[:2] == [0.0, 0.0]  # the burst goes now
        for n, ((earliest, latest), (next_earliest, next_latest)) in enumerate(
            pairwise(slots[1:]), start=1
        ):
            # A turn already due when its call answered goes at once (wait 0): its slot
            # may lie before the call (MariaDB reads the clock in a second statement, and
            # CI's loaded box saw 23 ms between them), so only the next one bounds it.
            if waits[n] > 0:
                assert next_latest - earliest >= 0.05 - 0.01
            assert next_earliest - latest <= 0.05 + 0.01


def grants_of_an_exact_bucket(calls: list[float], started: float, rate: float) -> int:
    """How many of `calls` (the times they were answered) a bucket of one token, full at
    `started` and refilled at `rate` a second, would grant."""
    tokens, last, granted = 1.0, started, 0
    for at in sorted(calls):
        tokens, last = min(1.0, tokens + (at - last) * rate), at
        if tokens >= 1.0:
            tokens, granted = tokens - 1.0, granted + 1
    return granted


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_threads_sharing_a_bucket_get_no_more_than_the_rate_together(store):
    with outbox(RATE_LIMIT_STORE=store):
        key, rate = unique_key(), Rate.of(20, burst=1)
        granted = []
        answered = []  # when each call returned
        lock = threading.Lock()
        started = time.monotonic()

        def asked_enough() -> bool:
            # At least a second, and far more calls than the rate grants in it (a loaded
            # machine answers fewer a second: it asks for longer), but never past 10 s.
            now = time.monotonic()
            return now - started >= 10.0 or (now - started >= 1.0 and len(granted) >= 100)

        def hammer():
            from django.db import connections

            try:
                while not asked_enough():
                    got = ratelimits.take(key, rate, 1).granted
                    with lock:
                        granted.append(got)
                        answered.append(time.monotonic())
            finally:
                connections.close_all()

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        assert len(granted) >= 100  # they asked far more often than the rate allows
        # One at once, then 20 a second: never more. And not much less than an exact bucket
        # would grant the same calls: a bucket of one keeps no token for a caller who is
        # late, so a spell in which no call was answered loses its tokens.
        assert sum(granted) <= 1 + 20 * elapsed + 1
        assert sum(granted) >= 0.8 * grants_of_an_exact_bucket(answered, started, 20)


@pytest.mark.django_db(transaction=True)
def test_buckets_in_the_database_are_rows_and_in_redis_are_not():
    with outbox(RATE_LIMIT_STORE="database"):
        ratelimits.take("queue:seen", Rate.of(5), 1)
    assert RateBucket.objects.filter(key="queue:seen").exists()
    with outbox(RATE_LIMIT_STORE="redis"):
        ratelimits.take("queue:unseen", Rate.of(5), 1)
    assert not RateBucket.objects.filter(key="queue:unseen").exists()


@pytest.mark.django_db(transaction=True)
def test_a_redis_that_is_down_hands_the_buckets_to_the_database(caplog):
    caches = settings.CACHES | {
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
        }
    }
    with override_settings(CACHES=caches), outbox(RATE_LIMIT_STORE="redis", REDIS_ALIAS="down"):
        with caplog.at_level(logging.WARNING, logger="django_outbox.ratelimits"):
            grant = ratelimits.take("queue:fallback", Rate.of(5, burst=2), 3)
        assert grant.granted == 2  # limited all the same
        assert "Redis failed" in caplog.text and "using the database" in caplog.text
        assert ratelimits.store_name() == "database"  # for a while, without asking Redis
    assert RateBucket.objects.filter(key="queue:fallback").exists()


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ({"q": {"rate": 0}}, "OUTBOX['QUEUES']['q']['rate'] must be a number greater than 0"),
        ({"q": {"rate": -2}}, "['rate'] must be a number greater than 0"),
        ({"q": {"rate": "10/s"}}, "['rate'] must be a number greater than 0 and at most 10,000"),
        ({"q": {"rate": float("nan")}}, "['rate'] must be a number"),
        ({"q": {"rate": 20_000}}, "at most 10,000, not 20000"),
        ({"q": {"rate": 5, "burst": 0}}, "['burst'] must be a whole number greater than 0"),
        ({"q": {"rate": 5, "burst": 2.5}}, "['burst'] must be a whole number"),
        ({"q": {"burst": 3}}, "['burst'] needs a 'rate' (jobs per second) to go with it."),
        ({"q": {}}, "OUTBOX['QUEUES']['q'] must set 'concurrency', 'rate', or both."),
        ({"q": {"rates": 5}}, "OUTBOX['QUEUES']['q']['rates'] is not a known setting"),
    ],
)
def test_bad_rate_settings_are_refused_with_a_clear_message(queues, message):
    with outbox(QUEUES=queues), pytest.raises(ImproperlyConfigured) as caught:
        conf.get()
    assert message in str(caught.value)


def test_an_unknown_rate_limit_store_is_refused():
    with outbox(RATE_LIMIT_STORE="memcached"), pytest.raises(ImproperlyConfigured) as caught:
        conf.get()
    assert "OUTBOX['RATE_LIMIT_STORE'] must be one of auto, redis, database" in str(caught.value)


def test_a_rates_burst_defaults_to_one_seconds_worth():
    with outbox(QUEUES={"a": {"rate": 2.5}, "b": {"rate": 0.1}, "c": {"rate": 4, "burst": 9}}):
        limits = conf.get().rate_limits(["a", "b", "c", "d"])
    assert limits == {"a": Rate(2.5, 3), "b": Rate(0.1, 1), "c": Rate(4.0, 9)}


# -- queues ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_a_claim_takes_no_more_jobs_than_tokens_and_the_rest_keep_their_place(store):
    rated = tasks.add.using(queue_name="rated")
    results = [rated.enqueue(i, i) for i in range(5)]
    before = {job.pk: job.run_at for job in Job.objects.all()}
    with outbox(RATE_LIMIT_STORE=store, QUEUES={"rated": {"rate": 1, "burst": 2}}):
        first = claim_batch("w1", ["rated"], 10, 30)
        assert [job.id for job in first.jobs] == [parse_result_id(r.id).pk for r in results[:2]]
        assert 0.5 < first.retry_in <= 1.0  # it got 2 of 10: when to look for more
        second = claim_batch("w1", ["rated"], 10, 30)
        assert second.jobs == []
        assert 0.5 < second.retry_in <= 1.0  # when to look again
    waiting = Job.objects.filter(status=JobStatus.QUEUED)
    assert waiting.count() == 3
    for job in waiting:  # not failed, not counted, not moved back
        assert (job.attempts, job.run_at, job.errors) == (0, before[job.pk], [])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_tokens_a_claim_did_not_use_go_back_to_the_bucket(store):
    with outbox(RATE_LIMIT_STORE=store, QUEUES={"rated": {"rate": 0.5, "burst": 5}}):
        tasks.add.using(queue_name="rated").enqueue(1, 1)
        assert len(claim_batch("w1", ["rated"], 10, 30).jobs) == 1  # took 5, used 1
        for i in range(6):
            tasks.add.using(queue_name="rated").enqueue(i, i)
        assert len(claim_batch("w1", ["rated"], 10, 30).jobs) == 4


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_a_rated_queue_runs_at_its_rate_and_other_queues_do_not_wait(store, run_worker):
    rated = tasks.record_run.using(queue_name="rated")
    for i in range(12):
        rated.enqueue(f"rated-{i}")
    quick = [tasks.add.enqueue(i, i) for i in range(20)]
    with outbox(RATE_LIMIT_STORE=store, QUEUES={"rated": {"rate": 10, "burst": 1}}):
        stats = run_worker(queues=["default", "rated"], concurrency=4)
    assert stats.failed == 0 and stats.retried == 0
    runs = list(Execution.objects.order_by("started"))
    assert len(runs) == 12
    # One at once, then one every 0.1 s: 11 intervals at least (a little clock slack).
    assert runs[-1].started - runs[0].started >= timedelta(seconds=1.0)
    for window_start in runs:
        in_window = [r for r in runs if timedelta(0) <= r.started - window_start.started]
        in_window = [
            r for r in in_window if r.started - window_start.started < timedelta(seconds=0.5)
        ]
        assert len(in_window) <= 1 + 5 + 1  # the burst, half a second's rate, rounding
    assert set(Job.objects.filter(queue="rated").values_list("status", "attempts")) == {
        (JobStatus.SUCCEEDED, 1)
    }
    last_quick = max(Job.objects.for_result(r.id).get().finished_at for r in quick)
    assert last_quick < runs[-1].started  # the unlimited queue was not held up


@pytest.mark.django_db(transaction=True)
def test_a_claim_takes_no_more_rated_jobs_than_the_worker_has_idle_threads():
    for i in range(6):
        tasks.add.using(queue_name="rated").enqueue(i, i)
        tasks.add.enqueue(i, i)
    with outbox(RATE_LIMIT_STORE="database", QUEUES={"rated": {"rate": 100, "burst": 100}}):
        claimed = claim_batch("w1", ["default", "rated"], 10, 30, rated_room=2).jobs
    assert sorted(job.queue for job in claimed) == ["default"] * 6 + ["rated"] * 2
    # The tokens of the jobs it did not take went back.
    assert ratelimits.take("queue:rated", Rate(100, 100), 100).granted >= 97


@pytest.mark.django_db(transaction=True)
def test_a_long_running_worker_comes_back_for_a_rated_queue_at_its_next_token(
    webhook_worker,
):
    # Wake-ups would not bring it back: the jobs were all committed before it started.
    rated = tasks.add.using(queue_name="rated")
    results = [rated.enqueue(i, i) for i in range(12)]
    with outbox(RATE_LIMIT_STORE="redis", QUEUES={"rated": {"rate": 20, "burst": 2}}):
        started = time.monotonic()
        webhook_worker(concurrency=4, queues=["rated"])
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 12,
            timeout=20,
            what="the rated queue to drain",
        )
    # 2 at once, then 20 a second: about half a second; the stalled check is 5 s here.
    assert time.monotonic() - started < 3.0
    assert {Job.objects.for_result(r.id).get().attempts for r in results} == {1}


# -- tasks may hold themselves back ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_task_that_raises_rate_limited_runs_again_then_without_spending_an_attempt(
    run_worker,
):
    result = tasks.held_back_once.enqueue()  # max_attempts 1: a spent attempt would fail it
    started = timezone.now()
    stats = run_worker()
    job = Job.objects.for_result(result.id).get()
    assert (job.status, job.return_value, job.attempts) == (JobStatus.SUCCEEDED, "sent", 1)
    assert job.errors == [] and len(job.worker_ids) == 1
    assert job.finished_at - started >= timedelta(seconds=0.3)
    assert stats.held == 1


# -- webhook endpoints -------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, "5", float("nan"), float("inf"), True, 10_001])
def test_a_bad_endpoint_rate_limit_is_refused(bad):
    with pytest.raises(ValidationError) as caught:
        webhooks.create_endpoint("https://hooks.example.com/in", rate_limit=bad)
    assert "rate_limit must be a number of requests per second above 0" in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_set_rate_limit_changes_and_removes_an_endpoints_limit():
    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", rate_limit=3)
    assert endpoint.rate_limit == 3.0
    webhooks.set_rate_limit(endpoint, 0.5)
    endpoint.refresh_from_db()
    assert endpoint.rate_limit == 0.5
    with pytest.raises(ValidationError):
        webhooks.set_rate_limit(endpoint, -1)
    webhooks.set_rate_limit(endpoint, None)
    endpoint.refresh_from_db()
    assert endpoint.rate_limit is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_an_endpoints_rate_limit_spreads_its_deliveries_and_fails_none(
    store, receiver, webhook_worker
):
    limited = webhooks.create_endpoint(receiver.url("/limited"), rate_limit=5)  # burst 5
    webhooks.create_endpoint(receiver.url("/free"))
    with outbox(RATE_LIMIT_STORE=store):
        worker = webhook_worker(concurrency=8)
        sent = time.monotonic()  # the receiver's clock; the bucket fills no earlier than this
        sent_at = []
        for i in range(15):
            webhooks.send("order.placed", {"n": i})
            sent_at.append(time.monotonic())
        sending = time.monotonic() - sent  # the bucket refills while the sends go on
        wait_until(
            lambda: not Delivery.objects.filter(status=DeliveryStatus.PENDING).exists(),
            timeout=30,
            what="every delivery to be sent",
        )
    arrived = sorted(r.started for r in receiver.at("/limited"))
    assert len(arrived) == 15  # each sent once
    # Five at once, then five a second: the last ten arrive two seconds after the first
    # take at least. Measured from the send, as the first request can reach the receiver
    # late (a new connection) while the others keep their turns.
    assert arrived[-1] - sent >= 1.9
    for start in arrived:
        assert sum(1 for t in arrived if start <= t < start + 1.0) <= 5 + 5 + 1
    # The other endpoint is not held up: each of its deliveries arrives soon after its
    # send committed (at five a second, the last ones would wait two seconds and more).
    free = {json.loads(r.body)["data"]["n"]: r.started for r in receiver.at("/free")}
    assert sorted(free) == list(range(15))
    late = {n: round(at - sent_at[n], 2) for n, at in free.items() if at - sent_at[n] >= 1.5}
    assert late == {}, late
    deliveries = Delivery.objects.filter(endpoint=limited)
    assert {(d.status, d.attempt_log.count()) for d in deliveries} == {
        (DeliveryStatus.SUCCEEDED, 1)
    }
    jobs = Job.objects.filter(queue="webhooks")
    assert {(job.status, job.attempts) for job in jobs} == {(JobStatus.SUCCEEDED, 1)}
    assert jobs.filter(kwargs__has_key="rate_turn").count() == worker.stats.held
    # The ten beyond the burst waited their turn, but for those the bucket refilled while
    # the sends went on (five a second: on a loaded machine fifteen sends take a while).
    assert worker.stats.held >= 10 - 1 - math.floor(5 * sending)
    # Each waited once, for the turn it reserved, and was not held again.
    assert worker.stats.held <= 10 + 2
    assert limited.pk not in {d.endpoint_id for d in Delivery.objects.filter(status="failed")}


@pytest.mark.django_db(transaction=True)
def test_a_retry_after_a_reserved_turn_waits_for_a_token_of_its_own(receiver, webhook_worker):
    receiver.script("/limited", Answer(500), Answer(200))
    webhooks.create_endpoint(receiver.url("/limited"), rate_limit=1)  # burst 1
    with outbox(RATE_LIMIT_STORE="database"):
        webhook_worker(concurrency=4)
        webhooks.send("order.placed", {"n": 1})
        webhooks.send("order.placed", {"n": 2})
        wait_until(
            lambda: not Delivery.objects.filter(status=DeliveryStatus.PENDING).exists(),
            timeout=30,
            what="both deliveries to be sent",
        )
    arrived = sorted(r.started for r in receiver.at("/limited"))
    assert len(arrived) == 3  # one first attempt failed (500) and was retried
    # The retry schedule says 0.2 s, but one request a second is the endpoint's limit.
    for earlier, later in pairwise(arrived):
        assert later - earlier >= 0.9


@pytest.mark.django_db(transaction=True)
def test_a_turn_missed_long_ago_sends_only_if_a_token_is_free_now():
    from django.db import transaction

    from django_outbox.exceptions import RateLimited
    from django_outbox.webhooks.delivery import _wait_for_turn

    endpoint = webhooks.create_endpoint("https://hooks.example.com/in", rate_limit=1)
    with transaction.atomic():
        webhooks.send("order.placed", {"n": 1})
    delivery = Delivery.objects.select_related("endpoint").get(endpoint=endpoint)
    late = {"at": time.time() - 60, "attempt": 1}
    with outbox(RATE_LIMIT_STORE="database"):
        _wait_for_turn(delivery, 1, late)  # a free token: it goes
        with pytest.raises(RateLimited) as held:
            _wait_for_turn(delivery, 1, late)  # none left: a new turn, not a flood
        assert held.value.kwargs["rate_turn"]["attempt"] == 1
        assert 0.5 < held.value.kwargs["rate_turn"]["at"] - time.time() <= 1.0
        # A turn reserved for attempt 1 does not let attempt 2 skip the line.
        on_time = {"at": time.time(), "attempt": 1}
        with pytest.raises(RateLimited):
            _wait_for_turn(delivery, 2, on_time)
        _wait_for_turn(delivery, 1, on_time)  # attempt 1 at its turn: goes, not charged


# -- per key -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", STORES)
def test_a_rate_key_spreads_each_keys_runs_and_leaves_other_keys_alone(store, run_worker):
    """5 runs a second per tenant, a burst of 1: each tenant's six runs take a second or
    more, and the two tenants' runs go side by side, not one tenant after the other."""
    with outbox(RATE_LIMIT_STORE=store):
        for n in range(6):
            tasks.per_tenant.enqueue(1, n)
            tasks.per_tenant.enqueue(2, n)
        for _ in range(100):
            run_worker(concurrency=4)
            if not Job.objects.filter(status__in=["queued", "running"]).exists():
                break
            time.sleep(0.05)
    assert set(Job.objects.values_list("status", flat=True)) == {"succeeded"}
    # A held-back run is no attempt, and the task never saw the turn it noted.
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}, list(
        Job.objects.filter(attempts__gt=1).values("attempts", "errors", "worker_ids", "kwargs")
    )
    assert set(Execution.objects.values_list("attempt", flat=True)) == {1}
    assert Job.objects.filter(kwargs__has_key="outbox_rate_turn").exists()
    starts = {
        tenant: sorted(e.started for e in Execution.objects.filter(key__startswith=f"{tenant}:"))
        for tenant in (1, 2)
    }
    enqueued = min(Job.objects.values_list("enqueued_at", flat=True))
    for tenant, times in starts.items():
        assert len(times) == 6
        # Six turns 0.2 s apart: the last cannot start before a second after the first
        # token, taken after the enqueue. (A run late for its turn goes at once, so the
        # first and last runs can be closer than that on a busy machine.)
        assert (times[-1] - enqueued).total_seconds() >= 0.95, (tenant, enqueued, times)
    # Side by side: tenant 2 started before tenant 1 had finished, and the other way round.
    assert starts[2][0] < starts[1][-1] and starts[1][0] < starts[2][-1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_key": "a"}, "rate_key and rate_limit go together"),
        ({"rate_limit": 5}, "rate_key and rate_limit go together"),
        ({"rate_key": "a", "rate_limit": 0}, "rate_limit must be"),
        ({"rate_key": "a", "rate_limit": "5"}, "rate_limit must be"),
        ({"rate_key": "a", "rate_limit": 5, "rate_burst": 0}, "rate_burst must be"),
        ({"rate_key": "", "rate_limit": 5}, "non-empty string"),
    ],
)
def test_bad_rate_key_options_are_refused(options, message):
    from django_outbox.compat import InvalidTask

    with pytest.raises(InvalidTask, match=message):
        tasks.noop.using(**options)
