"""Rows of keys nobody uses any more go away; a key in use, or used again, keeps working."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.jobs import idlekeys, keys
from django_outbox.models import Job, JobStatus, LimitKey
from tests.tasks import in_sequence, per_customer

pytestmark = pytest.mark.django_db(transaction=True)


def later(seconds: float = idlekeys.IDLE_KEY_SECONDS + 1):
    return timezone.now() + timedelta(seconds=seconds)


def dead_keys(count: int) -> None:
    """``count`` key rows without a job, last written long ago."""
    old = timezone.now() - timedelta(days=1)
    LimitKey.objects.bulk_create(
        [LimitKey(key=f"concurrency:gone-{n:06}", updated_at=old) for n in range(count)],
        batch_size=1000,
    )


def test_keys_without_jobs_are_forgotten_and_keys_in_use_are_kept(run_worker):
    in_sequence.enqueue(7, 0)
    run_worker(queues=["default"])  # order 7's job ran: its key has no job left
    for n in range(3):
        per_customer.enqueue(1, n)  # two queued (its limit is 2), one held: in use
    per_customer.enqueue(2, 0)
    dead_keys(5)
    assert idlekeys.forget_idle(later(), idle_seconds=0) == 6  # five dead, and order 7
    assert sorted(LimitKey.objects.values_list("key", flat=True)) == [
        "concurrency:customer-1",
        "concurrency:customer-2",
    ]
    waiting = Job.objects.exclude(status=JobStatus.SUCCEEDED).values_list("status", flat=True)
    assert sorted(waiting) == ["held", "queued", "queued", "queued"]


def test_a_key_written_lately_is_kept_until_it_has_been_idle_a_while():
    in_sequence.enqueue(8, 0)
    Job.objects.update(status=JobStatus.SUCCEEDED)  # ended: no job left under the key
    assert idlekeys.forget_idle() == 0  # written a moment ago
    assert idlekeys.forget_idle(later()) == 1
    assert not LimitKey.objects.exists()


def test_a_sequence_held_by_its_failed_job_keeps_its_row():
    in_sequence.enqueue(9, 0)
    job = Job.objects.get()
    Job.objects.update(status=JobStatus.FAILED)
    LimitKey.objects.update(held_by=job.pk)
    assert idlekeys.forget_idle(later()) == 0
    assert LimitKey.objects.get().held_by == job.pk


def test_a_key_used_again_after_it_was_forgotten_works_as_new(run_worker):
    in_sequence.enqueue(10, 0)
    run_worker(queues=["default"])
    assert idlekeys.forget_idle(later()) == 1
    first, second = in_sequence.enqueue(10, 1), in_sequence.enqueue(10, 2)
    assert LimitKey.objects.get().key == "sequence:order-10"
    assert [Job.objects.for_result(r.id).get().status for r in (first, second)] == [
        "queued",
        "held",
    ]
    run_worker(queues=["default"])
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 3


def test_the_sweep_still_gives_turns_once_many_dead_keys_are_forgotten():
    for n in range(2):
        in_sequence.enqueue(11, n)  # one queued, one held
    dead_keys(3000)
    assert idlekeys.forget_idle(later()) == 3000
    assert list(LimitKey.objects.values_list("key", flat=True)) == ["sequence:order-11"]
    Job.objects.filter(status=JobStatus.QUEUED).delete()  # by hand: its turn is free
    assert keys.sweep() == 1
    assert list(Job.objects.values_list("status", flat=True)) == ["queued"]


def test_keys_in_use_are_not_locked_or_counted_against_the_bound(monkeypatch):
    monkeypatch.setattr(idlekeys, "FORGET_CHUNK", 100)
    monkeypatch.setattr(idlekeys, "FORGET_MOST", 250)
    for n in range(300):
        per_customer.enqueue(n, 0)  # 300 keys in use, their rows long unwritten
    LimitKey.objects.update(updated_at=timezone.now() - timedelta(days=1))
    dead_keys(200)
    with CaptureQueriesContext(connection) as queries:
        assert idlekeys.forget_idle() == 200
    # The keys in use sort first ("customer" < "gone"): had they been picked, counted
    # against the bound, the call would have stopped before the dead ones' second chunk.
    deletes = [
        q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("DELETE")
    ]
    assert len(deletes) == 2
    assert LimitKey.objects.count() == 300


def test_a_job_retried_after_its_key_was_forgotten_gets_its_turn(run_worker):
    from django_outbox.jobs import operations

    result = per_customer.enqueue(5, 0)
    Job.objects.update(status=JobStatus.FAILED)
    assert idlekeys.forget_idle(later()) == 1
    assert operations.retry_now(Job.objects.all()).done == 1
    assert LimitKey.objects.get().limit == 2  # per_customer's concurrency_limit
    assert Job.objects.for_result(result.id).get().status == JobStatus.QUEUED
    run_worker(queues=["default"])
    assert Job.objects.for_result(result.id).get().status == JobStatus.SUCCEEDED


def test_a_call_forgets_at_most_its_bound_in_chunks(monkeypatch):
    monkeypatch.setattr(idlekeys, "FORGET_CHUNK", 100)
    monkeypatch.setattr(idlekeys, "FORGET_MOST", 250)
    dead_keys(400)
    with CaptureQueriesContext(connection) as queries:
        assert idlekeys.forget_idle() == 300  # three chunks: the bound is passed in the third
    deletes = [
        q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("DELETE")
    ]
    assert len(deletes) == 3
    assert idlekeys.forget_idle() == 100
    assert not LimitKey.objects.exists()


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has one writer: no enqueue runs beside it"
)
def test_a_key_row_an_enqueue_holds_is_skipped_and_kept():
    """A key row an enqueue's transaction holds is skipped; once that enqueue commits its
    job is there, and the key stays."""
    in_sequence.enqueue(12, 0)
    Job.objects.update(status=JobStatus.SUCCEEDED)
    entered, release = threading.Event(), threading.Event()

    def enqueue_in_a_long_transaction() -> None:
        try:
            with transaction.atomic():
                in_sequence.enqueue(12, 1)
                entered.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue_in_a_long_transaction)
    thread.start()
    try:
        assert entered.wait(10)
        assert idlekeys.forget_idle(later()) == 0  # its row is locked: skipped
    finally:
        release.set()
        thread.join(10)
    assert idlekeys.forget_idle(later()) == 0  # its job is there now
    assert LimitKey.objects.get().key == "sequence:order-12"
    assert Job.objects.filter(status=JobStatus.QUEUED).count() == 1


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has one writer: no enqueue runs beside it"
)
def test_an_enqueue_waiting_on_a_key_row_being_deleted_writes_it_anew():
    """As forget_idle does it: the row locked and deleted in one transaction, while an
    enqueue under the key waits for it; once it commits the enqueue writes the row anew
    and its job is queued."""
    in_sequence.enqueue(13, 0)
    Job.objects.all().delete()
    done = threading.Event()

    def enqueue_under_the_key() -> None:
        try:
            in_sequence.enqueue(13, 1)
        finally:
            done.set()
            connections.close_all()

    with transaction.atomic():
        list(LimitKey.objects.select_for_update().filter(key="sequence:order-13"))
        thread = threading.Thread(target=enqueue_under_the_key)
        thread.start()
        assert not done.wait(0.5)  # it waits for the row
        LimitKey.objects.filter(key="sequence:order-13").delete()
    thread.join(10)
    assert done.is_set()
    assert LimitKey.objects.get().key == "sequence:order-13"
    assert list(Job.objects.values_list("status", flat=True)) == ["queued"]
