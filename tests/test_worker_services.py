"""The worker's services on their own: inbox, listener, producer and completer."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_outbox import conf
from django_outbox.jobs.claim import claim
from django_outbox.jobs.types import Outcome
from django_outbox.models import Job, JobStatus
from django_outbox.wake import Wake, notify
from django_outbox.wake.notify import Coalescer
from django_outbox.wake.postgres import PostgresWaker, channel_for
from django_outbox.wake.redis import RedisWaker, key_for
from django_outbox.worker import Worker
from django_outbox.worker.completer import Completer
from django_outbox.worker.database import Database
from django_outbox.worker.events import FoundWork, Requeued, SlotsFreed
from django_outbox.worker.inbox import Inbox
from django_outbox.worker.listener import Listener
from django_outbox.worker.maintenance import Maintenance
from django_outbox.worker.pool import Pool
from django_outbox.worker.producer import Producer
from django_outbox.worker.stats import WorkerStats
from tests import tasks
from tests.conftest import stop_pool
from tests.test_wake import Recording, redis_client, require

pytestmark = pytest.mark.django_db(transaction=True)


def later(seconds: float, action) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


# -- the inbox ---------------------------------------------------------------------------


def test_the_inbox_wakes_its_waiter_for_a_signal_or_an_outcome_and_keeps_both():
    inbox = Inbox()
    began = time.monotonic()
    later(0.1, lambda: inbox.put_wake(Wake(look_now=True, queues={"a"})))
    inbox.wait(10)
    assert time.monotonic() - began < 5  # the signal ended the wait, not the timeout
    inbox.put_wake(Wake(next_due=50.0))
    inbox.put_wake(Wake(next_due=20.0, queues={"b"}))
    wake = inbox.take_wake()
    assert (wake.look_now, wake.next_due, wake.queues) == (True, 20.0, {"a", "b"})
    assert inbox.take_wake() == Wake()  # taken once

    began = time.monotonic()
    later(0.1, lambda: inbox.put_outcome("an outcome"))  # type: ignore[arg-type]
    inbox.wait(10)
    assert time.monotonic() - began < 5
    assert inbox.take_outcomes() == ["an outcome"]


def test_with_nothing_new_the_inbox_waits_out_its_timeout_and_a_poke_ends_it():
    inbox = Inbox()
    began = time.monotonic()
    inbox.wait(0.2)
    assert time.monotonic() - began >= 0.19
    later(0.1, inbox.poke)
    began = time.monotonic()
    inbox.wait(10)
    assert time.monotonic() - began < 5
    began = time.monotonic()
    inbox.wait(0.2)  # a poke ends one wait, not every one after it
    assert time.monotonic() - began >= 0.19


# -- the listener ------------------------------------------------------------------------


def test_the_listener_puts_a_postgres_signal_in_the_inbox():
    require("postgres")
    stop, inbox = threading.Event(), Inbox()
    waker = PostgresWaker(["slow"], stop)
    waker.start()
    listener = Listener(waker, inbox, stop)
    listener.start()
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, %s)", [channel_for("slow"), '{"q": "slow", "at": 0}']
            )
        inbox.wait(10)
        assert inbox.take_wake().look_now
    finally:
        listener.stop()


def test_a_redis_listener_takes_no_marker_while_its_worker_has_no_room():
    """A marker wakes one worker: a full worker must leave it to an idle one."""
    require("redis")
    stop, inbox = threading.Event(), Inbox()
    waker = RedisWaker(["slow"], stop)
    waker.start()
    listener = Listener(waker, inbox, stop)
    listener.room(False)
    listener.start()
    key = key_for("redis", "default", "slow")
    try:
        redis_client().zadd(key, {"wake": 0})
        time.sleep(1.5)
        assert redis_client().zcard(key) == 1  # still there for another worker
        assert inbox.take_wake() == Wake()
        listener.room(True)
        inbox.wait(10)
        assert inbox.take_wake().look_now
        assert redis_client().zcard(key) == 0
    finally:
        listener.stop()


# -- the producer ------------------------------------------------------------------------


def producer_for(queues: list[str], concurrency: int = 1, batch_size: int = 2) -> Producer:
    stats = WorkerStats()
    settings = conf.get()
    pool = Pool(concurrency, Inbox())
    return Producer(
        worker_id="w-producer",
        queues=queues,
        backend="default",
        settings=settings,
        concurrency=concurrency,
        batch_size=batch_size,
        adaptive=False,
        db=Database("w-producer", "default", settings.LEASE_SECONDS, stats),
        pool=pool,
        stats=stats,
    )


def test_after_running_dry_the_producer_claims_again_on_a_signal_not_before():
    producer = producer_for(["emails"])
    try:
        assert producer.refill() == 0  # nothing queued: dry, the next look is a poll away
        tasks.email.enqueue("a@b.c")
        assert producer.refill() == 0  # no signal yet: it does not look
        producer.wake(Wake(look_now=True))
        assert producer.refill() == 1
    finally:
        producer.pool.shutdown()


def test_the_producer_claims_again_while_jobs_still_wait_for_its_threads():
    """Not once its threads have run out of work, which left them idle for a claim's time:
    at half a batch beyond the threads, it claims the batch full again."""
    producer = producer_for(["slow"], concurrency=2, batch_size=8)
    pool = producer.pool
    try:
        for n in range(16):
            tasks.record_run.enqueue(f"r{n}", seconds=0.1)
        assert producer.refill() == 8
        assert producer.low_water == 2 + (8 - 2) // 2
        while pool.in_flight > producer.low_water:
            assert producer.refill() == 0  # enough in hand
            pool.inbox.wait(5)
            pool.accept(pool.inbox.take_outcomes())
        waiting = pool.in_flight - pool.running
        claimed = producer.refill()
        assert waiting > 0 and claimed >= 8 - producer.low_water
    finally:
        stop_pool(pool)


def test_a_signal_that_comes_while_the_producer_has_no_room_leads_to_a_claim_later():
    producer = producer_for(["emails"], concurrency=1, batch_size=1)
    pool = producer.pool
    try:
        tasks.email.enqueue("first@b.c")
        assert producer.refill() == 1
        assert not producer.has_room
        tasks.email.enqueue("second@b.c")
        producer.wake(Wake(look_now=True))  # heard while full
        assert producer.refill() == 0
        assert producer.due_at() == float("inf")  # only a run's end brings the loop back
        inbox = pool.inbox
        inbox.wait(10)
        assert len(pool.accept(inbox.take_outcomes())) == 1
        assert producer.refill() == 1  # the kept signal, now that there is room
    finally:
        pool.shutdown()


# -- the completer -----------------------------------------------------------------------


def completer_for(limited: set[str], posted: list) -> Completer:
    stats = WorkerStats()
    return Completer(
        "w-completer",
        Database("w-completer", "default", 30.0, stats),
        stats,
        30.0,
        limited_queues=limited,
        post=posted.append,
    )


def test_a_run_of_a_limited_queue_is_written_at_once_and_its_slot_reported():
    posted: list = []
    completer = completer_for({"limited"}, posted)
    tasks.noop.enqueue()
    tasks.noop.using(queue_name="limited").enqueue()
    jobs = claim("w-completer", ["default", "limited"], 2, 30)
    by_queue = {job.queue: job for job in jobs}

    completer.add([Outcome(by_queue["default"], succeeded=True)])
    completer.flush_if_due(enough=10, running=1, stopping=False)
    assert completer.unflushed  # lingers: more outcomes may join it
    completer.add([Outcome(by_queue["limited"], succeeded=True)])
    completer.flush_if_due(enough=10, running=1, stopping=False)
    assert not completer.unflushed  # written at once: its slot is free
    assert Job.objects.get(pk=by_queue["limited"].id).status == JobStatus.SUCCEEDED
    assert Job.objects.get(pk=by_queue["default"].id).status == JobStatus.SUCCEEDED
    assert posted == [SlotsFreed(Counter({"limited": 1}))]


@pytest.mark.parametrize("busy", [False, True])
def test_a_freed_slot_is_taken_here_or_signalled_to_other_workers(busy):
    """A worker with room takes the slot itself and signals nobody (all the others would
    queue for the queue's lock); a worker without room signals the others."""
    recording = Recording()
    notify._coalescers["default"] = Coalescer(recording)
    worker = Worker(queues=["slow", "limited"], concurrency=1, batch_size=1)
    try:
        if busy:
            tasks.record_run.enqueue("busy", seconds=0.5)
            worker.producer.refill()
            assert not worker.producer.has_room
        recording.sent.clear()
        worker._slots_freed(Counter({"limited": 1}))
        sent = [set(queues) for _at, queues in recording.sent]
        assert sent == ([{"limited"}] if busy else [])
    finally:
        # The busy job runs on the pool's thread: wait for it, or it ends (and writes its
        # Execution row) during a later test.
        stop_pool(worker.pool)
        notify.reset()


def test_the_completer_tells_when_a_retried_run_falls_due():
    posted: list = []
    completer = completer_for(set(), posted)
    tasks.noop.enqueue()
    (job,) = claim("w-completer", ["default"], 1, 30)
    completer.add([Outcome(job, succeeded=False, error={"traceback": "boom"})])
    completer.flush()
    row = Job.objects.get(pk=job.id)
    assert row.status == JobStatus.QUEUED
    assert posted == [Requeued(row.run_at)]


# -- maintenance ---------------------------------------------------------------------------


def maintenance_for(worker_id: str, holding: int, posted: list) -> Maintenance:
    stats = WorkerStats()
    settings = conf.get()
    db = Database(worker_id, "default", settings.LEASE_SECONDS, stats)
    completer = completer_for(set(), [])
    return Maintenance(
        worker_id=worker_id,
        settings=settings,
        db=db,
        completer=completer,
        stats=stats,
        holding=lambda: holding,
        poll_seconds=lambda: 30.0,
        parent_pid=None,
        post=posted.append,
    )


def test_maintenance_renews_the_leases_a_worker_holds_and_rescues_expired_ones(
    job_factory, worker_factory
):
    me = worker_factory()
    mine = job_factory(running=True, worker_id=me.id, lease_until=timezone.now())
    lost = job_factory(
        running=True, worker_id="gone:1:x", lease_until=timezone.now() - timedelta(minutes=1)
    )
    posted: list = []
    maintenance_for(me.id, holding=1, posted=posted).run_due()
    mine.refresh_from_db()
    assert mine.lease_until > timezone.now() + timedelta(seconds=1)  # renewed
    lost.refresh_from_db()
    assert (lost.status, lost.worker_id) == (JobStatus.QUEUED, None)  # taken back
    assert posted == [FoundWork()]  # and the worker looks for it at once


def test_an_idle_worker_only_says_it_is_alive(worker_factory):
    me = worker_factory(heartbeat_at=timezone.now() - timedelta(hours=1))
    posted: list = []
    maintenance = maintenance_for(me.id, holding=0, posted=posted)
    maintenance.run_due()
    me.refresh_from_db()
    assert timezone.now() - me.heartbeat_at < timedelta(seconds=5)
    assert posted == []  # nothing was rescued: no reason to look


@pytest.mark.django_db(transaction=True)
def test_a_stopped_worker_returns_once_its_idle_threads_have_left():
    """run() returns after its job threads have closed their connections and exited: a
    caller that stops a worker (a test suite dropping its database) finds none left."""
    import django_outbox

    django_outbox.enqueue_many(tasks.noop, [((), {})] * 6)
    worker = Worker(queues=["default"], concurrency=3, burst=True)
    worker.run()
    assert worker.stats.succeeded == 6
    assert worker.pool._threads and not any(t.is_alive() for t in worker.pool._threads)
