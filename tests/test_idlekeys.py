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


def test_the_sweep_over_many_forgotten_keys_costs_what_one_over_a_few_does():
    in_sequence.enqueue(11, 0)
    with CaptureQueriesContext(connection) as few:
        keys.sweep()
    dead_keys(3000)
    assert idlekeys.forget_idle(later()) == 3000
    with CaptureQueriesContext(connection) as many:
        keys.sweep()
    assert len(many.captured_queries) == len(few.captured_queries)
    assert list(LimitKey.objects.values_list("key", flat=True)) == ["sequence:order-11"]


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
def test_an_enqueue_holding_the_key_keeps_it_and_one_waiting_on_it_writes_it_anew():
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
