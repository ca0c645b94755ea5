"""The hand-off (jobs/handoff.py): the worker that ends a key's job runs the key's next job
itself, straight from held to running; where a claim could not have taken that job, it is
queued as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox import queues
from django_outbox.db import statement_name
from django_outbox.jobs.claim import claim
from django_outbox.jobs.complete import Outcome, complete
from django_outbox.jobs.handoff import Handoff
from django_outbox.lib.resultids import parse_result_id
from django_outbox.models import Job, JobStatus
from django_outbox.worker.events import Event, Handed
from django_outbox.worker.loop import Worker, WorkerStats
from tests.conftest import stop_pool
from tests.models import Execution
from tests.tasks import in_sequence, per_customer

pytestmark = pytest.mark.django_db(transaction=True)


def handoff(room: int = 10, served: tuple[str, ...] = ("default",)) -> Handoff:
    return Handoff("w", frozenset(served), "default", room, 60.0)


def end_first_job(taking: Handoff | None) -> Job:
    """Claim and succeed the first queued job; returns it."""
    [job] = claim("w", ["default", "emails"], 1, 60)
    assert complete("w", [Outcome(job, succeeded=True)], taking) == 1
    return Job.objects.get(pk=job.id)


def pk(result: Any) -> int:
    return parse_result_id(result.id).pk


def status_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).status


def test_ending_a_keys_job_hands_its_next_job_to_the_worker_leased() -> None:
    ids = [pk(in_sequence.enqueue(31, n)) for n in range(3)]
    taking = handoff()
    end_first_job(taking)
    [handed] = taking.jobs
    assert handed.id == ids[1]
    assert (handed.attempts, handed.worker_ids, handed.args) == (1, ["w"], [31, 1])
    row = Job.objects.get(pk=handed.id)
    assert (row.status, row.worker_id, row.attempts) == (JobStatus.RUNNING, "w", 1)
    assert row.lease_until is not None and row.lease_until > timezone.now()
    assert status_of(ids[2]) == JobStatus.HELD  # the key's turn is taken
    assert taking.queued == 0


def test_without_a_handoff_the_next_job_is_queued() -> None:
    ids = [pk(in_sequence.enqueue(32, n)) for n in range(2)]
    end_first_job(None)
    assert status_of(ids[1]) == JobStatus.QUEUED


@pytest.mark.parametrize(
    "why",
    ["queue not served", "not due yet", "another backend's worker", "no room"],
)
def test_a_job_the_worker_could_not_have_claimed_is_queued_not_handed(why: str) -> None:
    task = in_sequence
    if why == "queue not served":
        task = in_sequence.using(queue_name="emails")
    if why == "not due yet":
        task = in_sequence.using(run_after=timezone.now() + timedelta(hours=1))
    in_sequence.enqueue(33, 0)
    later = task.enqueue(33, 1)
    taking = handoff(room=0 if why == "no room" else 10)
    if why == "another backend's worker":
        taking.backend = "elsewhere"
    end_first_job(taking)
    assert taking.jobs == []
    assert status_of(pk(later)) == JobStatus.QUEUED
    assert taking.queued == 1


def test_a_handoff_takes_no_more_than_its_room_oldest_first() -> None:
    # Three keys, each with a running job and a held one; one batch ends all three.
    for customer in (1, 2, 3):
        for n in range(2):
            per_customer.using(concurrency_limit=1).enqueue(customer, n)
    running = claim("w", ["default"], 10, 60)
    assert len(running) == 3
    taking = handoff(room=2)
    assert complete("w", [Outcome(job, succeeded=True) for job in running], taking) == 3
    held_ids = sorted(Job.objects.filter(args__1=1).values_list("id", flat=True))
    assert [job.id for job in taking.jobs] == held_ids[:2]
    assert status_of(held_ids[2]) == JobStatus.QUEUED
    assert taking.queued == 1


def test_a_sequence_runs_back_to_back_on_one_worker_handed_on_not_claimed(
    transactional_db: None,
) -> None:
    for n in range(5):
        in_sequence.enqueue(34, n)
    worker = Worker(queues=["default"], concurrency=1, burst=True)
    handed: list[int] = []
    post = worker.completer.post

    def counting(event: Event) -> None:
        if isinstance(event, Handed):
            handed.extend(job.id for job in event.jobs)
        post(event)

    worker.completer.post = counting
    try:
        stats = worker.run()
    finally:
        stop_pool(worker.pool)
    assert stats.succeeded == 5
    runs = Execution.objects.order_by("started")
    assert list(runs.values_list("key", flat=True)) == [f"34:{n}" for n in range(5)]
    assert len(set(runs.values_list("worker", flat=True))) == 1
    # Jobs 1 to 4 reached the worker from the completion of the one before: none was
    # queued, then claimed.
    assert handed == list(Job.objects.order_by("id").values_list("id", flat=True))[1:]
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


def test_a_paused_queue_is_not_handed_from(run_worker: Callable[..., WorkerStats]) -> None:
    in_sequence.enqueue(35, 0)
    later = in_sequence.using(queue_name="emails").enqueue(35, 1)
    queues.pause("emails")
    stats = run_worker(concurrency=1, queues=["default", "emails"])
    assert stats.succeeded == 1
    assert status_of(pk(later)) == JobStatus.QUEUED
    queues.resume("emails")
    assert run_worker(concurrency=1, queues=["default", "emails"]).succeeded == 1
    assert status_of(pk(later)) == JobStatus.SUCCEEDED


def test_a_limited_queues_job_goes_through_the_claim_not_the_handoff(
    run_worker: Callable[..., WorkerStats], settings: Any
) -> None:
    settings.OUTBOX = settings.OUTBOX | {"QUEUES": {"limited": {"concurrency": 1}}}
    in_sequence.enqueue(36, 0)
    later = in_sequence.using(queue_name="limited").enqueue(36, 1)
    with CaptureQueriesContext(connection) as queries:
        stats = run_worker(concurrency=2, queues=["default", "limited"])
    assert stats.succeeded == 2
    assert status_of(pk(later)) == JobStatus.SUCCEEDED
    names = [statement_name(query["sql"]) for query in queries.captured_queries]
    assert "key-handoff" not in names


def test_a_burst_worker_waiting_on_a_key_handed_on_elsewhere_leaves_without_its_poll(
    run_worker: Callable[..., WorkerStats], settings: Any
) -> None:
    """Worker "x" runs a sequence's first job; a burst worker started meanwhile has nothing
    to claim but the held second job, so it waits. x's completion hands the second job to
    x itself, which signals nobody, and ends it too: the burst worker must see that by
    looking again on its own, not at its next poll (30 s here)."""
    settings.OUTBOX = settings.OUTBOX | {"STALLED_CHECK_SECONDS": 30.0}
    in_sequence.enqueue(42, 0)
    in_sequence.enqueue(42, 1)
    [first] = claim("x", ["default"], 1, 60)

    def x_runs_the_key() -> None:
        try:
            time.sleep(0.5)
            taking = Handoff("x", frozenset({"default"}), "default", 1, 60.0)
            complete("x", [Outcome(first, succeeded=True)], taking)
            time.sleep(0.5)
            complete("x", [Outcome(job, succeeded=True) for job in taking.jobs])
        finally:
            connections.close_all()

    x = threading.Thread(target=x_runs_the_key)
    began = time.monotonic()
    x.start()
    try:
        stats = run_worker(concurrency=1)
    finally:
        x.join(30)
    assert stats.claimed == 0
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}
    # x ended the key's jobs after 1 s; the burst worker's poll would have come at 30 s
    # (and Redis's read of delayed jobs at 5 s).
    assert time.monotonic() - began < 4


def test_a_completion_tried_again_after_a_rollback_hands_off_afresh() -> None:
    """Database.run runs a completion again after a deadlock: the try that was rolled back
    took nothing, and the next one has the whole room again."""
    ids = [pk(in_sequence.enqueue(43, n)) for n in range(2)]
    [first] = claim("w", ["default"], 1, 60)
    taking = handoff(room=1)
    with pytest.raises(RuntimeError), transaction.atomic():
        complete("w", [Outcome(first, succeeded=True)], taking)
        raise RuntimeError("deadlock")
    assert status_of(ids[1]) == JobStatus.HELD
    assert complete("w", [Outcome(first, succeeded=True)], taking) == 1
    assert [job.id for job in taking.jobs] == [ids[1]]
    assert status_of(ids[1]) == JobStatus.RUNNING
