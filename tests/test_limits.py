"""Global concurrency limits per queue: at most N jobs of a limited queue run at once,
across every worker and process; other queues claim as before."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext, override_settings

from django_outbox.db import dialect
from django_outbox.jobs.claim import claim, claim_batch
from django_outbox.models import Job, JobStatus
from tests import tasks
from tests.conftest import wait_until
from tests.models import Execution
from tests.statements import names, one_claim

LIMITED = {"OUTBOX": settings.OUTBOX | {"QUEUES": {"limited": {"concurrency": 2}}}}


@pytest.mark.django_db
@override_settings(**LIMITED)
def test_a_claim_takes_no_more_than_the_queues_limit_leaves_room_for():
    for _ in range(5):
        tasks.add.using(queue_name="limited").enqueue(1, 2)
    for _ in range(3):
        tasks.add.enqueue(1, 2)
    first = claim("w1", ["default", "limited"], 10, 30)
    assert sorted(job.queue for job in first) == ["default"] * 3 + ["limited"] * 2
    assert claim("w2", ["limited"], 10, 30) == []  # two run: the queue is full
    done = next(job for job in first if job.queue == "limited")
    Job.objects.filter(pk=done.id).update(status=JobStatus.SUCCEEDED)
    assert len(claim("w2", ["limited"], 10, 30)) == 1  # one finished: room for one


@pytest.mark.django_db
@override_settings(**LIMITED)
def test_a_worker_takes_no_more_slots_than_it_has_idle_threads():
    """A slot goes to a job that starts now, not to one that would wait in a busy worker
    while a worker elsewhere idles."""
    for _ in range(5):
        tasks.add.using(queue_name="limited").enqueue(1, 2)
    tasks.add.enqueue(1, 2)
    one_thread = claim_batch("w1", ["default", "limited"], 10, 30, rated_room=1).jobs
    assert sorted(job.queue for job in one_thread) == ["default", "limited"]
    # The limit's second slot is left for another worker with a free thread.
    assert len(claim("w2", ["limited"], 10, 30)) == 1


@pytest.mark.django_db
def test_queues_without_a_limit_claim_in_one_statement_as_before():
    tasks.add.enqueue(1, 2)
    with CaptureQueriesContext(connection) as queries:
        assert len(claim("w1", ["default", "emails"], 10, 30)) == 1
    assert names(queries) == one_claim()
    with override_settings(**LIMITED), CaptureQueriesContext(connection) as queries:
        claim("w1", ["default", "limited"], 10, 30)
    # The limited queue's claim: its own statement, under the queue's lock where the
    # database has one (SQLite: one writer at a time anyway), then the other queues'.
    sql = dialect(connection.alias)
    claims = [name for name in names(queries) if name and name.startswith("claim")]
    if sql.update_returning:
        locked = sql.queue_lock(0, 0) is not None
        assert claims == ["claim-lock", "claim", "claim"] if locked else ["claim", "claim"]
    else:  # the running jobs counted first, a session's lock freed after the commit, and
        # no UPDATE where the SELECT found nothing (both queues are empty by now)
        assert claims == ["claim-lock", "claim-count", "claim", "claim-unlock", "claim"]
    assert "COUNT(*)" in " ".join(q["sql"] for q in queries)


@pytest.mark.django_db(transaction=True)
def test_four_worker_processes_never_run_more_than_the_limit_at_once(start_worker):
    jobs = [
        tasks.record_run.using(queue_name="limited").enqueue(f"run-{n}", 0.3) for n in range(12)
    ]
    env = {"OUTBOX_TEST_LIMITED": "2"}
    # One thread each: two runs at once can only be two processes at once. (With more
    # threads, the worker whose run ends takes the freed slot itself, and may run them all.)
    _workers = [
        start_worker("--queues", "limited", "--concurrency", "1", extra_env=env) for _ in range(4)
    ]
    wait_until(
        lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == len(jobs),
        60,
        "every job to succeed",
    )
    runs = list(Execution.objects.all())
    assert len(runs) == 12 and len({run.worker.rsplit(":", 1)[0] for run in runs}) >= 2
    # The most runs in progress at any moment: at every start, count the runs under way.
    overlap = max(
        sum(1 for other in runs if other.started <= run.started < other.finished) for run in runs
    )
    assert overlap == 2  # the limit was used, and never exceeded
    span = max(r.finished for r in runs) - min(r.started for r in runs)
    assert span >= timedelta(seconds=0.3 * 12 / 2 * 0.9)


@pytest.mark.django_db(transaction=True)
@override_settings(**LIMITED)
def test_a_burst_worker_waits_for_room_in_a_limited_queue_rather_than_leave(run_worker):
    for _ in range(3):
        tasks.add.using(queue_name="limited").enqueue(1, 2)
    # Another worker (gone quiet, say) holds the queue's two places for a moment.
    held = list(Job.objects.filter(queue="limited").order_by("pk")[:2])
    Job.objects.filter(pk__in=[j.pk for j in held]).update(status=JobStatus.RUNNING)

    def free_the_places() -> None:
        time.sleep(0.5)
        Job.objects.filter(pk__in=[j.pk for j in held]).update(status=JobStatus.SUCCEEDED)
        connections.close_all()

    freer = threading.Thread(target=free_the_places)
    freer.start()
    stats = run_worker(queues=["limited"])
    freer.join()
    assert stats.succeeded == 1  # it waited for a place, then ran the third job
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


@pytest.mark.django_db
@override_settings(**LIMITED)
def test_a_backlog_in_other_queues_does_not_crowd_out_a_limited_queue():
    for _ in range(20):
        tasks.add.enqueue(1, 2)
    tasks.add.using(queue_name="limited").enqueue(1, 2)
    claimed = claim("w1", ["default", "limited"], 5, 30)
    assert sorted(job.queue for job in claimed) == ["default"] * 4 + ["limited"]
